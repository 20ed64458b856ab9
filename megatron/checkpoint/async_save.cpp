#include "megatron/checkpoint/async_save.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "megatron/core/error.h"

namespace megatron::checkpoint {

namespace {

// Copies of up to 1M floats: the unit the copy threads share.
struct CopyChunk {
  const float* from;
  float* to;
  int64_t n;
};
constexpr int64_t kChunkFloats = int64_t(1) << 20;

// Repoints every piece that is not stable at its place in `snapshot` and copies its data there,
// chunks in parallel.
void copy_into(std::vector<TensorPiece>& pieces, float* snapshot) {
  std::vector<CopyChunk> chunks;
  float* at = snapshot;
  for (TensorPiece& p : pieces) {
    if (p.stable) continue;
    const int64_t n = p.geometry().count();
    for (int64_t i = 0; i < n; i += kChunkFloats)
      chunks.push_back({p.data + i, at + i, std::min(kChunkFloats, n - i)});
    p.data = at;
    at += n;
  }
  // Plain threads rather than OpenMP: a process forked from one whose OpenMP pool ran (the
  // crash tests fork savers) hangs in its next parallel region.
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  auto copy_every = [&chunks, threads](size_t first) {
    for (size_t c = first; c < chunks.size(); c += threads)
      std::memcpy(chunks[c].to, chunks[c].from, sizeof(float) * static_cast<size_t>(chunks[c].n));
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads && t < chunks.size(); ++t) helpers.emplace_back(copy_every, t);
  copy_every(0);
  for (std::thread& h : helpers) h.join();
}

}  // namespace

AsyncSave::~AsyncSave() {
  if (writer_.joinable()) writer_.join();
  if (prefault_.joinable()) prefault_.join();
}

void AsyncSave::reserve(int64_t floats) {
  MT_CHECK(!pending_ && !prefault_.joinable(), "AsyncSave::reserve while a save is pending");
  if (floats <= capacity_) return;
  snapshot_.reset(new float[static_cast<size_t>(floats)]);
  capacity_ = floats;
  prefault_ = std::thread([p = snapshot_.get(), floats] {
    std::memset(p, 0, sizeof(float) * static_cast<size_t>(floats));
  });
}

void AsyncSave::start(SaveRequest request, parallel::Communicator& world) {
  MT_CHECK(!pending_, "checkpoint iteration ", request.iteration, ": the save of iteration ",
           request_.iteration, " is still pending");
  if (prefault_.joinable()) prefault_.join();
  int64_t total = 0;
  for (const TensorPiece& p : request.pieces)
    if (!p.stable) total += p.geometry().count();
  snapshot_floats_ = total;
  if (total > capacity_) {
    capacity_ = std::max<int64_t>(total, 1);
    snapshot_.reset(new float[static_cast<size_t>(capacity_)]);
  }
  copy_into(request.pieces, snapshot_.get());
  request.on_step = nullptr;  // (the hook would run on the writer thread)
  request_ = std::move(request);
  tmp_dir_ = begin_save(request_, world);
  written_ = false;
  pending_ = true;
  const int rank = world.rank();
  writer_ = std::thread([this, rank] {
    const auto t0 = std::chrono::steady_clock::now();
    result_ = write_shard_caught(request_, tmp_dir_, rank);
    write_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    written_ = true;
  });
}

bool AsyncSave::finish(parallel::Communicator& world, bool wait, int keep_last,
                       const std::string& protect) {
  if (!pending_) return false;
  if (wait && writer_.joinable()) writer_.join();
  float unwritten = written_ ? 0.0f : 1.0f;
  if (world.size() > 1) {
    Tensor flag = Tensor::wrap(&unwritten, {1}, DType::F32);
    world.all_reduce(flag, parallel::ReduceOp::Max);
  }
  if (unwritten > 0.0f) return false;
  if (writer_.joinable()) writer_.join();
  pending_ = false;
  const ShardResult result = std::move(result_);
  commit_save(request_, tmp_dir_, result, world, keep_last, protect);
  return true;
}

}  // namespace megatron::checkpoint
