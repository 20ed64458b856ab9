#include "megatron/training/evaluator.h"

#include <algorithm>
#include <cmath>

#include "megatron/training/grad_reductions.h"

namespace megatron::training {

Evaluator::Evaluator(const config::Recipe& recipe, const BatchSource& valid,
                     const BatchFeeder& feeder, PipelineRuntime& pipeline,
                     parallel::Communicator& pp, parallel::Communicator& dp, Device device)
    : recipe_(recipe),
      valid_(&valid),
      feeder_(&feeder),
      pipeline_(&pipeline),
      pp_(&pp),
      dp_(&dp),
      device_(device) {}

EvalMetrics Evaluator::evaluate(int64_t iteration) {
  const auto& tr = recipe_.training;
  const int64_t samples = std::max<int64_t>(tr.eval_iters, 1) * tr.global_batch_size;
  const int64_t rounds = feeder_->sampler().rounds(samples);
  std::vector<models::MicroBatch> batches;
  feeder_->fill(*valid_, 0, rounds, iteration, false, batches);
  const auto [lm_targets, aux_targets] = feeder_->global_target_counts(batches);
  for (models::MicroBatch& mb : batches) mb = feeder_->on_device(mb);
  const PipelineRuntime::FillMicroBatch fill_mb = [&](int m, models::MicroBatch& mb) {
    mb = batches[static_cast<size_t>(m)];
  };
  const models::LossSums sums = pipeline_->forward_only(static_cast<int>(rounds), fill_mb);
  const models::LossSums total = reduce_losses(sums, *pp_, *dp_, device_);
  EvalMetrics e;
  e.iteration = iteration;
  e.loss = lm_targets > 0 ? total.lm / lm_targets : 0.0;
  e.perplexity = std::exp(std::min(e.loss, 80.0));
  e.has_aux = aux_targets > 0;
  e.aux_loss = e.has_aux ? total.aux / aux_targets : 0.0;
  return e;
}

}  // namespace megatron::training
