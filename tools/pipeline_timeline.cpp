// pipeline_timeline: draws a pipeline-parallel timeline (stages as rows, forward and backward
// blocks per micro-batch, idle gaps) as SVG, from recorded JSONL events or from the schedule
// simulator. Exit codes: 0 ok, 1 bad input or a schedule that fails the simulator's checks,
// 2 usage.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "data/cli.h"
#include "megatron/core/error.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/simulator.h"
#include "megatron/pipeline/timeline.h"

namespace {

constexpr const char* kUsage =
    R"(usage: pipeline_timeline --events FILE.jsonl [FILE.jsonl ...] --output FILE.svg [--title T]
       pipeline_timeline --simulate --pp P --microbatches M [--vpp V] [--group-size G]
                         [--forward-time TF] [--backward-time TB] [--p2p-time TP] [--buffered]
                         [--events-out FILE.jsonl] --output FILE.svg [--title T]

Renders a pipeline timeline as SVG: one row per stage, forward blocks in a light and backward
blocks in a dark shade of each micro-batch's colour, numbered, idle time hatched, and the
bubble fraction (idle / total stage-time over the makespan) in the title.
  --events         JSONL event files (one event per line: rank, kind, microbatch, chunk,
                   start_s, end_s), e.g. one per rank of a run; they are drawn together
  --simulate       simulate Megatron's schedule instead: no pipelining (pp 1), 1F1B (vpp 1)
                   or interleaved 1F1B (vpp > 1; M a multiple of P)
  --pp, --microbatches, --vpp, --group-size
                   pipeline size, micro-batches, model chunks per stage (default 1), and the
                   interleaved micro-batch group size per chunk (default P)
  --forward-time, --backward-time
                   time of one micro-batch through a whole stage (defaults 1 and 2); a chunk
                   takes 1/V of it
  --p2p-time       time of one activation/gradient message (default 0)
  --buffered       sends complete at once (default: rendezvous, a send waits for its receive)
  --events-out     also write the simulated events as JSONL
  --output         the SVG file to write
  --title          title text (default: the schedule, or the event file name)
)";

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  using megatron::data::cli::UsageError;
  namespace pl = megatron::pipeline;
  return megatron::data::cli::run_tool("pipeline_timeline", kUsage, [&]() -> int {
    const megatron::data::cli::Args args(argc, argv,
                                         {{"events", Arity::Many},
                                          {"simulate", Arity::Flag},
                                          {"pp", Arity::One},
                                          {"microbatches", Arity::One},
                                          {"vpp", Arity::One},
                                          {"group-size", Arity::One},
                                          {"forward-time", Arity::One},
                                          {"backward-time", Arity::One},
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

    std::vector<pl::TimelineEvent> events;
    pl::SvgOptions svg;
    if (args.has("simulate")) {
      const int pp = static_cast<int>(args.get_int("pp", 1, 1));
      if (!args.has("microbatches")) throw UsageError("--simulate needs --microbatches");
      const int m = static_cast<int>(args.get_int("microbatches", 1, 1));
      const int vpp = static_cast<int>(args.get_int("vpp", 1, 1));
      const int group = static_cast<int>(args.get_int("group-size", 0, 0));
      pl::Schedule schedule =
          group != 0 ? pl::make_schedule(pl::ScheduleKind::Interleaved, pp, m, vpp, group)
                     : pl::make_schedule(pp, m, vpp);
      pl::CostModel cost;
      cost.forward_s = args.get_double("forward-time", 1.0);
      cost.backward_s = args.get_double("backward-time", 2.0);
      cost.p2p_s = args.get_double("p2p-time", 0.0);
      if (args.has("buffered")) cost.send_mode = pl::CostModel::SendMode::Buffered;
      const pl::SimulationResult res = pl::simulate(schedule, cost);
      if (!res.ok()) {
        std::cerr << "pipeline_timeline: error: " << schedule.describe()
                  << " fails the simulator's checks:\n"
                  << res.report();
        return 1;
      }
      events = res.timeline;
      svg.title = args.get("title", schedule.describe());
      std::cout << schedule.describe() << ": makespan " << res.makespan_s << " s, bubble "
                << res.bubble_fraction << "\n";
      for (int r = 0; r < pp; ++r)
        std::cout << "  stage " << r << ": busy " << res.busy_s[static_cast<size_t>(r)]
                  << " s, peak in flight " << res.peak_in_flight[static_cast<size_t>(r)]
                  << (vpp > 1 ? " (micro-batch, chunk) pairs\n" : " micro-batches\n");
      if (args.has("events-out")) pl::write_timeline_jsonl(args.get("events-out"), events);
    } else {
      for (const std::string& path : args.values("events")) {
        auto more = pl::read_timeline_jsonl(path);
        events.insert(events.end(), more.begin(), more.end());
      }
      if (events.empty()) throw megatron::InputError("no events in the given --events files");
      svg.title = args.get("title", args.values("events").front());
      const pl::TimelineStats st = pl::timeline_stats(events);
      std::cout << events.size() << " events, " << st.ranks << " stages, " << st.microbatches
                << " micro-batches: makespan " << st.makespan_s << " s, bubble "
                << st.bubble_fraction << "\n";
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
