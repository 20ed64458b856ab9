#include "megatron/training/local_checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "megatron/checkpoint/crc32c.h"
#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "megatron/parallel/launch.h"

namespace megatron::training {
namespace {

namespace fs = std::filesystem;
constexpr int kTag = 31001;

std::string replace_node(std::string dir, const std::string& node) {
  for (size_t at = dir.find("{node}"); at != std::string::npos; at = dir.find("{node}", at))
    dir.replace(at, 6, node);
  return dir;
}

// Replica holders: owner at position i on node a keeps copies on nodes a+1 .. a+k (cyclically),
// with the rank at the same position there (modulo that node's ranks).
std::vector<std::vector<int>> plan_holders(const std::vector<std::string>& node_of_rank,
                                           int64_t k) {
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    if (!ranks_of.count(node_of_rank[r])) nodes.push_back(node_of_rank[r]);
    ranks_of[node_of_rank[r]].push_back(r);
  }
  std::vector<std::vector<int>> holders(node_of_rank.size());
  for (size_t a = 0; a < nodes.size(); ++a) {
    const std::vector<int>& here = ranks_of[nodes[a]];
    for (size_t i = 0; i < here.size(); ++i)
      for (int64_t j = 1; j <= k; ++j) {
        const std::vector<int>& there = ranks_of[nodes[(a + j) % nodes.size()]];
        holders[here[i]].push_back(there[i % there.size()]);
      }
  }
  return holders;
}

std::span<const uint8_t> bytes_of(const Tensor& t) {
  return {static_cast<const uint8_t*>(t.raw()), t.nbytes()};
}

}  // namespace

LocalCheckpoints::LocalCheckpoints(const config::Recipe& recipe, parallel::Communicator& world,
                                   const TrainingState& state, std::ostream* log)
    : recipe_(recipe), world_(world), state_(state), log_(log) {
  const config::CheckpointConfig& c = recipe.checkpoint;
  node_of_rank_ = parallel::all_gather_strings(world, parallel::local_node_name(), "node name");
  const auto nodes = static_cast<int64_t>(
      std::set<std::string>(node_of_rank_.begin(), node_of_rank_.end()).size());
  MT_INPUT_CHECK(c.local_replication < nodes, recipe.source_path, ": checkpoint.local_replication ",
                 c.local_replication, " needs at least ", c.local_replication + 1,
                 " nodes to keep each copy on another node (the job has ", nodes,
                 "); 0 keeps the local copies only");
  holders_ = plan_holders(node_of_rank_, c.local_replication);
  dir_ = replace_node(config::resolve_output_path(c.local_dir), parallel::local_node_name());
  std::error_code ec;
  fs::create_directories(dir_, ec);
  MT_INPUT_CHECK(!ec && fs::is_directory(dir_), recipe.source_path, ": checkpoint.local_dir '",
                 dir_, "' cannot be created: ", ec.message());
  // Refused now rather than at the first local save, hours into the run.
  const std::string probe = concat(dir_, "/.probe.", ::getpid());
  const bool writable = static_cast<bool>(std::ofstream(probe) << "probe");
  const std::string why = writable ? "" : std::strerror(errno);
  fs::remove(probe, ec);
  MT_INPUT_CHECK(writable, recipe.source_path, ": checkpoint.local_dir '", dir_,
                 "' is not writable: ", why);
  // What decides each rank's buffers: the model and how it is split (not timeouts, not the
  // communication pattern), so a restart with other such settings still finds its copies.
  const nlohmann::json j = recipe.to_json();
  nlohmann::json split = {{"world", world.size()},
                          {"sharding", config::option_name(recipe.sharding_strategy())}};
  for (const char* key :
       {"tensor", "pipeline", "data", "expert", "expert_tensor", "context", "virtual_pipeline",
        "order", "pipeline_layers", "num_distributed_optimizer_instances", "fsdp_unit_layers"})
    split[key] = j["parallel"].value(key, nlohmann::json());
  const std::string layout = nlohmann::json{{"model", j["model"]}, {"split", split}}.dump();
  fingerprint_ = concat(std::hex, checkpoint::crc32c(0, layout.data(), layout.size()));
}

