#pragma once
// The floating-point tensors of one op call (internal to megatron/backend: the CPU backend and
// the front end).
//  - FloatArgs checks the dtype contract every device shares (backend/cuda/ops_cuda.h lists it
//    op by op): the Role::T tensors have one type T of fp32, bf16 or fp16; Role::F32 tensors
//    (statistics, losses, accumulated fp32 gradients) are fp32; Role::TorF32 tensors are fp32
//    or T. Checking it for CPU tensors too means a layer passing a mix the CUDA kernels would
//    reject fails in the CPU tests, not first on a GPU.
//  - Fp32OnCpu gives the fp32 CPU kernels fp32 pointers for every argument: fp32 tensors are
//    used in place; a bf16/fp16 tensor gets an fp32 copy, widened from it unless the op only
//    overwrites it (Access::Write), and the copies of written tensors are rounded back by
//    finish() (round to nearest even). So a 16-bit op on the CPU
//    reads 16-bit inputs, computes in fp32 and rounds its outputs once, as the CUDA kernels do.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "megatron/core/tensor.h"

namespace megatron::ops::detail {

enum class Role : uint8_t { T, F32, TorF32 };
// How the op uses an argument: Read; Write (every element overwritten, old values never read);
// Update (read and written: accumulation, in place).
enum class Access : uint8_t { Read, Write, Update };

struct FloatArg {
  const Tensor* t;  // null: an optional tensor that was not given
  const char* name;
  Role role = Role::T;
  Access access = Access::Read;
  bool written() const { return access != Access::Read; }
};

class FloatArgs {
 public:
  FloatArgs(const char* op, std::initializer_list<FloatArg> args);
  const char* op() const { return op_; }
  const std::vector<FloatArg>& args() const { return args_; }
  DType t() const { return t_; }  // the Role::T dtype (fp32 when the op has none)

 private:
  const char* op_;
  std::vector<FloatArg> args_;
  DType t_ = DType::F32;
};

// t itself when it is fp32, else an fp32 copy widened from it (small CPU tensors: norm weights,
// a linear layer's weight, bias or 16-bit weight gradient).
Tensor as_fp32(const Tensor& t);

class Fp32OnCpu {
 public:
  explicit Fp32OnCpu(const FloatArgs& args);
  // fp32 data of an argument given to FloatArgs (by identity of the Tensor object).
  const float* in(const Tensor& t) const { return entry(t).data; }
  const float* in(const Tensor* t) const { return t ? in(*t) : nullptr; }
  float* out(Tensor& t) const { return entry(t).data; }
  float* out(Tensor* t) const { return t ? out(*t) : nullptr; }
  // Rounds the widened copies of written arguments back into them.
  void finish();

 private:
  struct Entry {
    const Tensor* t;
    float* data;
    int copy;  // index into copies_, -1: used in place
  };
  const Entry& entry(const Tensor& t) const;
  const char* op_;
  std::vector<Entry> entries_;
  std::vector<Tensor> copies_;
  std::vector<std::pair<Tensor*, int>> write_back_;  // (target, copy index)
};

}  // namespace megatron::ops::detail
