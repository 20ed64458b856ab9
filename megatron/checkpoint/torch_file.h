#pragma once
// A torch.save file (a PyTorch or Megatron-LM legacy checkpoint) read without Python: its
// data.pkl through the restricted unpickler (pickle.h), its tensors' storages through the zip
// reader (zip_reader.h). Tensors are rebuild nodes in the pickle; tensor() turns one into a
// CPU tensor of its dtype (strided views of a shared storage included), checked against the
// storage's size.
#include <cstdint>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/zip_reader.h"
#include "megatron/core/tensor.h"

namespace megatron::checkpoint {

struct TorchTensorRef {
  std::string storage;  // the storage's key (zip entry ARCHIVE/data/<key>)
  DType dtype = DType::F32;
  int64_t storage_numel = 0;
  int64_t offset = 0;  // in elements
  std::vector<int64_t> shape, stride;
};

class TorchFile {
 public:
  explicit TorchFile(const std::string& path);
  // A torch.save archive at bytes [base, base + length) of the file (ZipArchive's).
  TorchFile(const std::string& path, uint64_t base, uint64_t length);
  const PickleValue& root() const { return *root_; }
  const std::string& path() const { return zip_.path(); }

  // Whether `v` is a tensor (a _rebuild_tensor_v2 node, or a parameter wrapping one).
  static bool is_tensor(const PickleValue& v);
  // The tensor `v` describes; InputError naming `what` when it is not one or does not fit.
  TorchTensorRef tensor_ref(const PickleValue& v, const std::string& what) const;
  // Its values, as a contiguous CPU tensor of its dtype.
  Tensor tensor(const PickleValue& v, const std::string& what);

 private:
  void read_root();

  ZipArchive zip_;
  PickleRef root_;
};

}  // namespace megatron::checkpoint
