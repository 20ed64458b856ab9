// pipeline_timeline: draws a pipeline-parallel timeline (stages as rows, forward and backward
// blocks per micro-batch, idle gaps) as SVG, from recorded JSONL events or from the schedule
// simulator. Exit codes: 0 ok, 1 bad input or a schedule that fails the simulator's checks,
// 2 usage.
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "data/cli.h"
#include "megatron/core/error.h"
#include "megatron/pipeline/dualpipe_v.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/simulator.h"
#include "megatron/pipeline/timeline.h"
#include "megatron/pipeline/zero_bubble.h"

namespace {

constexpr const char* kUsage =
    R"(usage: pipeline_timeline --events FILE.jsonl [FILE.jsonl ...] --output FILE.svg [--title T]
       pipeline_timeline --simulate --pp P --microbatches M [--vpp V] [--group-size G]
                         [--schedule S] [--forward-time TF] [--backward-time TB]
                         [--weight-time TW] [--plan-times F,B,W] [--p2p-time TP]
                         [--buffered]
                         [--events-out FILE.jsonl] --output FILE.svg [--title T]

Renders a pipeline timeline as SVG: one row per stage, forward blocks in a light, backward
blocks in a dark and weight-gradient (W) blocks in a medium shade of each micro-batch's colour,
numbered, idle time hatched, and the bubble fraction (idle / total stage-time over the
makespan) in the title.
  --events         JSONL event files (one event per line: rank, kind, microbatch, chunk,
                   start_s, end_s), e.g. one per rank of a run; they are drawn together. Also
                   printed: each training step's pipeline time and bubble (from its first to
                   its last pass) and the mean forward, backward and W pass times
  --simulate       simulate a schedule instead: by default no pipelining (pp 1), 1F1B (vpp 1)
                   or interleaved 1F1B (vpp > 1; M a multiple of P)
  --schedule       1f1b, interleaved, zb_h1, zb_v or dualpipe_v (backward split into B and
                   W; zb_v and dualpipe_v run two chunks per stage in a V, dualpipe_v needs
                   M >= 2P)
  --pp, --microbatches, --vpp, --group-size
                   pipeline size, micro-batches, model chunks per stage (default 1), and the
                   interleaved micro-batch group size per chunk (default P)
  --forward-time, --backward-time
                   time of one micro-batch through a whole stage (defaults 1 and 2); a chunk
                   takes 1/V of it
  --weight-time    the weight-gradient part of the backward time (zb_h1, zb_v, dualpipe_v;
                   default 1/2)
                   Each time flag takes one value, or one per stage separated by commas (the
                   zero-bubble lists are then made on their means)
  --plan-times     F,B,W: the relative forward, input-gradient and weight-gradient times
                   the zb_h1 / zb_v greedy plans its lists on (default: the simulated times;
                   1,1,1 gives the lists the trainer runs)
  --p2p-time       time of one activation/gradient message (default 0)
  --buffered       sends complete at once (default: rendezvous, a send waits for its receive)
  --events-out     also write the simulated events as JSONL
  --output         the SVG file to write
  --title          title text (default: the schedule, or the event file name)
)";

namespace pl = megatron::pipeline;
using megatron::data::cli::Args;
using megatron::data::cli::UsageError;

double parse_time(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw UsageError("--" + flag + ": '" + text + "' is not a number");
  }
}

pl::Schedule simulated_schedule(const Args& args, const pl::CostModel& cost) {
  const int pp = static_cast<int>(args.get_int("pp", 1, 1));
  if (!args.has("microbatches")) throw UsageError("--simulate needs --microbatches");
  const int m = static_cast<int>(args.get_int("microbatches", 1, 1));
  const int vpp = static_cast<int>(args.get_int("vpp", 1, 1));
  const int group = static_cast<int>(args.get_int("group-size", 0, 0));
  const std::string kind = args.get("schedule", "");
  pl::PassCosts passes{cost.forward_s, cost.backward_s - cost.weight_s, cost.weight_s};
  if (args.has("plan-times")) {  // what the greedy plans on, apart from what is simulated
    std::vector<double> t;
    std::stringstream ss(args.get("plan-times", ""));
    for (std::string part; std::getline(ss, part, ',');)
      t.push_back(parse_time("plan-times", part));
    if (t.size() != 3) throw UsageError("--plan-times needs three values F,B,W");
    passes = {t[0], t[1], t[2]};
  }
  if (kind == "zb_h1") return pl::zero_bubble_h1(pp, m, passes);
  if (kind == "zb_v") return pl::zero_bubble_v(pp, m, passes);
  if (kind == "dualpipe_v") return pl::dualpipe_v(pp, m);
  if (kind == "1f1b") return pl::make_schedule(pl::ScheduleKind::OneFOneB, pp, m, vpp);
  if (kind == "interleaved" || group != 0)
    return pl::make_schedule(pl::ScheduleKind::Interleaved, pp, m, vpp, group);
  if (!kind.empty())
    throw UsageError("--schedule must be 1f1b, interleaved, zb_h1, zb_v or dualpipe_v, got '" +
                     kind + "'");
  return pl::make_schedule(pp, m, vpp);
}

