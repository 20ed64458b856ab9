#pragma once
// Experts stored as one tensor per layer (GPT-OSS's mlp.experts.gate_up_proj [E, D, 2F],
// down_proj [E, F, D] and their biases [E, ...]), seen one expert at a time. The mappings
// (tensor_map.h) speak of each expert's slab as a tensor of its own, named `<fused>[e]`; on
// import FusedExpertSource reads just that slab from the Hugging Face files (never the whole
// fused tensor: gpt-oss-120b's is 4 GB), from the dense tensor or from its MXFP4 `_blocks` and
// `_scales` (mxfp4.h; quantized as [E, out, in], the slab transposed back to the parameter's
// [in, out]); on export the slabs are written in expert order into the fused tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "megatron/hf/hf_directory.h"

namespace megatron::hf {

struct FusedExperts {
  std::string name;                   // e.g. model.layers.0.mlp.experts.gate_up_proj
  int64_t experts = 0;                // the first dimension
  std::vector<int64_t> expert_shape;  // one expert's slab as the mappings see it
  // One expert's slab as the file stores it, where the mappings view it in another shape of
  // the same elements (GPT-OSS's interleaved bias [2F] as [F, 2]); empty: expert_shape.
  std::vector<int64_t> stored_shape;
  // The shape of the whole tensor in the file: [experts, stored (or expert) shape...].
  std::vector<int64_t> shape() const;
};

// "<fused>[e]": the name the mappings give expert e's slab.
std::string expert_slab_name(const std::string& fused, int64_t expert);
// (fused name, e) when `name` is such a slab name of one of `fused`; else (nullptr, -1).
std::pair<const FusedExperts*, int64_t> find_expert_slab(const std::vector<FusedExperts>& fused,
                                                         const std::string& name);

// The Hugging Face directory's tensors with the fused ones replaced by their slabs.
class FusedExpertSource final : public TensorSource {
 public:
  FusedExpertSource(const HfTensors& base, std::vector<FusedExperts> fused);
  std::string description() const override { return base_.description(); }
  std::vector<std::string> names() const override;
  bool has(const std::string& name) const override;
  std::vector<int64_t> shape(const std::string& name) const override;
  std::string where(const std::string& name) const override;
  std::string unreadable(const std::string& name) const override;
  std::vector<std::string> companions(const std::string& name) const override;
  std::vector<float> read(const std::string& name,
                          const std::vector<int64_t>& shape) const override;

 private:
  bool quantized(const FusedExperts& f) const;  // stored as MXFP4 _blocks / _scales
  std::vector<float> read_mxfp4(const FusedExperts& f, int64_t expert) const;
  // (out, groups of 32 inputs) of the quantized parts; InputError unless they fit f.
  std::pair<int64_t, int64_t> mxfp4_geometry(const FusedExperts& f) const;
  bool hidden(const std::string& name) const;  // a fused tensor or its MXFP4 parts

  const HfTensors& base_;
  std::vector<FusedExperts> fused_;
};

}  // namespace megatron::hf
