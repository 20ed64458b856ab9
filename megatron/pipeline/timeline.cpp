#include "megatron/pipeline/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/core/xml.h"

namespace megatron::pipeline {

// ---- JSONL ------------------------------------------------------------------------------------

void write_timeline_jsonl(std::ostream& os, const std::vector<TimelineEvent>& events) {
  for (const TimelineEvent& e : events) {
    nlohmann::ordered_json j;
    j["rank"] = e.rank;
    j["kind"] = action_kind_name(e.kind);
    j["microbatch"] = e.microbatch;
    j["chunk"] = e.chunk;
    j["start_s"] = e.start_s;
    j["end_s"] = e.end_s;
    os << j.dump() << "\n";
  }
}

void write_timeline_jsonl(const std::string& path, const std::vector<TimelineEvent>& events) {
  std::ofstream f(path);
  MT_INPUT_CHECK(f, "cannot open '", path, "' for writing");
  write_timeline_jsonl(f, events);
  f.flush();
  MT_INPUT_CHECK(f, "error writing '", path, "'");
}

namespace {

int int_field(const nlohmann::json& j, const char* key, const std::string& at, bool required,
              int fallback = 0) {
  auto it = j.find(key);
  if (it == j.end()) {
    MT_INPUT_CHECK(!required, at, ": missing field \"", key, "\"");
    return fallback;
  }
  MT_INPUT_CHECK(it->is_number_integer(), at, ": field \"", key, "\" must be an integer");
  const auto v = it->get<int64_t>();
  MT_INPUT_CHECK(v >= 0 && v <= (1 << 30), at, ": field \"", key, "\" is out of range (", v, ")");
  return static_cast<int>(v);
}

double time_field(const nlohmann::json& j, const char* key, const std::string& at) {
  auto it = j.find(key);
  MT_INPUT_CHECK(it != j.end(), at, ": missing field \"", key, "\"");
  MT_INPUT_CHECK(it->is_number(), at, ": field \"", key, "\" must be a number");
  const double v = it->get<double>();
  MT_INPUT_CHECK(std::isfinite(v), at, ": field \"", key, "\" is not finite");
  return v;
}

}  // namespace

std::vector<TimelineEvent> read_timeline_jsonl(std::istream& is, const std::string& source) {
  std::vector<TimelineEvent> out;
  std::string line;
  for (int64_t n = 1; std::getline(is, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = concat(source, ":", n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(concat(at, ": not valid JSON (", e.what(), ")"));
    }
    MT_INPUT_CHECK(j.is_object(), at, ": expected a JSON object");
    TimelineEvent e{};
    e.rank = int_field(j, "rank", at, true);
    auto kind = j.find("kind");
    MT_INPUT_CHECK(kind != j.end() && kind->is_string(), at,
                   ": missing or non-string field \"kind\"");
    try {
      e.kind = parse_action_kind(kind->get<std::string>());
    } catch (const InputError& err) {
      throw InputError(concat(at, ": ", err.what()));
    }
    e.microbatch = int_field(j, "microbatch", at, true);
    e.chunk = int_field(j, "chunk", at, false, 0);
    e.start_s = time_field(j, "start_s", at);
    e.end_s = time_field(j, "end_s", at);
    MT_INPUT_CHECK(e.end_s >= e.start_s, at, ": end_s (", e.end_s, ") is before start_s (",
                   e.start_s, ")");
    out.push_back(e);
  }
  MT_INPUT_CHECK(!is.bad(), source, ": read error");
  return out;
}

std::vector<TimelineEvent> read_timeline_jsonl(const std::string& path) {
  std::ifstream f(path);
  MT_INPUT_CHECK(f, "cannot open timeline '", path, "'");
  return read_timeline_jsonl(f, path);
}

// ---- statistics -------------------------------------------------------------------------------

TimelineStats timeline_stats(const std::vector<TimelineEvent>& events) {
  TimelineStats st;
  if (events.empty()) return st;
  st.start_s = events.front().start_s;
  st.end_s = events.front().end_s;
  for (const TimelineEvent& e : events) {
    st.ranks = std::max(st.ranks, e.rank + 1);
    st.chunks = std::max(st.chunks, e.chunk + 1);
    st.microbatches = std::max(st.microbatches, e.microbatch + 1);
    st.start_s = std::min(st.start_s, e.start_s);
    st.end_s = std::max(st.end_s, e.end_s);
  }
  st.makespan_s = st.end_s - st.start_s;
  st.busy_s.assign(static_cast<size_t>(st.ranks), 0.0);
  for (const TimelineEvent& e : events)
    if (is_compute(e.kind)) st.busy_s[static_cast<size_t>(e.rank)] += e.end_s - e.start_s;
  double busy = 0;
  for (double b : st.busy_s) busy += b;
  st.bubble_fraction = st.makespan_s > 0 ? 1.0 - busy / (st.ranks * st.makespan_s) : 0.0;
  return st;
}

std::vector<std::vector<TimelineEvent>> split_steps(const std::vector<TimelineEvent>& events) {
  std::vector<TimelineEvent> passes;
  for (const TimelineEvent& e : events)
    if (is_compute(e.kind)) passes.push_back(e);
  std::stable_sort(
      passes.begin(), passes.end(),
      [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_s < b.start_s; });
  std::vector<std::vector<TimelineEvent>> steps;
  for (const TimelineEvent& e : passes) {
    const bool starts_step =
        e.rank == 0 && e.kind == ActionKind::Forward && e.microbatch == 0 && e.chunk == 0;
    if (starts_step || steps.empty()) steps.emplace_back();
    steps.back().push_back(e);
  }
  return steps;
}

PassTimes mean_pass_times(const std::vector<TimelineEvent>& events) {
  double sum[3] = {0, 0, 0};
  int64_t count[3] = {0, 0, 0};
  for (const TimelineEvent& e : events) {
    const int k = e.kind == ActionKind::Forward      ? 0
                  : e.kind == ActionKind::Backward   ? 1
                  : e.kind == ActionKind::WeightGrad ? 2
                                                     : -1;
    if (k < 0) continue;
    sum[k] += e.end_s - e.start_s;
    ++count[k];
  }
  auto mean = [&](int k) { return count[k] ? sum[k] / static_cast<double>(count[k]) : 0.0; };
  return {mean(0), mean(1), mean(2)};
}

// ---- recorder ---------------------------------------------------------------------------------

TimelineRecorder::TimelineRecorder(int rank)
    : rank_(rank), origin_(std::chrono::steady_clock::now()) {}

double TimelineRecorder::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void TimelineRecorder::record(ActionKind kind, int microbatch, int chunk, double start_s,
                              double end_s) {
  events_.push_back({rank_, kind, microbatch, chunk, start_s, end_s});
}

// ---- SVG --------------------------------------------------------------------------------------

namespace {

std::string hsl(double h, double s, double l) {  // h in degrees, s and l in [0, 1]
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = std::fmod(h, 360.0) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1)
    r = c, g = x;
  else if (hp < 2)
    r = x, g = c;
  else if (hp < 3)
    g = c, b = x;
  else if (hp < 4)
    g = x, b = c;
  else if (hp < 5)
    r = x, b = c;
  else
    r = c, b = x;
  const double m = l - c / 2;
  char buf[8];
  auto to8 = [&](double v) {
    return static_cast<int>(std::lround(std::clamp(v + m, 0.0, 1.0) * 255));
  };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", to8(r), to8(g), to8(b));
  return buf;
}

double hue_of(int mb) { return std::fmod(mb * 137.508 + 210.0, 360.0); }  // golden angle
std::string forward_colour(int mb) { return hsl(hue_of(mb), 0.70, 0.78); }
std::string backward_colour(int mb) { return hsl(hue_of(mb), 0.65, 0.36); }
std::string weight_colour(int mb) { return hsl(hue_of(mb), 0.45, 0.57); }
std::string compute_colour(ActionKind k, int mb) {
  if (k == ActionKind::Forward) return forward_colour(mb);
  return k == ActionKind::Backward ? backward_colour(mb) : weight_colour(mb);
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A round tick step giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw <= f * p) return f * p;
  return 10 * p;
}

std::string fmt_time(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::fabs(t) < 1e-12 ? 0.0 : t);
  return buf;
}

}  // namespace

