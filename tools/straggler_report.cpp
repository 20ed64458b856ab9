// straggler_report: the straggler reports of a training log (logging.jsonl with
// logging.straggler_interval set) as a per-rank table on stdout and, with --output, an SVG of each
// rank's mean step split. Exit codes: 0 ok, 1 bad input or no reports, 2 usage.
#include <fstream>
#include <iostream>
#include <string>

#include "data/cli.h"
#include "megatron/core/error.h"
#include "megatron/training/straggler_table.h"

namespace {

constexpr const char* kUsage =
    R"(usage: straggler_report --log FILE.jsonl [--output FILE.svg] [--title T]

Reads the "stragglers" events a run writes every logging.straggler_interval steps (each rank's
step split: data, compute, optimizer, exposed communication, pipeline waits) and prints one row
per rank, slowest first: the mean seconds per step of each part, busy = data + compute +
optimizer, the mean and worst ratio of busy time to the median rank's, and how many reports
named the rank the slowest.
  --log      the run's JSONL log
  --output   also draw the ranks' mean step split as SVG (one stacked bar per rank)
  --title    the picture's title (default: the log's path)
)";

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  namespace tr = megatron::training;
  return megatron::data::cli::run_tool("straggler_report", kUsage, [&]() -> int {
    const megatron::data::cli::Args args(
        argc, argv, {{"log", Arity::One}, {"output", Arity::One}, {"title", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    const std::string log = args.required("log");
    const auto reports = tr::read_straggler_reports(log);
    if (reports.empty())
      throw megatron::InputError("'" + log +
                                 "' holds no stragglers events (was logging.straggler_interval "
                                 "set for the run?)");
    const auto ranks = tr::summarize_ranks(reports);
    std::cout << reports.size() << " reports, iterations " << reports.front().first_iteration << "-"
              << reports.back().last_iteration << ", " << ranks.size() << " ranks\n"
              << tr::rank_table(ranks);
    if (args.has("output")) {
      const std::string out = args.get("output", "");
      std::ofstream f(out);
      if (!f) throw megatron::InputError("cannot open '" + out + "' for writing");
      f << tr::render_rank_svg(ranks, args.get("title", log));
      f.flush();
      if (!f) throw megatron::InputError("error writing '" + out + "'");
      std::cout << "wrote " << out << "\n";
    }
    return 0;
  });
}
