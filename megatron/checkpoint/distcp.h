#pragma once
// PyTorch distributed checkpoints (torch.distributed.checkpoint, DCP; Megatron-Core's
// `torch_dist` format) read without Python. A checkpoint directory holds `.metadata` (a pickle:
// every tensor's dtype, global shape and chunks, and where each chunk's bytes are) and the data
// files `__R_I.distcp`, in which each tensor chunk is a torch.save archive of one tensor at the
// offset and length the metadata gives. Byte items (pickled Python objects: Transformer Engine's
// extra state, RNG states, an optimizer's param groups) are listed by name and read, when asked
// for, through the restricted unpickler.
//
// A box of a tensor is read from the chunks that overlap it, so a reader needs memory for the
// box and one chunk, never the whole tensor (a layer of a stacked [layers, ...] tensor).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle.h"
#include "megatron/core/tensor.h"

namespace megatron::checkpoint {

struct DcpChunk {
  std::vector<int64_t> offsets, sizes;  // the box of the global tensor it holds
  std::string file;                     // relative to the checkpoint directory
  uint64_t offset = 0, length = 0;      // its archive's bytes in the file
};

struct DcpTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<DcpChunk> chunks;
};

class DcpCheckpoint {
 public:
  // Reads dir/.metadata; InputError naming the file and what is wrong (a chunk outside its
  // tensor, a chunk with no storage entry, overlapping chunks, a dtype not read here).
  explicit DcpCheckpoint(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const std::map<std::string, DcpTensor>& tensors() const { return tensors_; }
  const DcpTensor* find(const std::string& name) const;
  const std::vector<std::string>& byte_items() const { return byte_items_; }

  // The box [offset, offset + extent) of tensor `name` in its dtype, assembled from every chunk
  // that overlaps it; InputError when a chunk's archive is damaged or does not hold the box it
  // should, or when some element of the box is in no chunk.
  Tensor read_box(const std::string& name, const std::vector<int64_t>& offset,
                  const std::vector<int64_t>& extent) const;
  Tensor read(const std::string& name) const;  // the whole tensor
  // A byte item's object (a torch.save of a Python value), through the restricted unpickler.
  PickleRef read_object(const std::string& name) const;

 private:
  void read_metadata();

  std::string dir_, metadata_path_;
  std::map<std::string, DcpTensor> tensors_;
  std::vector<std::string> byte_items_;
  std::map<std::string, DcpChunk> byte_storage_;  // where each byte item is
};

}  // namespace megatron::checkpoint
