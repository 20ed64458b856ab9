#include "megatron/checkpoint/directory.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/error.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string iter_name(int64_t iteration) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

// "iter_<digits>" -> the number; anything else (temporaries included) -> nullopt.
std::optional<int64_t> parse_iter_name(std::string_view s) {
  if (s.substr(0, 5) != "iter_" || s.size() == 5 || s.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string checkpoint_path(const std::string& dir, int64_t iteration) {
  return (fs::path(dir) / iter_name(iteration)).string();
}

bool is_complete(const std::string& dir, int64_t iteration) {
  const std::string meta = (fs::path(checkpoint_path(dir, iteration)) / kMetadataFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(meta, ec)) return false;
  try {
    const json j = json::parse(io::read_file(meta), nullptr, false);
    return j.is_object() && j.contains("format_version") &&
           j["format_version"].is_number_integer() && j.contains("iteration") &&
           j["iteration"].is_number_integer() && j["iteration"].get<int64_t>() == iteration;
  } catch (const std::exception&) {
    return false;
  }
}

// Complete checkpoints in dir, newest first.
std::vector<int64_t> complete_iterations(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto n = parse_iter_name(it->path().filename().string());
    if (n && is_complete(dir, *n)) out.push_back(*n);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

LatestCheckpoint find_latest(const std::string& dir) {
  LatestCheckpoint found;
  std::optional<int64_t> named;  // the incomplete iteration `latest` names (reported once)
  const std::string latest = (fs::path(dir) / kLatestFile).string();
  std::error_code ec;
  if (fs::is_regular_file(latest, ec)) {
    try {
      std::string s = io::read_file(latest);
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
      auto n = parse_iter_name(s);
      if (!n) n = parse_iter_name("iter_" + s);
      if (n && is_complete(dir, *n)) {
        found.iteration = n;
        return found;
      }
      if (n) named = *n;
      found.skipped.push_back(n ? concat(latest, " names ", iter_name(*n),
                                         ", which is incomplete or unreadable (no valid ",
                                         kMetadataFile, ")")
                                : concat(latest, " holds '", s, "', not an iteration"));
    } catch (const std::exception& e) {
      found.skipped.push_back(concat(latest, " cannot be read (", e.what(), ")"));
    }
  }
  const auto all = complete_iterations(dir);
  if (!all.empty()) found.iteration = all.front();
  // Newer iteration directories than the one chosen are incomplete: say so.
  std::vector<int64_t> newer;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto n = parse_iter_name(it->path().filename().string());
    if (n && n != named && (!found.iteration || *n > *found.iteration) && !is_complete(dir, *n))
      newer.push_back(*n);
  }
  std::sort(newer.rbegin(), newer.rend());
  for (int64_t n : newer)
    found.skipped.push_back(
        concat(checkpoint_path(dir, n), " is incomplete (no valid ", kMetadataFile, "): skipped"));
  return found;
}

std::optional<int64_t> latest_iteration(const std::string& dir) {
  return find_latest(dir).iteration;
}

}  // namespace megatron::checkpoint