std::string render_timeline_svg(const std::vector<TimelineEvent>& events, const SvgOptions& opt) {
  const TimelineStats st = timeline_stats(events);
  const int rows = std::max(st.ranks, 1);
  const double left = 100, right = 24, top = 56, gap = 8;
  const double rh = opt.row_height_px, width = opt.width_px;
  const double t0 = st.start_s, span = st.makespan_s > 0 ? st.makespan_s : 1.0;
  const double scale = width / span;
  const double rows_bottom = top + rows * (rh + gap) - gap;
  const double axis_y = rows_bottom + 6;
  bool any_comm = false, any_weight = false;
  for (const TimelineEvent& e : events) {
    if (!is_compute(e.kind) && e.end_s > e.start_s) any_comm = true;
    if (e.kind == ActionKind::WeightGrad) any_weight = true;
  }
  any_comm = any_comm && opt.show_communication;

  // Legend layout: the key line, then the micro-batch chips wrapped to the width.
  const double chip_w = 46;
  const int per_line = std::max(1, static_cast<int>(width / chip_w));
  const int chip_lines = (st.microbatches + per_line - 1) / per_line;
  const double legend_y = axis_y + 44;
  const double total_h = legend_y + 24 + chip_lines * 26 + 12;
  const double total_w = left + width + right;

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(total_w) << "\" height=\""
     << num(total_h) << "\" viewBox=\"0 0 " << num(total_w) << " " << num(total_h)
     << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  os << "<defs><pattern id=\"idle\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#f4f4f4\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#c8c8c8\" stroke-width=\"3\"/>"
        "</pattern></defs>\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  // Title.
  std::string title = opt.title.empty() ? std::string("pipeline timeline") : opt.title;
  char sub[160];
  std::snprintf(sub, sizeof sub, "bubble %.2f%% (idle / total stage-time), makespan %s s",
                100.0 * st.bubble_fraction, fmt_time(st.makespan_s).c_str());
  os << "<text x=\"" << num(left) << "\" y=\"24\" font-size=\"17\" font-weight=\"bold\">"
     << xml_escape(title) << " \xE2\x80\x94 " << sub << "</text>\n";

  // Rows: hatched background (idle), then the blocks.
  for (int r = 0; r < rows; ++r) {
    const double y = top + r * (rh + gap);
    os << "<text x=\"" << num(left - 10) << "\" y=\"" << num(y + rh / 2 + 5)
       << "\" font-size=\"13\" text-anchor=\"end\">stage " << r << "</text>\n";
    os << "<rect x=\"" << num(left) << "\" y=\"" << num(y) << "\" width=\"" << num(width)
       << "\" height=\"" << num(rh)
       << "\" fill=\"url(#idle)\" stroke=\"#999\" stroke-width=\"0.5\"/>\n";
  }
  const double comm_h = 4;
  for (const TimelineEvent& e : events) {
    const double y = top + e.rank * (rh + gap);
    const double x = left + (e.start_s - t0) * scale;
    const double w = (e.end_s - e.start_s) * scale;
    if (!is_compute(e.kind)) {
      if (any_comm && w > 0)
        os << "<rect x=\"" << num(x) << "\" y=\"" << num(y + rh - comm_h) << "\" width=\"" << num(w)
           << "\" height=\"" << num(comm_h) << "\" fill=\"#555\" opacity=\"0.55\"/>\n";
      continue;
    }
    const bool dark = e.kind == ActionKind::Backward;
    const double bh = any_comm ? rh - comm_h - 1 : rh;
    os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
       << num(bh) << "\" fill=\"" << compute_colour(e.kind, e.microbatch)
       << "\" stroke=\"white\" stroke-width=\"1\"><title>" << action_kind_name(e.kind)
       << " micro-batch " << e.microbatch << " chunk " << e.chunk << " [" << fmt_time(e.start_s)
       << ", " << fmt_time(e.end_s) << ")</title></rect>\n";
    const std::string label =
        st.chunks > 1 ? concat(e.microbatch, ".", e.chunk) : std::to_string(e.microbatch);
    const double fs = std::min(14.0, std::min(bh * 0.45, (w - 2) / (0.62 * label.size())));
    if (fs >= 6)
      os << "<text x=\"" << num(x + w / 2) << "\" y=\"" << num(y + bh / 2 + fs * 0.36)
         << "\" font-size=\"" << num(fs) << "\" text-anchor=\"middle\" fill=\""
         << (dark ? "white" : "#1a1a1a") << "\">" << label << "</text>\n";
  }

  // Time axis.
  os << "<line x1=\"" << num(left) << "\" y1=\"" << num(axis_y) << "\" x2=\"" << num(left + width)
     << "\" y2=\"" << num(axis_y) << "\" stroke=\"#333\"/>\n";
  const double step = tick_step(span, 10);
  for (double t = 0; t <= span * (1 + 1e-9); t += step) {
    const double x = left + t * scale;
    os << "<line x1=\"" << num(x) << "\" y1=\"" << num(axis_y) << "\" x2=\"" << num(x) << "\" y2=\""
       << num(axis_y + 5) << "\" stroke=\"#333\"/>"
       << "<text x=\"" << num(x) << "\" y=\"" << num(axis_y + 18)
       << "\" font-size=\"11\" text-anchor=\"middle\">" << fmt_time(t0 + t) << "</text>\n";
  }
  os << "<text x=\"" << num(left + width) << "\" y=\"" << num(axis_y + 32)
     << "\" font-size=\"11\" text-anchor=\"end\">time (s)</text>\n";

  // Legend: key, then one chip (forward | backward shade) per micro-batch.
  double lx = left;
  auto swatch = [&](const std::string& fill, const std::string& text) {
    os << "<rect x=\"" << num(lx) << "\" y=\"" << num(legend_y - 11) << "\" width=\"22\" "
       << "height=\"14\" fill=\"" << fill << "\" stroke=\"#999\" stroke-width=\"0.5\"/>"
       << "<text x=\"" << num(lx + 28) << "\" y=\"" << num(legend_y) << "\" font-size=\"12\">"
       << text << "</text>\n";
    lx += 28 + 7.2 * static_cast<double>(text.size()) + 18;
  };
  swatch(forward_colour(0), "forward (light)");
  swatch(backward_colour(0), any_weight ? "backward B (dark)" : "backward (dark)");
  if (any_weight) swatch(weight_colour(0), "weight gradients W (medium)");
  swatch("url(#idle)", "idle (bubble)");
  if (any_comm) swatch("#8a8a8a", "p2p wait");
  os << "<text x=\"" << num(lx) << "\" y=\"" << num(legend_y) << "\" font-size=\"12\">"
     << "colour = micro-batch" << (st.chunks > 1 ? "; label mb.chunk" : "") << "</text>\n";
  if (st.microbatches > 0)
    os << "<text x=\"" << num(left - 10) << "\" y=\"" << num(legend_y + 27)
       << "\" font-size=\"12\" text-anchor=\"end\">micro-batch</text>\n";
  for (int mb = 0; mb < st.microbatches; ++mb) {
    const double x = left + (mb % per_line) * chip_w;
    const double y = legend_y + 14 + (mb / per_line) * 26;
    os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"20\" height=\"18\" fill=\""
       << forward_colour(mb) << "\"/><rect x=\"" << num(x + 20) << "\" y=\"" << num(y)
       << "\" width=\"20\" height=\"18\" fill=\"" << backward_colour(mb) << "\"/>"
       << "<text x=\"" << num(x + 10) << "\" y=\"" << num(y + 13)
       << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#1a1a1a\">" << mb << "</text>"
       << "<text x=\"" << num(x + 30) << "\" y=\"" << num(y + 13)
       << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"white\">" << mb << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace megatron::pipeline