// A time flag: one value for every stage, or a comma-separated value per stage (kept in
// per_stage; `common` gets their mean).
void read_times(const Args& args, const std::string& flag, double fallback, double& common,
                std::vector<double>& per_stage) {
  common = fallback;
  if (!args.has(flag)) return;
  std::stringstream ss(args.get(flag, ""));
  std::vector<double> values;
  for (std::string part; std::getline(ss, part, ',');) {
    values.push_back(parse_time(flag, part));
  }
  if (values.empty()) throw UsageError("--" + flag + " needs a value");
  double sum = 0;
  for (double v : values) sum += v;
  common = sum / static_cast<double>(values.size());
  if (values.size() > 1) per_stage = std::move(values);
}

// --simulate: the schedule's events, or nothing (after the report) when it fails the checks.
std::optional<std::vector<pl::TimelineEvent>> simulate(const Args& args, pl::SvgOptions& svg) {
  pl::CostModel cost;
  read_times(args, "forward-time", 1.0, cost.forward_s, cost.stage_forward_s);
  read_times(args, "backward-time", 2.0, cost.backward_s, cost.stage_backward_s);
  read_times(args, "weight-time", cost.backward_s / 2, cost.weight_s, cost.stage_weight_s);
  cost.p2p_s = args.get_double("p2p-time", 0.0);
  if (args.has("buffered")) cost.send_mode = pl::CostModel::SendMode::Buffered;
  const pl::Schedule schedule = simulated_schedule(args, cost);
  const pl::SimulationResult res = pl::simulate(schedule, cost);
  if (!res.ok()) {
    std::cerr << "pipeline_timeline: error: " << schedule.describe()
              << " fails the simulator's checks:\n"
              << res.report();
    return std::nullopt;
  }
  svg.title = args.get("title", schedule.describe());
  std::cout << schedule.describe() << ": makespan " << res.makespan_s << " s, bubble "
            << res.bubble_fraction << "\n";
  for (int r = 0; r < schedule.pp; ++r)
    std::cout << "  stage " << r << ": busy " << res.busy_s[static_cast<size_t>(r)]
              << " s, peak in flight " << res.peak_in_flight[static_cast<size_t>(r)]
              << (schedule.vpp > 1 ? " (micro-batch, chunk) pairs\n" : " micro-batches\n");
  if (args.has("events-out")) pl::write_timeline_jsonl(args.get("events-out"), res.timeline);
  return res.timeline;
}

std::vector<pl::TimelineEvent> recorded(const Args& args, pl::SvgOptions& svg) {
  std::vector<pl::TimelineEvent> events;
  for (const std::string& path : args.values("events")) {
    auto more = pl::read_timeline_jsonl(path);
    events.insert(events.end(), more.begin(), more.end());
  }
  if (events.empty()) throw megatron::InputError("no events in the given --events files");
  svg.title = args.get("title", args.values("events").front());
  const pl::TimelineStats st = pl::timeline_stats(events);
  std::cout << events.size() << " events, " << st.ranks << " stages, " << st.microbatches
            << " micro-batches: makespan " << st.makespan_s << " s, bubble " << st.bubble_fraction
            << "\n";
  const auto steps = pl::split_steps(events);
  for (size_t i = 0; i < steps.size(); ++i) {
    const pl::TimelineStats s = pl::timeline_stats(steps[i]);
    std::cout << "  step " << i + 1 << ": pipeline " << s.makespan_s << " s, bubble "
              << s.bubble_fraction << "\n";
  }
  const pl::PassTimes t = pl::mean_pass_times(events);
  std::cout << "mean pass per chunk: forward " << t.forward_s << " s, backward " << t.backward_s
            << " s, weight gradients " << t.weight_s << " s\n";
  return events;
}

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  return megatron::data::cli::run_tool("pipeline_timeline", kUsage, [&]() -> int {
    const Args args(argc, argv,
                    {{"events", Arity::Many},
                     {"simulate", Arity::Flag},
                     {"pp", Arity::One},
                     {"microbatches", Arity::One},
                     {"vpp", Arity::One},
                     {"group-size", Arity::One},
                     {"schedule", Arity::One},
                     {"forward-time", Arity::One},
                     {"backward-time", Arity::One},
                     {"weight-time", Arity::One},
                     {"plan-times", Arity::One},
                     {"p2p-time", Arity::One},
                     {"buffered", Arity::Flag},
                     {"events-out", Arity::One},
                     {"output", Arity::One},
                     {"title", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    const std::string output = args.required("output");
    if (args.has("simulate") == args.has("events"))
      throw UsageError("give either --events FILE... or --simulate");
    pl::SvgOptions svg;
    std::vector<pl::TimelineEvent> events;
    if (args.has("simulate")) {
      auto simulated = simulate(args, svg);
      if (!simulated) return 1;
      events = std::move(*simulated);
    } else {
      events = recorded(args, svg);
    }
    std::ofstream f(output);
    if (!f) throw megatron::InputError("cannot open '" + output + "' for writing");
    f << pl::render_timeline_svg(events, svg);
    f.flush();
    if (!f) throw megatron::InputError("error writing '" + output + "'");
    std::cout << "wrote " << output << "\n";
    return 0;
  });
}
