#pragma once
// Where an import's source tensors come from: a Hugging Face directory (hf_directory.h) or a
// Megatron-LM checkpoint (megatron/mlm). The conversion engine (convert.h) reads each tensor
// whole in fp32 by name; what the names are and how they map onto native parameters is the
// mappings' business.
#include <cstdint>
#include <string>
#include <vector>

namespace megatron::hf {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // What the tensors are, for messages and the checkpoint's metadata ("Hugging Face checkpoint
  // DIR").
  virtual std::string description() const = 0;
  virtual std::vector<std::string> names() const = 0;  // sorted
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // The file a tensor is in (what an error about it names).
  virtual std::string where(const std::string& name) const = 0;
  // Empty when the tensor's dtype converts to fp32, else why it does not.
  virtual std::string unreadable(const std::string& name) const = 0;
  // Other tensors read as part of this one (an FP8 weight's block scales).
  virtual std::vector<std::string> companions(const std::string& /*name*/) const { return {}; }
  // The tensor in fp32; its shape must be `shape` (InputError naming where and both shapes).
  virtual std::vector<float> read(const std::string& name,
                                  const std::vector<int64_t>& shape) const = 0;
};

}  // namespace megatron::hf
