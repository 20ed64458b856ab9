#include "megatron/training/rerun.h"

#include <bit>
#include <cmath>
#include <numeric>

#include "megatron/core/error.h"
#include "megatron/training/batch_feeder.h"

namespace megatron::training {

namespace {

constexpr size_t kHistory = 10;  // accepted losses a spike is measured against
constexpr size_t kMinHistory = 3;

bool same_bits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

}  // namespace

StepRerun::StepRerun(const config::Recipe& recipe, parallel::Communicator& world)
    : mode_(recipe.training.rerun_mode),
      spike_factor_(recipe.training.rerun_spike_factor),
      skip_batch_(recipe.training.rerun_skip_batch),
      injection_(recipe.training.error_injection_type),
      injection_iteration_(recipe.training.error_injection_iteration),
      injection_rank_(recipe.training.error_injection_rank),
      world_(&world) {
  MT_INPUT_CHECK(injection_ == config::ErrorInjection::None || injection_rank_ < world.size(),
                 recipe.source_path, ": training.error_injection_rank ", injection_rank_,
                 " is not a rank of this run's ", world.size());
}

std::string StepRerun::suspicious(double loss, double grad_norm) const {
  if (!std::isfinite(loss)) return concat("non-finite loss ", loss);
  if (!std::isfinite(grad_norm)) return concat("non-finite gradient norm ", grad_norm);
  if (recent_.size() >= kMinHistory) {
    const double mean =
        std::accumulate(recent_.begin(), recent_.end(), 0.0) / static_cast<double>(recent_.size());
    if (loss > spike_factor_ * mean)
      return concat("loss ", loss, " above ", spike_factor_, " x the mean ", mean, " of the last ",
                    recent_.size(), " steps");
  }
  return "";
}

void StepRerun::accept(double loss) {
  if (!std::isfinite(loss)) return;
  recent_.push_back(loss);
  if (recent_.size() > kHistory) recent_.pop_front();
}

bool StepRerun::inject(int64_t iteration, bool rerun) const {
  if (injection_ == config::ErrorInjection::None || iteration != injection_iteration_) return false;
  if (world_->rank() != injection_rank_) return false;
  return !rerun || injection_ == config::ErrorInjection::Persistent;
}

StepRerun::Verdict StepRerun::judge(int64_t iteration, const std::string& why,
                                    const RankResult& mine_first, const RankResult& mine_second,
                                    double loss_first, double loss_second, double norm_first,
                                    double norm_second, const std::string& samples) const {
  // Which ranks' own results differed between the runs (bit for bit).
  const bool differs = !same_bits(mine_first.loss_sum, mine_second.loss_sum) ||
                       !same_bits(mine_first.grad_sum_squares, mine_second.grad_sum_squares);
  std::vector<float> flags(static_cast<size_t>(world_->size()), 0.0f);
  float mine = differs ? 1.0f : 0.0f;
  Tensor in = Tensor::wrap(&mine, {1}, DType::F32);
  Tensor out = Tensor::wrap(flags.data(), {world_->size()}, DType::F32);
  world_->all_gather(in, out);
  std::string ranks;
  for (int r = 0; r < world_->size(); ++r)
    if (flags[static_cast<size_t>(r)] != 0.0f)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  Verdict v;
  v.repeated =
      ranks.empty() && same_bits(loss_first, loss_second) && same_bits(norm_first, norm_second);
  const std::string head = concat("iteration ", iteration, ": ", why, "; re-run on the same data");
  if (!v.repeated) {
    v.message = concat(head, " gave loss ", loss_second, " and gradient norm ", norm_second,
                       " (first run: ", loss_first, ", ", norm_first,
                       "): a transient fault, not the data; ",
                       ranks.empty() ? std::string("no single rank's own result differed")
                                     : "the results of rank(s) " + ranks + " differed",
                       "; training continues with the re-run's result");
    return v;
  }
  v.message = concat(head,
                     " repeated it bit for bit: a property of the data or the state, not a "
                     "transient fault (",
                     samples, ")");
  if (mode_ == config::RerunMode::Validate) {
    v.skip_batch = skip_batch_;
    v.stop = !skip_batch_;
    v.message += skip_batch_ ? "; the batch is skipped (training.rerun_skip_batch)"
                             : "; stopping (training.rerun_mode: validate; set "
                               "training.rerun_skip_batch to skip such batches)";
  }
  return v;
}

std::string describe_samples(const config::Recipe& recipe, int64_t first, int64_t count) {
  return concat("global samples ", first, "-", first + count - 1, " of the ",
                describe_data(recipe, true));
}

}  // namespace megatron::training
