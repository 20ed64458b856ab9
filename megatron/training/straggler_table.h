#pragma once
// A run's straggler reports read back from its JSONL log (logging.jsonl, the "stragglers" events
// of logging.straggler_interval) and summed up per rank, as tools/straggler_report prints and
// draws them: each rank's mean step split, its mean and worst busy-time ratio to the median and
// how often it was the slowest.
#include <string>
#include <vector>

#include "megatron/training/step_split.h"

namespace megatron::training {

// The reports of a JSONL log (other lines skipped). InputError naming the file and line for a
// line that is not JSON or a stragglers event missing a field.
std::vector<StragglerReport> read_straggler_reports(const std::string& path);

struct RankSummary {
  int rank = 0;
  StepSplit mean;  // per step, over every report
  double mean_ratio = 0, max_ratio = 0;
  int slowest = 0;  // reports in which it was the slowest rank
};
// One entry per rank, in rank order.
std::vector<RankSummary> summarize_ranks(const std::vector<StragglerReport>& reports);

// A fixed-width table: one row per rank, slowest (by mean busy time) first.
std::string rank_table(const std::vector<RankSummary>& ranks);
// An SVG: one horizontal bar per rank (rank order), its mean step split stacked (data,
// compute, optimizer, communication, pipeline), the ratio at the end, a legend and `title`.
std::string render_rank_svg(const std::vector<RankSummary>& ranks, const std::string& title);

}  // namespace megatron::training