std::vector<std::pair<std::string, Tensor*>> LocalCheckpoints::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  auto add = [&](const char* name, Tensor* t) {
    if (t != nullptr && t->defined() && t->numel() > 0) out.emplace_back(name, t);
  };
  add("weights", &state_.store->weights());
  if (state_.store->mixed_precision()) add("masters", &state_.store->masters());
  add("exp_avg", &state_.optimizer->exp_avg());
  add("exp_avg_sq", &state_.optimizer->exp_avg_sq());
  add("host_masters", &state_.store->host_masters());
  add("host_exp_avg", state_.optimizer->host_exp_avg());
  add("host_exp_avg_sq", state_.optimizer->host_exp_avg_sq());
  return out;
}

std::vector<uint8_t> LocalCheckpoints::encode_state(int64_t iteration, int64_t sample_offset) {
  checkpoint::LocalShardHeader h;
  h.owner = world_.rank();
  h.world = world_.size();
  h.iteration = iteration;
  h.fingerprint = fingerprint_;
  h.state = {{"sample_offset", sample_offset},
             {"optimizer_steps", state_.optimizer->steps_taken()},
             {"loss_scaler", state_.scaler->state()}};
  std::vector<Tensor> staged;  // device buffers copied to the host
  std::vector<std::span<const uint8_t>> bytes;
  for (auto& [name, t] : state_tensors()) {
    h.tensors.push_back({name, t->dtype()});
    if (t->device() == Device::CPU) {
      bytes.push_back(bytes_of(*t));
    } else {
      staged.push_back(t->to(Device::CPU));
      bytes.push_back(bytes_of(staged.back()));
    }
  }
  if (state_.moe != nullptr)
    for (auto& [layer, bias] : state_.moe->all_expert_bias()) {
      h.tensors.push_back({concat("moe_expert_bias/", layer), DType::F32});
      bytes.push_back({reinterpret_cast<const uint8_t*>(bias.data()), bias.size() * sizeof(float)});
    }
  return checkpoint::encode_local_shard(std::move(h), bytes);
}

// Checks that the shard fits this rank's buffers (InputError naming the tensor) and, with
// `write`, copies it into them and restores the run state.
void LocalCheckpoints::apply_state(const std::vector<uint8_t>& file, int64_t iteration,
                                   bool write) {
  const std::string where = path_of(world_.rank(), iteration);
  std::vector<std::span<const uint8_t>> payload;
  const checkpoint::LocalShardHeader h = checkpoint::parse_local_shard(file, where, &payload);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < h.tensors.size(); ++i) index[h.tensors[i].name] = i;
  auto find = [&](const std::string& name, DType dtype, size_t nbytes) {
    auto it = index.find(name);
    MT_INPUT_CHECK(it != index.end() && h.tensors[it->second].dtype == dtype &&
                       payload[it->second].size() == nbytes,
                   where, ": local checkpoint tensor '", name, "' missing or of another size");
    return payload[it->second];
  };
  for (auto& [name, t] : state_tensors()) {
    const std::span<const uint8_t> b = find(name, t->dtype(), t->nbytes());
    if (!write) continue;
    if (t->device() == Device::CPU) {
      std::memcpy(t->raw(), b.data(), b.size());
    } else {
      Tensor host = Tensor::empty(t->shape(), t->dtype());
      std::memcpy(host.raw(), b.data(), b.size());
      t->copy_from(host);
    }
  }
  if (state_.moe != nullptr)
    for (auto& [layer, bias] : state_.moe->all_expert_bias()) {
      const auto b = find(concat("moe_expert_bias/", layer), DType::F32, bias.size() * 4);
      if (write) std::memcpy(bias.data(), b.data(), b.size());
    }
  if (!write) return;
  state_.optimizer->set_steps_taken(h.state.value("optimizer_steps", int64_t{0}));
  if (h.state.contains("loss_scaler")) state_.scaler->load_state(h.state["loss_scaler"]);
}

