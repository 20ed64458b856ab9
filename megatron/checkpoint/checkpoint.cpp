#include "megatron/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "megatron/checkpoint/directory.h"
#include "megatron/checkpoint/file_io.h"
#include "megatron/checkpoint/index_parsing.h"
#include "megatron/checkpoint/safetensors.h"

namespace megatron::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using namespace detail;

namespace {

std::string metadata_text(const SaveRequest& req, const ordered_json& files,
                          const ordered_json& tensors) {
  std::string indented = dump(ordered_json(req.metadata), 2);
  for (size_t at = indented.find('\n'); at != std::string::npos; at = indented.find('\n', at + 3))
    indented.replace(at, 1, "\n  ");
  std::string out =
      concat("{\n  \"format_version\": ", kFormatVersion, ",\n  \"iteration\": ", req.iteration,
             ",\n  \"metadata\": ", indented, ",\n  \"files\": {");
  const char* sep = "\n    ";
  for (const auto& [name, f] : files.items()) {
    out += concat(sep, dump(name), ": ", dump(f));
    sep = ",\n    ";
  }
  out += files.empty() ? "},\n  \"tensors\": {" : "\n  },\n  \"tensors\": {";
  sep = "\n    ";
  for (const auto& [name, t] : tensors.items()) {
    out += concat(sep, dump(name), ": {\"dtype\": ", dump(t["dtype"]),
                  ", \"shape\": ", dump(t["shape"]), ", \"pieces\": [");
    const char* psep = "\n      ";
    for (const auto& p : t["pieces"]) {
      out += psep + dump(p);
      psep = ",\n      ";
    }
    out += "]}";
    sep = ",\n    ";
  }
  out += tensors.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

void step(const SaveRequest& r, const char* name) {
  if (r.on_step) r.on_step(name);
}

bool same_path(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code e1, e2;
  const fs::path pa = fs::weakly_canonical(a, e1), pb = fs::weakly_canonical(b, e2);
  if (e1 || e2) return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
  return pa == pb;
}

// Whether DIR/iter_N holds a committed checkpoint of iteration N (metadata.json readable).

std::string random_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  v ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  v ^= static_cast<uint64_t>(::getpid()) << 17;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(v & 0xffffffffffffull));
  return buf;
}

// Moves `path` out of the way atomically, then deletes it (a crash mid-delete leaves only an
// ignored *.old-* directory).
void remove_checkpoint_dir(const std::string& path, const std::string& id) {
  const std::string doomed = path + ".old-" + id;
  if (::rename(path.c_str(), doomed.c_str()) != 0) return;
  std::error_code ec;
  fs::remove_all(doomed, ec);
}

}  // namespace

std::string tmp_checkpoint_path(const std::string& dir, int64_t iteration, const std::string& id) {
  return checkpoint_path(dir, iteration) + ".tmp-" + id;
}

int64_t SavedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

PieceGeometry TensorPiece::geometry() const {
  auto fail = [&](const auto&... parts) {
    return Error(concat("checkpoint piece '", name, "' (global ", global_shape.str(), ", local ",
                        local_shape.str(), "): ", parts...));
  };
  if (name.empty()) throw fail("empty name");
  if (global_shape.ndim() != local_shape.ndim()) throw fail("global and local ranks differ");
  PieceGeometry g;
  g.shape = dims(global_shape);
  g.extent = dims(local_shape);
  g.offset.assign(g.shape.size(), 0);
  if (shard.replicated()) {
    if (!(global_shape == local_shape)) throw fail("replicated piece with a local shape");
  } else {
    const int d = shard.dim;
    if (d >= global_shape.ndim()) throw fail("shard dim ", d, " out of range");
    if (shard.index < 0 || shard.index >= shard.count)
      throw fail("shard index ", shard.index, " of ", shard.count);
    for (int i = 0; i < global_shape.ndim(); ++i)
      if (i != d && global_shape[i] != local_shape[i]) throw fail("dim ", i, " differs");
    if (local_shape[d] * shard.count != global_shape[d])
      throw fail("dim ", d, " is not split into ", shard.count, " equal shards");
    g.offset[d] = shard.index * local_shape[d];
  }
  g.flat_begin = flat_begin;
  g.flat_end = flat_end < 0 ? g.box_numel() : flat_end;
  if (auto problem = g.problem()) throw fail(*problem);
  return g;
}

// ---- save --------------------------------------------------------------------------------

