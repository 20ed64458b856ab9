#pragma once
// Pipeline timelines: what each rank did when (from the simulator or recorded by a runtime),
// JSONL files of them, their bubble statistics, and an SVG picture.
//
// JSONL: one event per line,
//   {"rank":0,"kind":"forward","microbatch":3,"chunk":0,"start_s":1.5,"end_s":2.5}
// kinds as action_kind_name(). Forward/backward events are compute ("busy"); send/recv events
// are the span from posting a p2p batch to its completion and count as idle.
#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

#include "megatron/pipeline/schedule.h"

namespace megatron::pipeline {

struct TimelineEvent {
  int rank;
  ActionKind kind;
  int microbatch, chunk;
  double start_s, end_s;
  bool operator==(const TimelineEvent&) const = default;
};

void write_timeline_jsonl(std::ostream& os, const std::vector<TimelineEvent>& events);
void write_timeline_jsonl(const std::string& path, const std::vector<TimelineEvent>& events);
// Blank lines are skipped. Malformed lines (bad JSON, missing or mistyped fields, unknown kind,
// negative rank/microbatch/chunk, end before start, non-finite times) throw InputError naming
// `source` and the line number.
std::vector<TimelineEvent> read_timeline_jsonl(std::istream& is, const std::string& source);
std::vector<TimelineEvent> read_timeline_jsonl(const std::string& path);

struct TimelineStats {
  int ranks = 0;                                  // max rank + 1
  int chunks = 1;                                 // max chunk + 1
  int microbatches = 0;                           // max micro-batch + 1
  double start_s = 0, end_s = 0, makespan_s = 0;  // over all events
  std::vector<double> busy_s;                     // per rank: total forward + backward time
  double bubble_fraction = 0;  // idle / total = 1 - sum(busy) / (ranks * makespan)
};
TimelineStats timeline_stats(const std::vector<TimelineEvent>& events);

// A recorded run's compute events (forward, backward, weight gradients) split into its training
// steps, in order: each step starts with stage 0's forward of micro-batch 0 (chunk 0). A step's
// timeline_stats then span its first to its last pass (what the pipeline takes; the optimizer
// and the communication after the last pass are outside).
std::vector<std::vector<TimelineEvent>> split_steps(const std::vector<TimelineEvent>& events);

// Mean time of one pass of each kind through one chunk (0 where there is none): what the
// simulator's CostModel takes per stage after multiplying by the chunks per stage.
struct PassTimes {
  double forward_s = 0, backward_s = 0, weight_s = 0;
};
PassTimes mean_pass_times(const std::vector<TimelineEvent>& events);

// Records a runtime's events on one rank. Times are seconds since construction (steady clock):
// construct the recorders of all ranks right after a barrier so their origins agree.
class TimelineRecorder {
 public:
  explicit TimelineRecorder(int rank);
  double now() const;
  void record(ActionKind kind, int microbatch, int chunk, double start_s, double end_s);
  // Records [construction, destruction) of the scope.
  class Scope {
   public:
    Scope(TimelineRecorder& r, ActionKind kind, int microbatch, int chunk)
        : r_(r), kind_(kind), mb_(microbatch), chunk_(chunk), start_(r.now()) {}
    ~Scope() { r_.record(kind_, mb_, chunk_, start_, r_.now()); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TimelineRecorder& r_;
    ActionKind kind_;
    int mb_, chunk_;
    double start_;
  };
  Scope scope(ActionKind kind, int microbatch, int chunk = 0) {
    return Scope(*this, kind, microbatch, chunk);
  }
  const std::vector<TimelineEvent>& events() const { return events_; }
  void clear() { events_.clear(); }

 private:
  int rank_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<TimelineEvent> events_;
};

struct SvgOptions {
  std::string title;       // prefix of the title; the bubble fraction is appended
  double width_px = 1200;  // drawing width of the time axis
  double row_height_px = 44;
  bool show_communication = true;  // thin marks under each row for p2p waits (end > start)
};
// Stages as rows (stage 0 on top), time to the right. Forward blocks in a light and backward
// blocks in a dark shade of the micro-batch's hue, numbered (".c" with the chunk when there are
// several); idle time shows as the hatched row background. Legend below, bubble in the title.
std::string render_timeline_svg(const std::vector<TimelineEvent>& events,
                                const SvgOptions& options = {});

}  // namespace megatron::pipeline
