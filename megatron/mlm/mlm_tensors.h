#pragma once
// A Megatron-LM checkpoint's model tensors as whole global tensors, one per layer, whatever the
// format and layout they were saved in: the conversion engine's source (megatron/hf/convert.h)
// for an import.
//
// Names are Megatron-Core's, with the layer number in them and the norms under their own
// modules whichever layer spec saved them: `embedding.word_embeddings.weight`,
// `decoder.layers.3.input_layernorm.weight` (Transformer Engine's spec saves it as
// `self_attention.linear_qkv.layer_norm_weight`),
// `decoder.layers.3.self_attention.linear_qkv.weight`
// ([groups, heads/groups + 2, head_dim] x hidden rows), `decoder.layers.3.pre_mlp_layernorm.weight`
// (TE: `mlp.linear_fc1.layer_norm_weight`), `decoder.layers.3.mlp.linear_fc1.weight` (with
// SwiGLU the gate's rows, then the up projection's), `decoder.final_layernorm.weight`,
// `output_layer.weight`; a mixture-of-experts layer's `decoder.layers.3.mlp.router.weight` and
// `decoder.layers.3.mlp.experts.5.linear_fc1.weight` (expert 5 of all, whichever expert rank
// held it).
//
// torch_dist: the distributed checkpoint's tensors, whose first axis counts the layers, are read
// a layer at a time. torch (legacy): each rank file's tensors, renumbered from the stage's (and
// virtual chunk's) local layer numbers and joined over tensor parallelism along the dimension
// Megatron-Core splits them (column-parallel rows, row-parallel columns; SwiGLU's fc1 holds
// [gate | up] per rank). A tensor whose split is not known here is an error with tp > 1.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "megatron/checkpoint/distcp.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/hf/tensor_source.h"
#include "megatron/mlm/mlm_checkpoint.h"
#include "megatron/mlm/mlm_layout.h"

namespace megatron::mlm {

class MlmTensors : public hf::TensorSource {
 public:
  explicit MlmTensors(const MlmCheckpoint& checkpoint);
  // torch_dist only: the tensors of `model`'s checkpoint under `prefix` (e.g.
  // "optimizer.state.exp_avg.", the fully reshardable optimizer state, which has the model's
  // names and layout), the prefix dropped; the metadata `model` read serves both.
  MlmTensors(const MlmTensors& model, const std::string& prefix);
  // torch_dist: the distributed checkpoint (its metadata parsed once); null for torch.
  const checkpoint::DcpCheckpoint* distributed() const { return dcp_.get(); }
  ~MlmTensors() override;

  std::string description() const override;
  std::vector<std::string> names() const override;
  bool has(const std::string& name) const override { return entries_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const override;
  std::string where(const std::string& name) const override;
  std::string unreadable(const std::string& name) const override;
  std::vector<float> read(const std::string& name,
                          const std::vector<int64_t>& shape) const override;
  // The dtype most of the model's weight bytes have ("F32", "BF16", "F16").
  std::string common_dtype() const;

 private:
  struct Piece {
    size_t file = 0;  // legacy: index into files_
    checkpoint::PickleRef value;
  };
  struct Entry {
    std::vector<int64_t> shape;  // global
    DType dtype = DType::F32;
    std::string where;
    // torch_dist: a box of one distributed tensor
    std::string dcp_name;
    std::vector<int64_t> dcp_offset, dcp_extent;
    // torch: one piece per tensor-parallel rank in rank order (one when replicated)
    std::vector<Piece> pieces;
    int split_dim = -1;  // -1: replicated
    bool gated = false;  // SwiGLU fc1: each piece is [gate | up]
  };
  void index_distributed();
  void index_legacy();
  void add_legacy_piece(const std::string& name, size_t file, const checkpoint::PickleRef& value,
                        int64_t tp_rank);
  std::vector<float> read_legacy(const std::string& name, const Entry& e) const;
  std::string global_expert_key(const std::string& key, int64_t ep_rank) const;

  const MlmCheckpoint& ckpt_;
  std::string prefix_;
  bool swiglu_ = false;
  std::shared_ptr<const checkpoint::DcpCheckpoint> dcp_;
  std::vector<std::unique_ptr<checkpoint::TorchFile>> files_;
  std::map<std::string, Entry> entries_;
};

}  // namespace megatron::mlm
