#pragma once
// Validation: the same eval_iters * global_batch_size validation samples every time (so
// evaluations compare directly), forward only through the pipeline, loss and perplexity of the
// LM part (and BERT's sentence-pair loss) over the whole validation batch.
#include <cstdint>

#include "megatron/config/recipe.h"
#include "megatron/training/batch_feeder.h"
#include "megatron/training/metrics.h"
#include "megatron/training/pipeline_runtime.h"

namespace megatron::training {

class Evaluator {
 public:
  Evaluator(const config::Recipe& recipe, const BatchSource& valid, const BatchFeeder& feeder,
            PipelineRuntime& pipeline, parallel::Communicator& pp, parallel::Communicator& dp,
            Device device);
  EvalMetrics evaluate(int64_t iteration);

 private:
  const config::Recipe& recipe_;
  const BatchSource* valid_;
  const BatchFeeder* feeder_;
  PipelineRuntime* pipeline_;
  parallel::Communicator *pp_, *dp_;
  Device device_;
};

}  // namespace megatron::training
