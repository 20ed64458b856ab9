#pragma once
// A recipe's data section as the trainer's sources: the tokenizer (or NullTokenizer's
// vocabulary size), and the train / validation splits of Megatron's GPT datasets (split,
// indexed, blended by weight; the index built once by world rank 0 and cached), of its BERT
// datasets, or synthetic samples (data.mock).
#include <cstdint>
#include <memory>
#include <ostream>
#include <utility>

#include "data/tokenizer.h"
#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/parallel/launch.h"
#include "megatron/training/batch_source.h"

namespace megatron::training {

using Sources = std::pair<std::shared_ptr<const BatchSource>, std::shared_ptr<const BatchSource>>;

struct TrainingData {
  std::unique_ptr<data::Tokenizer>
      tokenizer;           // null for NullTokenizer and tokenizer-less mock data
  int64_t vocab_size = 0;  // the tokenizer's (or the recipe's)
  std::shared_ptr<const BatchSource> train, valid;  // valid: null without validation data
};

// Progress and descriptions go to `out` (rank 0's stdout in pretrain).
TrainingData make_training_data(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                                parallel::Communicator& world, std::ostream& out);

}  // namespace megatron::training