json write_rank_shard(const SaveRequest& req, const std::string& tmp_dir, int rank) {
  std::error_code ec;
  fs::create_directories(tmp_dir, ec);
  if (ec) throw Error(concat("cannot create checkpoint directory ", tmp_dir, ": ", ec.message()));
  safetensors::Writer writer;
  json pieces = json::array();
  std::set<std::string> keys;
  for (const TensorPiece& piece : req.pieces) {
    if (piece.shard.replicated() && !req.write_this_rank_replicas) continue;
    const PieceGeometry g = piece.geometry();
    MT_CHECK(g.count() == 0 || piece.data != nullptr, "checkpoint piece '", piece.name,
             "' has no data");
    std::string key = piece.name;
    for (int k = 1; !keys.insert(key).second; ++k) key = concat(piece.name, "#", k);
    writer.add(
        {key, "F32", g.is_full_box() ? g.extent : std::vector<int64_t>{g.count()}, piece.data});
    const auto [b, e] = writer.data_offsets(pieces.size());
    pieces.push_back({{"name", piece.name},
                      {"shape", g.shape},
                      {"key", key},
                      {"offset", g.offset},
                      {"extent", g.extent},
                      {"flat", {g.flat_begin, g.flat_end}},
                      {"data_offsets", {b, e}}});
  }
  json part = {{"file", nullptr}, {"bytes", 0}, {"pieces", pieces}};
  if (!pieces.empty()) {
    const std::string file = concat("shard_", rank, ".safetensors");
    writer.set_metadata("format", "megatron-cpp checkpoint shard");
    writer.set_metadata("iteration", std::to_string(req.iteration));
    writer.set_metadata("rank", std::to_string(rank));
    const uint32_t crc = writer.write((fs::path(tmp_dir) / file).string(), /*sync=*/true);
    part["file"] = file;
    part["bytes"] = writer.file_size();
    part["crc32c"] = crc;
  }
  step(req, "shard_written");
  return part;
}

