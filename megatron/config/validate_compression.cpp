// Communication compression's checks: top-k gradient sparsification (parallel.grad_compression),
// 1-bit Adam (optimizer.type: onebit_adam) and ZeRO++'s quantised gathers and reductions against
// the sharding strategy, the precision and the run's length. (Both run on the CPU backend only so
// far: the trainer refuses them on cuda, so that the planner can size them for GPU clusters.)
#include <string>

#include "megatron/config/checker.h"
#include "megatron/config/recipe.h"

namespace megatron::config {

namespace {

void validate_topk(const Recipe& r, Checker& c) {
  if (r.parallel.grad_compression == GradCompression::None) return;
  c.check(r.sharding_strategy() == ShardingStrategy::NoShard, "parallel.grad_compression",
          concat("topk sums every rank's sparse gradients into the whole bucket, which the "
                 "sharding strategy ",
                 option_name(r.sharding_strategy()),
                 " reduce-scatters instead: use parallel.data_parallel_sharding_strategy: "
                 "no_shard"));
  // A re-run would send the step's gradients again and move the residuals twice.
  c.check(r.training.rerun_mode == RerunMode::Disabled, "parallel.grad_compression",
          concat("topk keeps error-feedback residuals that a re-run of the step would change; "
                 "training.rerun_mode ",
                 option_name(r.training.rerun_mode), " needs grad_compression: none"));
}

void validate_onebit_adam(const Recipe& r, Checker& c) {
  const OptimizerConfig& o = r.optimizer;
  if (o.type != OptimizerType::OnebitAdam) {
    c.check(o.freeze_step == 0, "optimizer.freeze_step",
            concat("is onebit_adam's (got ", o.freeze_step,
                   " with optimizer.type: ", option_name(o.type), ")"));
    return;
  }
  c.check(o.freeze_step >= 1 && o.freeze_step < r.training.train_iters, "optimizer.freeze_step",
          concat("onebit_adam needs its full-precision warm-up length, at least 1 and below "
                 "training.train_iters ",
                 r.training.train_iters, " (got ", o.freeze_step,
                 "); DeepSpeed suggests 15-25% of the run"));
  // Frozen while the learning rate still climbs, the variance is stale when the steps are largest:
  // gpt_tiny frozen at 15 or 20 of a 30-step warm-up diverged (loss 7.8 -> 700+).
  c.check(
      o.freeze_step >= o.schedule.warmup_iters, "optimizer.freeze_step",
      concat("must be at least optimizer.schedule.warmup_iters ", o.schedule.warmup_iters, " (got ",
             o.freeze_step, "): the variance freezes after the learning-rate warm-up"));
  c.check(r.sharding_strategy() == ShardingStrategy::NoShard, "optimizer.type",
          concat("onebit_adam exchanges each rank's whole local momentum, which the sharding "
                 "strategy ",
                 option_name(r.sharding_strategy()),
                 " splits over the ranks: use parallel.data_parallel_sharding_strategy: no_shard "
                 "(DeepSpeed's 1-bit Adam has no ZeRO either)"));
  c.check(r.training.precision != Precision::FP16, "optimizer.type",
          "onebit_adam with training.precision fp16: after the freeze no rank holds the whole "
          "gradient, so fp16's overflow check would differ between ranks (use bf16 or fp32)");
  c.check(r.parallel.grad_compression == GradCompression::None, "parallel.grad_compression",
          "onebit_adam compresses the momentum already: set grad_compression: none");
}

void validate_zero_plus_plus(const Recipe& r, Checker& c) {
  const ParallelConfig& p = r.parallel;
  const ShardingStrategy s = r.sharding_strategy();
  c.check(!p.zero_quantized_weights || s == ShardingStrategy::OptimGradsParams,
          "parallel.zero_quantized_weights",
          concat("quantises the gathers of sharded weights, which only optim_grads_params has "
                 "(got data_parallel_sharding_strategy ",
                 option_name(s), ")"));
  c.check(!p.zero_quantized_gradients || s == ShardingStrategy::OptimGrads ||
              s == ShardingStrategy::OptimGradsParams,
          "parallel.zero_quantized_gradients",
          concat("quantises the per-unit gradient reduce-scatters of optim_grads and "
                 "optim_grads_params (got data_parallel_sharding_strategy ",
                 option_name(s), ")"));
  c.check(p.zero_hpz_partition_size == 1, "parallel.zero_hpz_partition_size",
          concat("ZeRO++'s secondary weight partition is not implemented yet: leave it at 1 (got ",
                 p.zero_hpz_partition_size, ")"));
}

}  // namespace

void Recipe::validate_compression(Checker& c) const {
  validate_topk(*this, c);
  validate_onebit_adam(*this, c);
  validate_zero_plus_plus(*this, c);
}

}  // namespace megatron::config
