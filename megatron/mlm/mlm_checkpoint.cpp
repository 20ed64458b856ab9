#include "megatron/mlm/mlm_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "megatron/checkpoint/torch_file.h"
#include "megatron/core/error.h"

namespace megatron::mlm {
namespace {

namespace fs = std::filesystem;
using checkpoint::PickleRef;
using checkpoint::PickleValue;
using Kind = PickleValue::Kind;

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kRankFile = "model_optim_rng.pt";

std::string iteration_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

// The tracker file: an iteration number or "release".
std::string read_tracker(const fs::path& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  MT_INPUT_CHECK(text == "release" || std::regex_match(text, std::regex("[0-9]{1,12}")),
                 path.string(), ": holds '", text.substr(0, 40),
                 "', not an iteration number or 'release'");
  return text;
}

// DIR as given -> (save directory, iteration directory).
std::pair<fs::path, fs::path> locate(const fs::path& given, std::optional<int64_t> iteration,
                                     MlmCheckpoint& out) {
  std::error_code ec;
  MT_INPUT_CHECK(fs::is_directory(given, ec), "Megatron-LM checkpoint ", given.string(),
                 " is not a directory");
  const std::string base = given.filename().string();
  std::smatch m;
  if (std::regex_match(base, m, std::regex("iter_([0-9]{7,})")) || base == "release") {
    out.release = base == "release";
    out.iteration = out.release ? 0 : std::stoll(m[1].str());
    MT_INPUT_CHECK(!iteration || *iteration == out.iteration, given.string(), " is iteration ",
                   out.iteration, ", not the ", *iteration, " asked for");
    return {given.parent_path(), given};
  }
  std::string which;
  if (iteration) {
    which = std::to_string(*iteration);
  } else {
    const fs::path tracker = given / kTracker;
    MT_INPUT_CHECK(fs::is_regular_file(tracker, ec), "Megatron-LM checkpoint ", given.string(),
                   " has no ", kTracker, " (give an iter_NNNNNNN directory or --iteration)");
    which = read_tracker(tracker);
  }
  out.release = which == "release";
  out.iteration = out.release ? 0 : std::stoll(which);
  const fs::path dir =
      given / (out.release ? std::string("release") : iteration_dir_name(out.iteration));
  MT_INPUT_CHECK(fs::is_directory(dir, ec), "Megatron-LM checkpoint ", given.string(), " has no ",
                 dir.filename().string(), " directory");
  return {given, dir};
}

// mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt files of a legacy checkpoint.
void find_rank_files(const fs::path& dir, MlmCheckpoint& out) {
  const std::regex pattern("mp_rank_([0-9]{2})(_([0-9]{3}))?(_([0-9]{3}))?");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(name, m, pattern)) continue;
    MlmCheckpoint::RankFile f;
    f.path = (e.path() / kRankFile).string();
    std::error_code ec;
    MT_INPUT_CHECK(fs::is_regular_file(f.path, ec), e.path().string(), " has no ", kRankFile);
    f.tp_rank = std::stoll(m[1].str());
    f.pp_rank = m[3].matched ? std::stoll(m[3].str()) : 0;
    f.ep_rank = m[5].matched ? std::stoll(m[5].str()) : 0;
    out.rank_files.push_back(f);
  }
  std::sort(out.rank_files.begin(), out.rank_files.end(), [](const auto& a, const auto& b) {
    return std::tie(a.pp_rank, a.ep_rank, a.tp_rank) < std::tie(b.pp_rank, b.ep_rank, b.tp_rank);
  });
  MT_INPUT_CHECK(!out.rank_files.empty(), dir.string(), ": neither .metadata (torch_dist) nor ",
                 "mp_rank_* directories (torch): not a Megatron-LM checkpoint");
}

// The top-level dict of common.pt (torch_dist) or of the first rank file (torch), read once.
void read_common(MlmCheckpoint& out) {
  const std::string where = out.format == Format::TorchDist
                                ? (fs::path(out.dir) / "common.pt").string()
                                : out.rank_files.front().path;
  std::error_code ec;
  MT_INPUT_CHECK(out.format != Format::TorchDist || fs::is_regular_file(where, ec), out.dir,
                 ": no common.pt (Megatron-LM's args and iteration)");
  checkpoint::TorchFile file(where);
  out.top = std::make_shared<PickleValue>(file.root());
  const PickleRef& top = out.top;
  MT_INPUT_CHECK(top->is(Kind::Dict), where, ": holds ", top->describe(),
                 ", not a Megatron-LM checkpoint dict");
  const PickleValue* args = top->get("args");
  MT_INPUT_CHECK(args && args->is(Kind::Object) && args->text == "argparse.Namespace", where,
                 ": no args (an argparse.Namespace) in the checkpoint: saved without "
                 "Megatron-LM's arguments, which the import needs to know the model");
  out.args = MlmArgs(std::make_shared<PickleValue>(*args), where);
  if (const PickleValue* it = top->get("iteration"); it && it->is(Kind::Int) && !out.release)
    MT_INPUT_CHECK(it->integer == out.iteration, where, ": iteration ", it->integer,
                   " in a directory of iteration ", out.iteration);
}

