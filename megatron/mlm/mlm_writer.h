#pragma once
// Megatron-LM checkpoints written without Python, for Megatron-LM to --load: a save directory
// with latest_checkpointed_iteration.txt and iter_NNNNNNN/ in either format:
//   torch_dist  one data file __0_0.distcp holding every tensor chunk (a layer of the stacked
//               [layers, ...] tensors per chunk, so a tensor streams a layer at a time; PyTorch's
//               distributed checkpoint reads any box of them, so Megatron loads it into any
//               layout), the .metadata pickle indexing them, common.pt (args, iteration,
//               checkpoint_version, content_metadata) and metadata.json;
//   torch       mp_rank_TT[_PPP]/model_optim_rng.pt per tensor x pipeline rank of the layout
//               asked for, each the model's local state dict as Megatron-Core names it for the
//               layer spec asked for (Transformer Engine's fused norms, or the local spec's).
// Tensors are the canonical ones of mlm_tensors.h (global, one per layer), asked for one at a
// time. The directory appears complete or not at all (written under a temporary name, renamed,
// the tracker file last); nothing already there is overwritten.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle_writer.h"
#include "megatron/core/dtype.h"
#include "megatron/mlm/mlm_checkpoint.h"

namespace megatron::mlm {

enum class LayerSpec { TransformerEngine, Local };

struct MlmTensorOut {
  std::string name;            // canonical (mlm_tensors.h)
  std::vector<int64_t> shape;  // global
};

struct MlmWriteSpec {
  Format format = Format::TorchDist;
  std::string root;  // the save directory (created; must not hold a checkpoint)
  int64_t iteration = 0;
  int64_t num_layers = 0;
  int64_t tp = 1, pp = 1;        // torch: the layout of the rank files
  bool swiglu = false;           // torch: fc1 holds [gate | up] per tensor rank
  bool tied_embeddings = false;  // torch, pp > 1: the last stage keeps a copy as output_layer
  LayerSpec spec = LayerSpec::TransformerEngine;  // torch: the state dict's names
  DType dtype = DType::F32;                       // of every tensor written
  checkpoint::Py args;                            // an argparse.Namespace of Megatron-LM's args
};

// `read(name)` gives a tensor's fp32 elements (its global shape). InputError naming the
// directory on a bad destination; Error on an inconsistent request (a converter bug).
void write_megatron_checkpoint(const MlmWriteSpec& spec, const std::vector<MlmTensorOut>& tensors,
                               const std::function<std::vector<float>(const std::string&)>& read);

}  // namespace megatron::mlm
