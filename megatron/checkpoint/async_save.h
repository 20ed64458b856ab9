#pragma once
// Asynchronous checkpoint saves (checkpoint.async_save, Megatron's --async-save). start() copies
// the pieces' data into a host snapshot (with the commit, the only time training waits) and a
// background thread writes, checksums and fsyncs this rank's shard; a later finish() commits the
// checkpoint with checkpoint.h's atomic protocol once every rank's shard is written. Only file
// I/O leaves the training thread: every collective stays on it (the communicators need no
// thread support), and a process killed at any moment leaves DIR/latest naming a complete
// checkpoint (the uncommitted one stays a temporary directory the next save removes).
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "megatron/checkpoint/checkpoint.h"

namespace megatron::checkpoint {

class AsyncSave {
 public:
  AsyncSave() = default;
  ~AsyncSave();  // joins a writer still running (its checkpoint stays uncommitted)
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  // Allocates the snapshot for `floats` values and touches its pages on a background thread, so
  // that the first save's copy does not pay for the page faults (the buffer is kept for every
  // later save). Optional; start() allocates what is missing.
  void reserve(int64_t floats);
  // Collective (begin_save names the temporary directory). Copies every piece's data into the
  // snapshot (in parallel chunks; stable pieces are written from where they are, their buffers
  // kept alive by the request) and starts writing; a pending save must have been finished first.
  void start(SaveRequest request, parallel::Communicator& world);
  bool pending() const { return pending_; }
  // Collective while pending (every rank calls it at the same point of the run): when every
  // rank's shard is written (wait: after waiting for this rank's), commits and returns true;
  // otherwise returns false and the save stays pending. Throws Error on every rank when the save
  // failed (the checkpoint is not committed; DIR/latest is unchanged).
  bool finish(parallel::Communicator& world, bool wait, int keep_last, const std::string& protect);

  const SaveRequest& request() const { return request_; }
  // Seconds this rank's background write took (valid after finish() returned true).
  double write_seconds() const { return write_seconds_; }
  // Floats the last start() copied into the snapshot (stable pieces are not copied).
  int64_t snapshot_floats() const { return snapshot_floats_; }

 private:
  SaveRequest request_;
  std::unique_ptr<float[]> snapshot_;
  int64_t capacity_ = 0;  // floats in snapshot_
  int64_t snapshot_floats_ = 0;
  std::thread prefault_;  // reserve()'s
  std::string tmp_dir_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  ShardResult result_;
  bool pending_ = false;
  double write_seconds_ = 0.0;
};

}  // namespace megatron::checkpoint