std::string LocalCheckpoints::path_of(int64_t owner, int64_t iteration) const {
  return concat(dir_, "/owner_", owner, ".iter_", iteration, ".mtl");
}

// Written under a temporary name and renamed: a file of the final name is always whole. False
// (and a line on stderr naming the file) when the write fails, e.g. on a full disk.
bool LocalCheckpoints::write_file(int64_t owner, int64_t iteration,
                                  const std::vector<uint8_t>& bytes) {
  const std::string path = path_of(owner, iteration);
  const std::string tmp = concat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (out.good()) out.close();
    if (!out.good()) {
      std::cerr << "rank " << world_.rank() << ": local checkpoint: cannot write " << tmp << " ("
                << std::strerror(errno) << ")\n";
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    std::cerr << "rank " << world_.rank() << ": local checkpoint: cannot rename " << tmp << " to "
              << path << " (" << ec.message() << ")\n";
  return !ec;
}

void LocalCheckpoints::delete_older(const std::vector<int64_t>& owners, int64_t iteration) const {
  for (const Entry& e : scan())  // one scan of the directory for every owner written here
    if (std::count(owners.begin(), owners.end(), e.owner) > 0 && e.iteration < iteration) {
      std::error_code ec;
      fs::remove(path_of(e.owner, e.iteration), ec);
    }
}

// This node's shard files of this layout (a file that is not one is named and skipped).
std::vector<LocalCheckpoints::Entry> LocalCheckpoints::scan() const {
  static const std::regex name_re(R"(owner_(\d+)\.iter_(\d+)\.mtl)");
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    const std::string name = f.path().filename().string();
    if (!std::regex_match(name, m, name_re)) continue;
    std::vector<uint8_t> prefix(1 << 16);
    std::ifstream in(f.path(), std::ios::binary);
    in.read(reinterpret_cast<char*>(prefix.data()), static_cast<std::streamsize>(prefix.size()));
    prefix.resize(static_cast<size_t>(in.gcount()));
    try {
      const auto h = checkpoint::parse_local_shard_header(
          prefix, f.path().string(), static_cast<int64_t>(fs::file_size(f.path(), ec)));
      if (h.fingerprint == fingerprint_ && h.world == world_.size() &&
          h.owner == std::stoll(m[1]) && h.iteration == std::stoll(m[2]))
        out.push_back({h.owner, h.iteration});
    } catch (const InputError& e) {
      std::cerr << "rank " << world_.rank() << ": skipping " << e.what() << "\n";
    }
  }
  return out;
}

bool LocalCheckpoints::all_true(bool ok) {
  Tensor flag = Tensor::empty(Shape{1}, DType::I32);
  flag.data<int32_t>()[0] = ok ? 1 : 0;
  world_.all_reduce(flag, parallel::ReduceOp::Min);
  return flag.data<int32_t>()[0] == 1;
}

void LocalCheckpoints::send_bytes(const std::vector<uint8_t>* bytes, int to) {
  Tensor size = Tensor::empty(Shape{1}, DType::I64);
  size.data<int64_t>()[0] = bytes ? static_cast<int64_t>(bytes->size()) : -1;
  world_.batch_isend_irecv({{parallel::P2POp::Send, size, to, kTag}})->wait();
  if (bytes == nullptr || bytes->empty()) return;
  Tensor data = Tensor::wrap(const_cast<uint8_t*>(bytes->data()),
                             Shape{static_cast<int64_t>(bytes->size())}, DType::U8);
  world_.batch_isend_irecv({{parallel::P2POp::Send, data, to, kTag}})->wait();
}

std::optional<std::vector<uint8_t>> LocalCheckpoints::recv_bytes(int from) {
  Tensor size = Tensor::empty(Shape{1}, DType::I64);
  world_.batch_isend_irecv({{parallel::P2POp::Recv, size, from, kTag}})->wait();
  const int64_t n = size.data<int64_t>()[0];
  if (n < 0) return std::nullopt;
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  if (n == 0) return bytes;
  Tensor data = Tensor::wrap(bytes.data(), Shape{n}, DType::U8);
  world_.batch_isend_irecv({{parallel::P2POp::Recv, data, from, kTag}})->wait();
  return bytes;
}

