#include "megatron/training/step_split.h"

#include <algorithm>
#include <cstdio>

#include "megatron/parallel/timed_communicator.h"

namespace megatron::training {

StepSplit& StepSplit::operator+=(const StepSplit& o) {
  data += o.data;
  compute += o.compute;
  comm += o.comm;
  pipeline += o.pipeline;
  optimizer += o.optimizer;
  step += o.step;
  return *this;
}

StepSplit StepSplit::scaled(double f) const {
  return StepSplit{data * f, compute * f, comm * f, pipeline * f, optimizer * f, step * f};
}

TimedGroups::TimedGroups(const TrainerGroups& groups) : groups_(groups) {
  // One wrapper per communicator: groups that alias one another (expert_tp = tp, ...) still do.
  std::map<parallel::Communicator*, parallel::Communicator*> made;
  auto timed = [&](parallel::Communicator*& c, double& seconds) {
    if (c == nullptr) return;
    auto it = made.find(c);
    if (it == made.end()) {
      owned_.push_back(parallel::make_timed_communicator(*c, seconds));
      it = made.emplace(c, owned_.back().get()).first;
    }
    c = it->second;
  };
  timed(groups_.pp, pipeline_);
  for (parallel::Communicator** c :
       {&groups_.world, &groups_.tp, &groups_.dp, &groups_.embedding, &groups_.model, &groups_.ep,
        &groups_.expert_dp, &groups_.dp_shard, &groups_.dp_replica, &groups_.expert_tp, &groups_.cp,
        &groups_.dp_cp, &groups_.dp_shard_cp})
    timed(*c, other_);
}

TimedGroups::~TimedGroups() = default;

StepTimer::StepTimer(const TimedGroups& groups)
    : groups_(groups),
      start_(std::chrono::steady_clock::now()),
      last_(start_),
      last_pipeline_(groups.pipeline_seconds()),
      last_other_(groups.other_seconds()) {}

void StepTimer::mark(Phase phase) {
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - last_).count();
  const double pipeline = groups_.pipeline_seconds() - last_pipeline_;
  const double other = groups_.other_seconds() - last_other_;
  const double own = std::max(0.0, wall - pipeline - other);
  (phase == Phase::Data      ? split_.data
   : phase == Phase::Compute ? split_.compute
                             : split_.optimizer) += own;
  split_.pipeline += pipeline;
  split_.comm += other;
  split_.step = std::chrono::duration<double>(now - start_).count();
  last_ = now;
  last_pipeline_ = groups_.pipeline_seconds();
  last_other_ = groups_.other_seconds();
}

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

}  // namespace

std::string StragglerReport::describe(size_t count) const {
  std::string out = "stragglers, iterations " + std::to_string(first_iteration) + "-" +
                    std::to_string(last_iteration) + " (busy time per step: data + compute + " +
                    "optimizer; median " + seconds(median_busy) + "):";
  for (size_t i = 0; i < std::min(count, ranks.size()); ++i) {
    const RankSplit& r = ranks[i];
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2fx", r.ratio);
    out += (i ? "; " : " ") + std::string("rank ") + std::to_string(r.rank) + " " +
           seconds(r.per_step.busy()) + " = " + ratio + " (data " + seconds(r.per_step.data) +
           ", compute " + seconds(r.per_step.compute) + ", optimizer " +
           seconds(r.per_step.optimizer) + "; waited " +
           seconds(r.per_step.comm + r.per_step.pipeline) + ")";
  }
  return out;
}

nlohmann::json StragglerReport::to_json() const {
  nlohmann::json ranks_json = nlohmann::json::array();
  for (const RankSplit& r : ranks)
    ranks_json.push_back({{"rank", r.rank},
                          {"ratio", r.ratio},
                          {"busy_s", r.per_step.busy()},
                          {"data_s", r.per_step.data},
                          {"compute_s", r.per_step.compute},
                          {"comm_s", r.per_step.comm},
                          {"pipeline_s", r.per_step.pipeline},
                          {"optimizer_s", r.per_step.optimizer},
                          {"step_s", r.per_step.step}});
  return {{"first_iteration", first_iteration},
          {"last_iteration", last_iteration},
          {"median_busy_s", median_busy},
          {"ranks", ranks_json}};
}

std::optional<StragglerReport> gather_stragglers(parallel::Communicator& world,
                                                 const StepSplit& sum, int64_t steps, int64_t first,
                                                 int64_t last) {
  constexpr int64_t kFields = 6;
  const StepSplit mean = sum.scaled(1.0 / static_cast<double>(std::max<int64_t>(steps, 1)));
  double mine[kFields] = {mean.data,     mean.compute,   mean.comm,
                          mean.pipeline, mean.optimizer, mean.step};
  const int n = world.size();
  std::vector<double> all(static_cast<size_t>(n * kFields));
  Tensor in = Tensor::wrap(mine, {kFields}, DType::F64);
  Tensor out = Tensor::wrap(all.data(), {n * kFields}, DType::F64);
  world.all_gather(in, out);
  if (world.rank() != 0) return std::nullopt;
  StragglerReport r{first, last, 0.0, {}};
  for (int k = 0; k < n; ++k) {
    const double* f = all.data() + k * kFields;
    r.ranks.push_back({k, StepSplit{f[0], f[1], f[2], f[3], f[4], f[5]}, 0.0});
  }
  std::vector<double> busy;
  for (const RankSplit& s : r.ranks) busy.push_back(s.per_step.busy());
  std::sort(busy.begin(), busy.end());
  const size_t m = busy.size();
  r.median_busy = m % 2 ? busy[m / 2] : 0.5 * (busy[m / 2 - 1] + busy[m / 2]);
  for (RankSplit& s : r.ranks) s.ratio = r.median_busy > 0 ? s.per_step.busy() / r.median_busy : 1;
  std::stable_sort(r.ranks.begin(), r.ranks.end(), [](const RankSplit& a, const RankSplit& b) {
    return a.per_step.busy() > b.per_step.busy();
  });
  return r;
}

}  // namespace megatron::training
