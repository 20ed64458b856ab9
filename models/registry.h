#pragma once
// The one place a recipe's model section becomes a model: the specs of each architecture
// (gpt, llama: GPTModel; bert: BertModel) and this rank's model chunks (pipeline virtual stages).
// The trainer, the planner and the tools all build models through it.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/common/yarn.h"
#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/moe/moe_spec.h"
#include "models/bert/bert_model.h"
#include "models/gpt/gpt_model.h"

namespace megatron::models {

// training.recompute -> the blocks' activation recomputation.
Recompute recompute_of(config::RecomputeGranularity granularity);
// training.precision -> the model dtype (fp32, bf16 or fp16) of weights and activations.
DType model_dtype_of(const config::TrainingConfig& training);
// The architecture of a model section (sizes, norm, activation, positions, biases, attention
// mask, block arrangement, dropouts, init): what the planner counts.
TransformerSpec transformer_spec_from_model(const config::ModelConfig& model);
// The recipe's YaRN keys (position_embedding: yarn).
math::YarnParams yarn_params(const config::ModelConfig& model);
// The transformer of a recipe (any arch) for a tensor-parallel size: the model's architecture
// with the run's seed, sequence parallelism, recompute, attention backend and precision.
TransformerSpec transformer_spec_from_recipe(const config::Recipe& recipe, int64_t tp_size);
// model.vocab_size, or the tokenizer's when 0 (InputError when smaller than the tokenizer's).
int64_t model_vocab(const config::Recipe& recipe, int64_t tokenizer_vocab);
GPTSpec gpt_spec_from_recipe(const config::Recipe& recipe, int64_t tokenizer_vocab,
                             int64_t tp_size);
BertSpec bert_spec_from_recipe(const config::Recipe& recipe, int64_t tokenizer_vocab,
                               int64_t tp_size);

// This rank's chunks of the model: virtual stage v = chunk * pp + pp_rank holds the v-th group
// of layers (an even split, or parallel.pipeline_layers), all on `store`, sharing one
// recompute workspace.
struct ModelChunks {
  std::vector<std::unique_ptr<Model>> chunks;
  TransformerSpec transformer;
  int64_t vocab_size = 0, padded_vocab = 0;  // real and padded (all tp ranks together)
  bool tied_embeddings = false;              // the LM head is the word embedding table
  // Mixture of experts (model.num_experts > 0): what the MoE layers share with the trainer.
  std::shared_ptr<moe::MoeState> moe;
  std::shared_ptr<parallel::Communicator> single_ep;  // the ep group when none was given
};
// moe_groups (MoE models): the expert-parallel group (a group of one when null), the experts'
// tensor-parallel group (null: tp; a group of one with parallel.expert_tensor 1, where ep spans
// the tp ranks) and the data-parallel group (global_aux_loss; null: one rank). cp: the
// context-parallel group (null or one rank: none); with more ranks the attention runs
// parallel.cp_comm_type's context-parallel core.
ModelChunks build_model_chunks(const config::Recipe& recipe, int64_t tokenizer_vocab,
                               ParamStore& store, parallel::Communicator& tp, int64_t pp_rank,
                               int64_t pp_size, const moe::MoeGroups& moe_groups = {},
                               parallel::Communicator* cp = nullptr);

}  // namespace megatron::models
