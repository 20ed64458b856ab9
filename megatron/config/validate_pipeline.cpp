// The pipeline schedule's checks: against the pipeline and chunk sizes (ParallelConfig), the
// model and the device (Recipe), and the micro-batches of a step (against a world size).
#include <cmath>
#include <string>

#include "megatron/config/checker.h"
#include "megatron/config/recipe.h"

namespace megatron::config {

void ParallelConfig::validate_pipeline_schedule(Checker& c) const {
  validate_pass_times(c);
  if (!pipeline_schedule) return;
  const std::string name(option_name(*pipeline_schedule));
  switch (*pipeline_schedule) {
    case PipelineSchedule::OneFOneB:
    case PipelineSchedule::ZbH1:
      c.check(virtual_stages() == 1, "parallel.pipeline_schedule",
              concat(name,
                     " runs one model chunk per stage: parallel.virtual_pipeline must be "
                     "unset or 1 (got ",
                     virtual_stages(), ")"));
      break;
    case PipelineSchedule::ZbV:
    case PipelineSchedule::DualPipeV:
      c.check(virtual_stages() == 2, "parallel.pipeline_schedule",
              concat(name,
                     " places two model chunks per stage in a V: set "
                     "parallel.virtual_pipeline: 2 (got ",
                     virtual_stages(), ")"));
      break;
    case PipelineSchedule::Interleaved:
      c.check(
          virtual_stages() > 1, "parallel.pipeline_schedule",
          concat("interleaved needs parallel.virtual_pipeline >= 2 (got ", virtual_stages(), ")"));
      break;
  }
  if (splits_backward())
    c.check(pipeline >= 2, "parallel.pipeline_schedule",
            concat(name, " needs parallel.pipeline >= 2 (got ", pipeline, ")"));
}

void ParallelConfig::validate_pass_times(Checker& c) const {
  if (zero_bubble_pass_times.empty()) return;
  const PipelineSchedule s = pipeline_schedule_kind();
  c.check(
      s == PipelineSchedule::ZbH1 || s == PipelineSchedule::ZbV, "parallel.zero_bubble_pass_times",
      concat("plans the lists of zb_h1 and zb_v; parallel.pipeline_schedule is ", option_name(s)));
  c.check(zero_bubble_pass_times.size() == 3, "parallel.zero_bubble_pass_times",
          concat("needs three times [forward, input gradient, weight gradient] (got ",
                 zero_bubble_pass_times.size(), " values)"));
  for (size_t i = 0; i < zero_bubble_pass_times.size(); ++i)
    c.check(std::isfinite(zero_bubble_pass_times[i]) && zero_bubble_pass_times[i] > 0,
            "parallel.zero_bubble_pass_times",
            concat("entries must be finite and > 0 (got ", zero_bubble_pass_times[i], " at index ",
                   i, ")"));
}

// (On CUDA the trainer refuses them: the planner sizes them for GPU clusters all the same.)
void Recipe::validate_pipeline(Checker& c) const {
  if (!parallel.splits_backward()) return;
  const std::string name(option_name(parallel.pipeline_schedule_kind()));
  // The V's last virtual stage shares stage 0's tied table: the decoders' tied head does.
  c.check(!parallel.v_placement() || model.arch != Arch::BERT, "parallel.pipeline_schedule",
          concat(name, " runs the decoder models (arch gpt, llama) so far"));
}

void Recipe::validate_pipeline_for_world(Checker& c, int64_t dp) const {
  const int64_t per_step = training.micro_batch_size * dp;
  if (parallel.pipeline_schedule_kind() != PipelineSchedule::DualPipeV || per_step <= 0) return;
  const int64_t microbatches = training.global_batch_size / per_step;
  const int64_t needed = 2 * parallel.pipeline;
  c.check(microbatches >= needed, "training.global_batch_size",
          concat("dualpipe_v needs at least 2 * parallel.pipeline = ", needed,
                 " micro-batches per step, got ", training.global_batch_size,
                 " / (training.micro_batch_size ", training.micro_batch_size,
                 " * data-parallel size ", dp, ") = ", microbatches,
                 ": the smallest valid training.global_batch_size is ", needed * per_step));
}

}  // namespace megatron::config
