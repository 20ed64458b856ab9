#include "megatron/backend/float_args.h"

#include "megatron/backend/ops.h"

namespace megatron::ops::detail {
namespace {

bool is_float_storage(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace

FloatArgs::FloatArgs(const char* op, std::initializer_list<FloatArg> args) : op_(op), args_(args) {
  const FloatArg* first_t = nullptr;
  for (const FloatArg& a : args_) {
    if (a.t == nullptr) continue;
    const DType d = a.t->dtype();
    MT_CHECK(is_float_storage(d), op, ": ", a.name, " must be fp32, bf16 or fp16, got ",
             dtype_name(d));
    if (a.role == Role::F32)
      MT_CHECK(d == DType::F32, op, ": ", a.name, " must be fp32, got ", dtype_name(d));
    if (a.role == Role::T && first_t == nullptr) {
      first_t = &a;
      t_ = d;
    }
  }
  for (const FloatArg& a : args_) {
    if (a.t == nullptr || a.role == Role::F32) continue;
    const DType d = a.t->dtype();
    if (a.role == Role::T)
      MT_CHECK(d == t_, op, ": ", a.name, " is ", dtype_name(d), " but ", first_t->name, " is ",
               dtype_name(t_), " (these must have one dtype)");
    else
      MT_CHECK(d == DType::F32 || d == t_, op, ": ", a.name, " must be fp32 or ", dtype_name(t_),
               " (the dtype of ", first_t ? first_t->name : "the activations", "), got ",
               dtype_name(d));
  }
}

Fp32OnCpu::Fp32OnCpu(const FloatArgs& args) : op_(args.op()) {
  std::vector<bool> widened;  // per copy: holds the tensor's values (not only scratch)
  for (const FloatArg& a : args.args()) {
    if (a.t == nullptr) continue;
    Tensor& t = const_cast<Tensor&>(*a.t);
    if (t.dtype() == DType::F32) {
      entries_.push_back({a.t, t.data<float>(), -1});
      continue;
    }
    // One copy per distinct 16-bit tensor: an op given the same memory twice (in place, or the
    // same buffer as input and output) sees one fp32 copy and writes it back once.
    int copy = -1;
    for (const Entry& e : entries_)
      if (e.copy >= 0 && e.t->raw() == t.raw() && e.t->dtype() == t.dtype() &&
          e.t->numel() == t.numel())
        copy = e.copy;
    if (copy < 0) {
      copies_.push_back(Tensor::empty(t.shape(), DType::F32, Device::CPU));
      widened.push_back(false);
      copy = static_cast<int>(copies_.size()) - 1;
    }
    // A tensor the op only overwrites needs no widening: its old values are never read.
    if (a.access != Access::Write && !widened[static_cast<size_t>(copy)]) {
      cast(t, copies_[static_cast<size_t>(copy)]);
      widened[static_cast<size_t>(copy)] = true;
    }
    entries_.push_back({a.t, copies_[static_cast<size_t>(copy)].data<float>(), copy});
    if (a.written()) {
      bool listed = false;
      for (const auto& [target, c] : write_back_) listed = listed || c == copy;
      if (!listed) write_back_.emplace_back(&t, copy);
    }
  }
}

Tensor as_fp32(const Tensor& t) {
  if (t.dtype() == DType::F32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::F32, Device::CPU);
  cast(t, out);
  return out;
}

const Fp32OnCpu::Entry& Fp32OnCpu::entry(const Tensor& t) const {
  for (const Entry& e : entries_)
    if (e.t == &t) return e;
  MT_CHECK(false, op_, ": internal error: a tensor not listed in its FloatArgs");
  __builtin_unreachable();
}

void Fp32OnCpu::finish() {
  for (auto& [target, copy] : write_back_) cast(copies_[copy], *target);
  write_back_.clear();
}

}  // namespace megatron::ops::detail