void finalize(const SaveRequest& req, const std::string& tmp_dir,
              const std::vector<json>& rank_parts, int keep_last, const std::string& protect) {
  const std::string where = concat("checkpoint save to ", tmp_dir);
  // Merge the ranks' index parts (tensors in first-seen order) and check each tensor is held
  // exactly once.
  ordered_json files = ordered_json::object(), tensors = ordered_json::object();
  CheckpointIndex check;
  const IndexError fail{where};
  for (size_t r = 0; r < rank_parts.size(); ++r) {
    const json& part = rank_parts[r];
    MT_CHECK(part.is_object() && part.contains("pieces"), where, ": bad index part from rank ", r);
    if (part["file"].is_string()) {
      const std::string file = part["file"].get<std::string>();
      MT_CHECK(!files.contains(file), where, ": two ranks wrote ", file);
      files[file] = {{"bytes", part["bytes"]}, {"crc32c", part["crc32c"]}};
      check.files[file] = part["bytes"].get<uint64_t>();
    }
    for (const json& p : part["pieces"]) {
      const std::string name = p["name"].get<std::string>();
      const auto shape = p["shape"].get<std::vector<int64_t>>();
      if (!tensors.contains(name)) {
        tensors[name] = {{"dtype", "F32"}, {"shape", shape}, {"pieces", ordered_json::array()}};
      } else {
        MT_CHECK(tensors[name]["shape"].get<std::vector<int64_t>>() == shape, where, ": tensor '",
                 name, "' has global shape ",
                 shape_str(tensors[name]["shape"].get<std::vector<int64_t>>()), " on one rank and ",
                 shape_str(shape), " on rank ", r);
      }
      ordered_json entry = {{"file", part["file"]},  {"key", p["key"]},
                            {"offset", p["offset"]}, {"extent", p["extent"]},
                            {"flat", p["flat"]},     {"data_offsets", p["data_offsets"]}};
      SavedTensor& st = check.tensors[name];
      st.shape = shape;
      st.pieces.push_back(parse_piece(json::parse(dump(entry)), shape, 4,
                                      concat("tensor '", name, "' piece from rank ", r), fail));
      tensors[name]["pieces"].push_back(std::move(entry));
    }
  }
  for (const auto& [name, t] : check.tensors) {
    std::vector<const PieceGeometry*> geoms;
    for (const SavedPiece& p : t.pieces) geoms.push_back(&p.geometry);
    if (auto problem = tiling_problem(t.shape, geoms))
      throw Error(concat(where, ": tensor '", name, "' ", shape_str(t.shape), ": ", *problem,
                         " (a replica written twice, or a shard missing?)"));
  }

  step(req, "before_metadata");
  const std::string meta_path = (fs::path(tmp_dir) / kMetadataFile).string();
  {
    const std::string text = metadata_text(req, files, tensors);
    io::Fd fd = io::open_for_write(meta_path);
    io::write_all(fd.get(), text.data(), text.size(), meta_path);
    io::fsync_fd(fd.get(), meta_path);
    fd.close(meta_path);
  }
  io::fsync_dir(tmp_dir);

  step(req, "before_rename");
  const std::string final_dir = checkpoint_path(req.dir, req.iteration);
  const std::string id = fs::path(tmp_dir).filename().string().substr(
      fs::path(tmp_dir).filename().string().rfind(".tmp-") + 5);
  if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    if (err != ENOTEMPTY && err != EEXIST)
      throw Error(concat("renaming ", tmp_dir, " to ", final_dir, ": ", io::errno_text(err)));
    // A checkpoint of this iteration exists: swap atomically, then delete the old one.
    if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
    } else {
      const std::string old = final_dir + ".old-" + id;
      if (::rename(final_dir.c_str(), old.c_str()) != 0 ||
          ::rename(tmp_dir.c_str(), final_dir.c_str()) != 0)
        throw Error(
            concat("replacing ", final_dir, " with ", tmp_dir, ": ", io::errno_text(errno)));
      std::error_code ec;
      fs::remove_all(old, ec);
    }
  }
  io::fsync_dir(req.dir);

  step(req, "before_latest");
  io::write_file_atomic((fs::path(req.dir) / kLatestFile).string(), iter_name(req.iteration) + "\n",
                        ".tmp-" + id);

  step(req, "before_cleanup");
  if (keep_last > 0) {
    int kept = 1;  // the new checkpoint
    for (int64_t it : complete_iterations(req.dir)) {
      if (it == req.iteration) continue;
      const std::string path = checkpoint_path(req.dir, it);
      if (kept < keep_last) {
        ++kept;
        continue;
      }
      if (same_path(path, protect)) continue;
      remove_checkpoint_dir(path, id);
    }
  }
  // Leftovers of crashed or replaced saves.
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(req.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if ((name.rfind("iter_", 0) == 0 &&
         (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos)) ||
        name.rfind(std::string(kLatestFile) + ".tmp-", 0) == 0)
      stale.push_back(it->path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  step(req, "done");
}

namespace {

// Rank `root` receives every rank's string (in rank order); the others get an empty vector.
std::vector<std::string> gather_strings(parallel::Communicator& comm, const std::string& mine,
                                        int root) {
  const int n = comm.size();
  Tensor len = Tensor::empty(Shape{1}, DType::I64);
  len.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  Tensor lens = Tensor::empty(Shape{n}, DType::I64);
  comm.all_gather(len, lens);
  std::vector<int64_t> send(n, 0), recv(n, 0);
  send[root] = static_cast<int64_t>(mine.size());
  int64_t total = 0;
  if (comm.rank() == root)
    for (int r = 0; r < n; ++r) total += recv[r] = lens.data<int64_t>()[r];
  std::string in = mine;
  Tensor tin = Tensor::wrap(in.data(), Shape{static_cast<int64_t>(in.size())}, DType::U8);
  Tensor tout = Tensor::empty(Shape{total}, DType::U8);
  comm.all_to_all(tin, send, tout, recv);
  std::vector<std::string> out;
  if (comm.rank() == root) {
    const char* p = static_cast<const char*>(tout.raw());
    for (int r = 0; r < n; ++r) {
      out.emplace_back(p, static_cast<size_t>(recv[r]));
      p += recv[r];
    }
  }
  return out;
}

std::string broadcast_string(parallel::Communicator& comm, std::string s, int root) {
  Tensor len = Tensor::empty(Shape{1}, DType::I64);
  len.data<int64_t>()[0] = static_cast<int64_t>(s.size());
  comm.broadcast(len, root);
  s.resize(static_cast<size_t>(len.data<int64_t>()[0]));
  Tensor t = Tensor::wrap(s.data(), Shape{static_cast<int64_t>(s.size())}, DType::U8);
  comm.broadcast(t, root);
  return s;
}

}  // namespace

std::string begin_save(const SaveRequest& req, parallel::Communicator& world) {
  const std::string id =
      broadcast_string(world, world.rank() == 0 ? random_id() : std::string(), 0);
  return tmp_checkpoint_path(req.dir, req.iteration, id);
}

ShardResult write_shard_caught(const SaveRequest& req, const std::string& tmp_dir, int rank) {
  ShardResult r;
  try {
    r.part = write_rank_shard(req, tmp_dir, rank);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

void commit_save(const SaveRequest& req, const std::string& tmp_dir, const ShardResult& mine,
                 parallel::Communicator& world, int keep_last, const std::string& protect) {
  const json msg = {{"error", mine.error}, {"part", mine.part}};
  const auto all =
      gather_strings(world, msg.dump(-1, ' ', false, json::error_handler_t::replace), 0);
  std::string status;
  if (world.rank() == 0) {
    std::vector<json> parts;
    for (size_t r = 0; r < all.size(); ++r) {
      const json m = json::parse(all[r], nullptr, false);
      const std::string sep = status.empty() ? "" : "; ";
      if (m.is_discarded() || !m.is_object()) {
        status += concat(sep, "rank ", r, ": unreadable index part");
        continue;
      }
      if (!m["error"].get<std::string>().empty())
        status += concat(sep, "rank ", r, ": ", m["error"].get<std::string>());
      parts.push_back(m["part"]);
    }
    if (status.empty()) {
      try {
        finalize(req, tmp_dir, parts, keep_last, protect);
      } catch (const std::exception& e) {
        status = e.what();
      }
    } else {
      status = concat("checkpoint save of iteration ", req.iteration, " to ", req.dir,
                      " failed: ", status);
    }
    if (!status.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
    }
  }
  status = broadcast_string(world, status, 0);
  if (!status.empty()) throw Error(status);
}

void save(const SaveRequest& req, parallel::Communicator& world, int keep_last,
          const std::string& protect) {
  const std::string tmp_dir = begin_save(req, world);
  commit_save(req, tmp_dir, write_shard_caught(req, tmp_dir, world.rank()), world, keep_last,
              protect);
}

}  // namespace megatron::checkpoint