void LocalCheckpoints::save(int64_t iteration, int64_t sample_offset) {
  const auto t0 = std::chrono::steady_clock::now();
  const int me = world_.rank();
  const std::vector<uint8_t> mine = encode_state(iteration, sample_offset);
  bool ok = write_file(me, iteration, mine);
  std::vector<int64_t> kept{me};
  // Every (owner, holder) pair in one global order: blocking transfers cannot deadlock.
  for (int owner = 0; owner < world_.size(); ++owner)
    for (int holder : holders_[owner]) {
      if (owner == me) send_bytes(&mine, holder);
      if (holder != me) continue;
      const auto copy = recv_bytes(owner);
      ok = copy.has_value() && write_file(owner, iteration, *copy) && ok;
      kept.push_back(owner);
    }
  if (!all_true(ok)) {
    if (log_)
      *log_ << "warning: local checkpoint of iteration " << iteration
            << " is incomplete (a rank could not write its copy, see its error); the previous "
               "local checkpoint is kept\n"
            << std::flush;
    return;
  }
  delete_older(kept, iteration);
  if (log_) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StreamFormatGuard guard(*log_);
    *log_ << "local checkpoint iteration " << iteration << ": "
          << human_bytes(static_cast<double>(mine.size())) << " per rank in " << dir_ << ", "
          << recipe_.checkpoint.local_replication << " replica(s) on other nodes (" << std::fixed
          << std::setprecision(2) << s << " s)\n"
          << std::flush;
  }
}

// Every rank's entries, flattened: (owner, iteration) per entry, holder rank in `holder`.
std::vector<LocalCheckpoints::Entry> LocalCheckpoints::gather_entries(
    const std::vector<Entry>& mine, std::vector<int>* holder) {
  Tensor count = Tensor::empty(Shape{1}, DType::I64);
  count.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  world_.all_reduce(count, parallel::ReduceOp::Max);
  const int64_t width = count.data<int64_t>()[0];
  std::vector<Entry> all;
  if (width == 0) return all;
  Tensor local = Tensor::empty(Shape{2 * width}, DType::I64);
  std::fill_n(local.data<int64_t>(), 2 * width, int64_t{-1});
  for (size_t i = 0; i < mine.size(); ++i) {
    local.data<int64_t>()[2 * i] = mine[i].owner;
    local.data<int64_t>()[2 * i + 1] = mine[i].iteration;
  }
  Tensor every = Tensor::empty(Shape{2 * width * world_.size()}, DType::I64);
  world_.all_gather(local, every);
  const int64_t* v = every.data<int64_t>();
  for (int r = 0; r < world_.size(); ++r)
    for (int64_t i = 0; i < width; ++i) {
      const int64_t* e = v + 2 * (r * width + i);
      if (e[0] < 0) continue;
      all.push_back({e[0], e[1]});
      holder->push_back(r);
    }
  return all;
}

// The newest iteration of which every rank's shard is held somewhere, and for each rank the
// holder it comes from (itself first); nullopt when none is complete.
std::optional<std::pair<int64_t, std::vector<int>>> LocalCheckpoints::choose(
    const std::vector<Entry>& entries, const std::vector<int>& holder) const {
  std::set<int64_t, std::greater<>> iterations;
  for (const Entry& e : entries) iterations.insert(e.iteration);
  for (int64_t it : iterations) {
    std::vector<std::set<int>> held_by(static_cast<size_t>(world_.size()));
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].iteration == it)
        held_by[static_cast<size_t>(entries[i].owner)].insert(holder[i]);
    // The owner itself, else its replica holders in order, else any rank of a node with a copy.
    std::vector<int> source(static_cast<size_t>(world_.size()), -1);
    for (int owner = 0; owner < world_.size(); ++owner) {
      const std::set<int>& h = held_by[static_cast<size_t>(owner)];
      int& s = source[static_cast<size_t>(owner)];
      if (h.count(owner)) s = owner;
      for (int r : holders_[owner])
        if (s < 0 && h.count(r)) s = r;
      if (s < 0 && !h.empty()) s = *h.begin();
    }
    if (std::count(source.begin(), source.end(), -1) == 0) return std::make_pair(it, source);
    if (log_) {
      *log_ << "local checkpoint iteration " << it << " is incomplete: no copy of rank(s)";
      for (int r = 0; r < world_.size(); ++r)
        if (source[static_cast<size_t>(r)] < 0) *log_ << " " << r;
      *log_ << "\n";
    }
  }
  return std::nullopt;
}

