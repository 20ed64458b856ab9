#include "megatron/training/straggler_table.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/core/xml.h"

namespace megatron::training {

namespace {

StragglerReport report_of(const nlohmann::json& j) {
  StragglerReport r;
  r.first_iteration = j.at("first_iteration").get<int64_t>();
  r.last_iteration = j.at("last_iteration").get<int64_t>();
  r.median_busy = j.at("median_busy_s").get<double>();
  for (const auto& k : j.at("ranks")) {
    RankSplit s;
    s.rank = k.at("rank").get<int>();
    s.ratio = k.at("ratio").get<double>();
    s.per_step = StepSplit{k.at("data_s").get<double>(),      k.at("compute_s").get<double>(),
                           k.at("comm_s").get<double>(),      k.at("pipeline_s").get<double>(),
                           k.at("optimizer_s").get<double>(), k.at("step_s").get<double>()};
    r.ranks.push_back(s);
  }
  return r;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::vector<StragglerReport> read_straggler_reports(const std::string& path) {
  std::ifstream f(path);
  MT_INPUT_CHECK(f.good(), "cannot open '", path, "'");
  std::vector<StragglerReport> out;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    MT_INPUT_CHECK(!j.is_discarded() && j.is_object(), path, ":", n, ": not a JSON object");
    if (j.value("event", std::string()) != "stragglers") continue;
    try {
      out.push_back(report_of(j));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(
          concat(path, ":", n, ": a stragglers event without its fields (", e.what(), ")"));
    }
  }
  return out;
}

std::vector<RankSummary> summarize_ranks(const std::vector<StragglerReport>& reports) {
  std::map<int, RankSummary> by_rank;
  std::map<int, int> counts;
  for (const StragglerReport& r : reports)
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const RankSplit& s = r.ranks[i];
      RankSummary& sum = by_rank[s.rank];
      sum.rank = s.rank;
      sum.mean += s.per_step;
      sum.mean_ratio += s.ratio;
      sum.max_ratio = std::max(sum.max_ratio, s.ratio);
      sum.slowest += i == 0;
      ++counts[s.rank];
    }
  std::vector<RankSummary> out;
  for (auto& [rank, s] : by_rank) {
    const double n = counts[rank];
    s.mean = s.mean.scaled(1.0 / n);
    s.mean_ratio /= n;
    out.push_back(s);
  }
  return out;
}

std::string rank_table(const std::vector<RankSummary>& ranks) {
  std::vector<RankSummary> sorted = ranks;
  std::stable_sort(sorted.begin(), sorted.end(), [](const RankSummary& a, const RankSummary& b) {
    return a.mean.busy() > b.mean.busy();
  });
  std::ostringstream t;
  char head[160];
  std::snprintf(head, sizeof head, "%5s %9s %9s %9s %9s %9s %9s %9s %6s %6s %8s\n", "rank",
                "busy_s", "data_s", "compute_s", "optim_s", "comm_s", "pipe_s", "step_s", "ratio",
                "worst", "slowest");
  t << head;
  for (const RankSummary& r : sorted) {
    char row[200];
    std::snprintf(row, sizeof row,
                  "%5d %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %6.2f %6.2f %8d\n", r.rank,
                  r.mean.busy(), r.mean.data, r.mean.compute, r.mean.optimizer, r.mean.comm,
                  r.mean.pipeline, r.mean.step, r.mean_ratio, r.max_ratio, r.slowest);
    t << row;
  }
  return t.str();
}

std::string render_rank_svg(const std::vector<RankSummary>& ranks, const std::string& title) {
  const double bar_h = 22, gap = 8, left = 70, width = 640, top = 60;
  double longest = 0;
  for (const RankSummary& r : ranks) longest = std::max(longest, r.mean.step);
  const double scale = longest > 0 ? width / longest : 0;
  const double height = top + ranks.size() * (bar_h + gap) + 40;
  struct Part {
    const char* name;
    const char* colour;
    double StepSplit::*field;
  };
  const Part parts[] = {{"data", "#f2b134", &StepSplit::data},
                        {"compute", "#3a7dc9", &StepSplit::compute},
                        {"optimizer", "#7b4fb3", &StepSplit::optimizer},
                        {"communication", "#d9534f", &StepSplit::comm},
                        {"pipeline", "#9aa5b1", &StepSplit::pipeline}};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 120 << "\" height=\""
    << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\">" << xml_escape(title)
    << " (mean step per rank, seconds)</text>\n";
  double lx = 10;
  for (const Part& p : parts) {
    s << "<rect x=\"" << lx << "\" y=\"32\" width=\"12\" height=\"12\" fill=\"" << p.colour
      << "\"/><text x=\"" << lx + 16 << "\" y=\"43\">" << p.name << "</text>\n";
    lx += 110;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankSummary& r = ranks[i];
    const double y = top + i * (bar_h + gap);
    s << "<text x=\"10\" y=\"" << y + 15 << "\">rank " << r.rank << "</text>\n";
    double x = left;
    for (const Part& p : parts) {
      const double w = r.mean.*(p.field) * scale;
      if (w <= 0) continue;
      s << "<rect x=\"" << fixed(x, 2) << "\" y=\"" << y << "\" width=\"" << fixed(w, 2)
        << "\" height=\"" << bar_h << "\" fill=\"" << p.colour << "\"><title>" << p.name << " "
        << fixed(r.mean.*(p.field), 4) << " s</title></rect>\n";
      x += w;
    }
    s << "<text x=\"" << fixed(x + 6, 2) << "\" y=\"" << y + 15 << "\">" << fixed(r.mean.step, 3)
      << " s, " << fixed(r.mean_ratio, 2) << "x</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace megatron::training
