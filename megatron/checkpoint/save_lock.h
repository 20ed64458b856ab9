#pragma once
// One run saves into a checkpoint directory at a time: an advisory lock (flock) on DIR/.lock,
// held for the run's lifetime. A second run saving there (a requeued job while the stale one
// still runs, two jobs from one recipe) would sweep the other's in-flight files and prune its
// checkpoints; instead it fails at start naming the holder (host, pid, Slurm job). The lock goes
// with the process (a killed run leaves nothing to clean up).
#include <string>

namespace megatron::checkpoint {

class SaveDirLock {
 public:
  // Creates DIR when missing, takes the lock and records this process in DIR/.lock. Throws
  // InputError naming DIR and the holder when another process holds it, or the reason it could
  // not be taken.
  explicit SaveDirLock(const std::string& dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  int fd_ = -1;
};

inline constexpr const char* kLockFile = ".lock";

}  // namespace megatron::checkpoint