std::optional<LocalCheckpoints::Restored> LocalCheckpoints::restore(int64_t global_iteration) {
  std::vector<int> holder;
  const std::vector<Entry> entries = gather_entries(scan(), &holder);
  const auto chosen = choose(entries, holder);
  if (!chosen) {
    if (log_ && !entries.empty())
      *log_ << "no complete local checkpoint: resuming from the global checkpoint\n";
    return std::nullopt;
  }
  const auto& [iteration, source] = *chosen;
  if (iteration <= global_iteration) {
    if (log_)
      *log_ << "local checkpoint iteration " << iteration << " is not newer than the global "
            << "checkpoint (iteration " << global_iteration << "): not used\n";
    return std::nullopt;
  }
  const int me = world_.rank();
  auto read = [&](int64_t owner) -> std::optional<std::vector<uint8_t>> {
    std::ifstream in(path_of(owner, iteration), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return std::nullopt;
    return b;
  };
  std::optional<std::vector<uint8_t>> mine;
  for (int owner = 0; owner < world_.size(); ++owner) {  // one global order, as in save
    const int from = source[static_cast<size_t>(owner)];
    if (from == me && owner == me) mine = read(owner);
    if (from == me && owner != me) {
      const auto b = read(owner);
      send_bytes(b ? &*b : nullptr, owner);
    }
    if (owner == me && from != me) mine = recv_bytes(from);
  }
  std::string error = mine ? "" : "its copy could not be read or received";
  if (mine) {
    try {  // checked whole (CRCs, owner, sizes) before any rank changes its state
      const auto h = checkpoint::parse_local_shard(*mine, path_of(me, iteration), nullptr);
      MT_INPUT_CHECK(h.owner == me && h.iteration == iteration && h.fingerprint == fingerprint_,
                     path_of(me, iteration), ": holds rank ", h.owner, "'s iteration ", h.iteration,
                     ", not rank ", me, "'s iteration ", iteration);
      apply_state(*mine, iteration, /*write=*/false);
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  if (!error.empty()) std::cerr << "rank " << me << ": local checkpoint: " << error << "\n";
  if (!all_true(error.empty())) {
    if (log_)
      *log_ << "local checkpoint iteration " << iteration
            << " could not be restored (see the ranks' errors): resuming from the global "
               "checkpoint\n";
    return std::nullopt;
  }
  apply_state(*mine, iteration, /*write=*/true);
  report_sources(iteration, source);
  const auto h = checkpoint::parse_local_shard_header(*mine, path_of(me, iteration));
  return Restored{iteration, h.state.value("sample_offset", int64_t{0})};
}

void LocalCheckpoints::report_sources(int64_t iteration, const std::vector<int>& source_of) {
  if (log_ == nullptr) return;
  *log_ << "restored local checkpoint iteration " << iteration << " (newer than the global one):\n";
  for (int r = 0; r < world_.size(); ++r) {
    const int s = source_of[static_cast<size_t>(r)];
    *log_ << "  rank " << r << " (" << node_of_rank_[r] << "): "
          << (s == r ? "its own copy" : concat("replica from rank ", s, " on ", node_of_rank_[s]))
          << "\n";
  }
  *log_ << std::flush;
}

}  // namespace megatron::training
