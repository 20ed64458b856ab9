#pragma once
// Sharded checkpoints with global metadata, resharding on load, and atomic commit
// (DESIGN.md sections 2.5, 2.8 and 6).
//
// On disk:
//   DIR/latest                       "iter_NNNNNNN\n": the newest complete checkpoint
//   DIR/iter_NNNNNNN/metadata.json   format_version, iteration, the caller's metadata (resolved
//                                    recipe, consumed samples, scheduler, RNG, data state ...),
//                                    the shard files with their sizes and CRC-32C checksums
//                                    (verified before a file is read), and the tensor index:
//                                    per global tensor its dtype, global shape and pieces
//   DIR/iter_NNNNNNN/shard_<r>.safetensors   the pieces rank r wrote
//
// A piece (see geometry.h) is a box of the global tensor (a Parameter's local shard: `offset`
// and `extent` in the index are its global position) optionally cut to a flat range of the box
// (a distributed-optimizer segment: `flat`). Whole boxes are stored with their local shape,
// flat ranges as 1-D tensors; the safetensors key is the tensor name ("name#k" for a rank's
// k-th further piece of the same tensor). Loading fills each requested piece from whatever
// pieces were saved, so any TP/DP layout loads any other layout's checkpoint.
//
// Commit protocol (save): every rank writes and fsyncs its shard into
// DIR/iter_NNNNNNN.tmp-<id>/, rank 0 gathers the pieces' index entries, checks that every tensor
// is covered exactly once, writes and fsyncs metadata.json and the directory, renames it to
// DIR/iter_NNNNNNN (atomically exchanging an existing checkpoint of the same iteration), then
// replaces DIR/latest atomically (temp file + rename), applies keep_last and removes stale
// temporaries. A crash at any point leaves `latest` naming a complete checkpoint; leftovers
// (*.tmp-*, *.old-*) are ignored by readers and removed by the next successful save. One job
// saves into a DIR at a time.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megatron/checkpoint/directory.h"
#include "megatron/checkpoint/geometry.h"
#include "megatron/checkpoint/safetensors.h"
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron::checkpoint {

inline constexpr int kFormatVersion = 1;

// One piece of a global tensor held by this rank: the local shard of a parameter of
// `global_shape` (cut along shard.dim; local_shape == global_shape when replicated), optionally
// restricted to local flat elements [flat_begin, flat_end) (flat_end = -1: to the end).
// `data` (save) / `dest` (load) point at the piece's first element, i.e. local element
// flat_begin, followed by the rest of the piece contiguously (count() floats). dtype F32.
struct TensorPiece {
  std::string name;
  Shape global_shape;
  Shape local_shape;
  ShardSpec shard{};
  int64_t flat_begin = 0, flat_end = -1;
  const float* data = nullptr;  // save
  float* dest = nullptr;        // load
  // Save: `data` is a private copy (a device tensor staged to the host) that stays unchanged
  // until the save is written, so an asynchronous save writes it without copying it again.
  bool stable = false;

  // The piece's place in the global tensor; throws Error naming the piece if inconsistent.
  PieceGeometry geometry() const;
};

struct SaveRequest {
  std::string dir;
  int64_t iteration = 0;
  nlohmann::json metadata = nlohmann::json::object();  // rank 0's is stored
  std::vector<TensorPiece> pieces;
  // Dedupe: pieces whose ShardSpec is replicated are written only when this is true (the caller
  // picks one rank per replica group). Sharded pieces are always written, so the caller passes
  // them from one data-parallel replica only. Every element must end up written exactly once.
  bool write_this_rank_replicas = true;
  // Host buffers the stable pieces point into, kept alive until the save is written.
  std::vector<Tensor> keep_alive;
  // Test/progress hook, called with the step about to happen or just done: "shard_written"
  // (each rank), then on rank 0 "before_metadata", "before_rename", "before_latest",
  // "before_cleanup", "done".
  std::function<void(const std::string& step)> on_step;
};

// Collective over `world` (every member calls it): see the commit protocol above. keep_last > 0
// keeps the new checkpoint plus the keep_last - 1 newest others (by iteration); the checkpoint
// directory `protect` (the one training resumed from) is never deleted. Throws Error on every
// rank when any rank fails; DIR/latest is then unchanged.
void save(const SaveRequest& request, parallel::Communicator& world, int keep_last,
          const std::string& protect = {});

struct LoadRequest {
  std::string dir;                   // the checkpoint root, or one iter_NNNNNNN directory
  std::optional<int64_t> iteration;  // default: DIR/latest
  std::vector<TensorPiece> pieces;
};
// Not collective: reads metadata.json, validates it and the shard files this load reads
// (present, sizes, safetensors headers agree with the index), fills every requested piece
// (each element must be covered exactly once by the saved pieces) and returns the caller's
// metadata. Throws InputError naming the file and the mismatch.
nlohmann::json load(const LoadRequest& request);

// ---- Index (inspection, tools, advanced loading) -----------------------------------------

struct SavedPiece {
  std::string file;  // name inside the checkpoint directory
  std::string key;   // safetensors tensor name
  PieceGeometry geometry;
  uint64_t data_begin = 0, data_end = 0;  // byte range in the file's data buffer
};
struct SavedTensor {
  std::string dtype;  // safetensors dtype name
  std::vector<int64_t> shape;
  std::vector<SavedPiece> pieces;
  int64_t numel() const;
};
struct CheckpointIndex {
  std::string path;  // the iter_NNNNNNN directory
  int64_t iteration = 0;
  int format_version = 0;
  nlohmann::json metadata;                // the caller's metadata
  std::map<std::string, uint64_t> files;  // shard file -> size in bytes
  // shard file -> CRC-32C of its bytes (checked before a load reads the file; absent in
  // checkpoints saved before checksums were recorded)
  std::map<std::string, uint32_t> checksums;
  std::map<std::string, SavedTensor> tensors;
  // Resolved through DIR/latest: what was passed over on the way (a `latest` naming an
  // incomplete checkpoint, newer incomplete iterations), one sentence each; empty normally.
  std::vector<std::string> skipped;
};

// Resolves the checkpoint (DIR/latest, an explicit iteration, or DIR itself when it holds a
// metadata.json) and parses and checks metadata.json. InputError naming the file on problems.
CheckpointIndex read_index(const std::string& dir, std::optional<int64_t> iteration = {});
// Checks shard files against the index: present, sizes, safetensors headers (keys, dtypes,
// shapes, byte ranges). `only`: just these files (default all).
void verify_files(const CheckpointIndex& index, const std::vector<std::string>* only = nullptr);

// Many loads from one checkpoint (a converter reading tensor by tensor): the index is read once
// and each shard file opened and verified once, on first use. read() fills the pieces as load()
// does (same checks and errors).
class Reader {
 public:
  explicit Reader(const std::string& dir, std::optional<int64_t> iteration = {});
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  const CheckpointIndex& index() const { return index_; }
  void read(const std::vector<TensorPiece>& pieces);
  // Tensor `name` whole, in fp32, with its saved global shape (InputError when absent).
  std::vector<float> read_whole(const std::string& name);

 private:
  CheckpointIndex index_;
  std::map<std::string, safetensors::File> files_;
};

// ---- Building blocks of save (non-collective; tests simulate ranks with them) --------------

// DIR/iter_NNNNNNN.tmp-<id>
std::string tmp_checkpoint_path(const std::string& dir, int64_t iteration, const std::string& id);
// Writes this rank's pieces (after the replica filter) to tmp_dir/shard_<rank>.safetensors and
// fsyncs it; creates tmp_dir if needed. Returns the rank's part of the index:
// {"file": name or null, "bytes": n, "pieces": [...]}.
nlohmann::json write_rank_shard(const SaveRequest& request, const std::string& tmp_dir, int rank);
// save() in three steps, so that the writing can run apart from training (async_save.h):
// begin_save (collective: the temporary directory's name from rank 0), write_shard_caught (this
// rank's shard, no communication; an exception becomes ShardResult::error), commit_save
// (collective: rank 0 merges the parts and finalizes; throws Error on every rank when any rank's
// write or the commit failed, DIR/latest then unchanged).
struct ShardResult {
  nlohmann::json part;  // write_rank_shard's index part
  std::string error;    // empty: written
};
std::string begin_save(const SaveRequest& request, parallel::Communicator& world);
ShardResult write_shard_caught(const SaveRequest& request, const std::string& tmp_dir, int rank);
void commit_save(const SaveRequest& request, const std::string& tmp_dir, const ShardResult& mine,
                 parallel::Communicator& world, int keep_last, const std::string& protect);
// Rank 0's commit: merges the ranks' index parts, checks coverage, writes metadata.json, renames
// tmp_dir into place, updates DIR/latest, applies keep_last, removes stale temporaries.
void finalize(const SaveRequest& request, const std::string& tmp_dir,
              const std::vector<nlohmann::json>& rank_parts, int keep_last,
              const std::string& protect);

}  // namespace megatron::checkpoint