void read_layout(MlmCheckpoint& out) {
  const MlmArgs& a = out.args;
  out.tp = a.integer_or("tensor_model_parallel_size", 1);
  out.pp = a.integer_or("pipeline_model_parallel_size", 1);
  out.ep = a.integer_or("expert_model_parallel_size", 1);
  out.vpp = a.integer_or("virtual_pipeline_model_parallel_size", 1);
  MT_INPUT_CHECK(out.tp >= 1 && out.pp >= 1 && out.ep >= 1 && out.vpp >= 1, a.where(),
                 ": parallel sizes tp ", out.tp, " pp ", out.pp, " ep ", out.ep, " vpp ", out.vpp);
  if (out.format != Format::Torch) return;
  std::set<std::tuple<int64_t, int64_t, int64_t>> have;
  for (const auto& f : out.rank_files) have.insert({f.tp_rank, f.pp_rank, f.ep_rank});
  for (int64_t p = 0; p < out.pp; ++p)
    for (int64_t e = 0; e < out.ep; ++e)
      for (int64_t t = 0; t < out.tp; ++t)
        MT_INPUT_CHECK(have.count({t, p, e}), out.dir, ": no file of tensor rank ", t,
                       ", pipeline rank ", p, ", expert rank ", e, " (args say tp ", out.tp, " pp ",
                       out.pp, " ep ", out.ep, ")");
  MT_INPUT_CHECK(static_cast<int64_t>(have.size()) == out.tp * out.pp * out.ep, out.dir, ": ",
                 have.size(), " mp_rank files where args say tp ", out.tp, " x pp ", out.pp,
                 " x ep ", out.ep);
}

}  // namespace

const char* format_name(Format f) { return f == Format::TorchDist ? "torch_dist" : "torch"; }

MlmArgs::MlmArgs(PickleRef ns, std::string where) : ns_(std::move(ns)), where_(std::move(where)) {
  MT_INPUT_CHECK(ns_->state && ns_->state->is(Kind::Dict), where_,
                 ": args carry no values (an empty Namespace)");
}

std::vector<std::string> MlmArgs::keys() const {
  std::vector<std::string> out;
  if (!ns_) return out;
  for (const auto& [k, v] : ns_->state->dict)
    if (k->is(Kind::String)) out.push_back(k->text);
  return out;
}

const PickleValue* MlmArgs::find(const std::string& key) const {
  return ns_ ? ns_->state->get(key) : nullptr;
}

bool MlmArgs::is_set(const std::string& key) const {
  const PickleValue* v = find(key);
  return v && !v->is(Kind::None);
}

void MlmArgs::fail(const std::string& key, const std::string& why) const {
  const PickleValue* v = find(key);
  throw InputError(
      concat(where_, ": args.", key, " = ", v ? v->describe() : "(absent)", ": ", why));
}

int64_t MlmArgs::integer(const std::string& key) const {
  if (!is_set(key)) fail(key, "required");
  return integer_or(key, 0);
}

int64_t MlmArgs::integer_or(const std::string& key, int64_t fallback) const {
  if (!is_set(key)) return fallback;
  const PickleValue* v = find(key);
  if (!v->is(Kind::Int)) fail(key, "an integer expected");
  return v->integer;
}

double MlmArgs::number_or(const std::string& key, double fallback) const {
  if (!is_set(key)) return fallback;
  const PickleValue* v = find(key);
  if (v->is(Kind::Int)) return static_cast<double>(v->integer);
  if (!v->is(Kind::Float)) fail(key, "a number expected");
  return v->real;
}

bool MlmArgs::boolean_or(const std::string& key, bool fallback) const {
  if (!is_set(key)) return fallback;
  const PickleValue* v = find(key);
  if (!v->is(Kind::Bool)) fail(key, "true or false expected");
  return v->boolean;
}

std::string MlmArgs::string_or(const std::string& key, const std::string& fallback) const {
  if (!is_set(key)) return fallback;
  const PickleValue* v = find(key);
  if (!v->is(Kind::String)) fail(key, "a string expected");
  return v->text;
}

std::vector<int64_t> MlmArgs::integer_list(const std::string& key) const {
  if (!is_set(key)) fail(key, "required");
  const PickleValue* v = find(key);
  if (!v->is(Kind::List) && !v->is(Kind::Tuple)) fail(key, "a list of integers expected");
  std::vector<int64_t> out;
  for (const PickleRef& item : v->items) {
    if (!item || !item->is(Kind::Int)) fail(key, "a list of integers expected");
    out.push_back(item->integer);
  }
  return out;
}

MlmCheckpoint open_checkpoint(const std::string& dir, std::optional<int64_t> iteration) {
  MlmCheckpoint out;
  fs::path given = fs::path(dir).lexically_normal();
  if (given.filename().empty()) given = given.parent_path();  // a trailing slash
  const auto [root, iter_dir] = locate(given, iteration, out);
  out.root = root.string();
  out.dir = iter_dir.string();
  std::error_code ec;
  if (fs::is_regular_file(iter_dir / ".metadata", ec)) {
    out.format = Format::TorchDist;
    const fs::path meta = iter_dir / "metadata.json";
    if (fs::is_regular_file(meta, ec)) {
      std::ifstream in(meta);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      MT_INPUT_CHECK(text.find("\"torch_dist\"") != std::string::npos, meta.string(),
                     ": not a torch_dist checkpoint (", text.substr(0, 120), ")");
    }
  } else {
    out.format = Format::Torch;
    find_rank_files(iter_dir, out);
  }
  read_common(out);
  read_layout(out);
  return out;
}

}  // namespace megatron::mlm
