// Crash safety: a forked child saves a ~24 MB checkpoint and is killed with SIGKILL at fixed
// and random moments, and at each step of the commit protocol (via the save's step hook).
// Afterwards `latest` must name a complete checkpoint whose every element is right, the
// previous (protected) checkpoint must still load, leftovers must be ignored, and the next
// successful save must clean them up. Asynchronous saves (async_save.h) the same way, and they
// write the snapshot taken at start, not what the buffers hold later; a write that fails (a file
// size limit standing in for a full disk) fails the save on commit and leaves `latest` alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "megatron/checkpoint/async_save.h"
#include "megatron/checkpoint/checkpoint.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;

const std::vector<std::pair<std::string, Shape>> kTensors = {
    {"embedding.weight", {1536, 1024}},
    {"layers.0.fc1.weight", {1024, 1536}},
    {"layers.0.fc2.weight", {1536, 1024}},
    {"optimizer.exp_avg.embedding.weight", {1536, 1024}},
    {"final_norm.weight", {1024}}};

float value_of(size_t tensor, int64_t i, int64_t iteration) {
  return static_cast<float>((static_cast<int64_t>(tensor) * 1000003 + i * 7 + iteration * 13) %
                            16000000);
}

struct State {
  std::vector<std::vector<float>> buffers;
  std::vector<TensorPiece> pieces;
};

State make_state(int64_t iteration, bool fill) {
  State s;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    const Shape& shape = kTensors[t].second;
    s.buffers.emplace_back(static_cast<size_t>(shape.numel()), -1.0f);
    if (fill)
      for (int64_t i = 0; i < shape.numel(); ++i) s.buffers.back()[i] = value_of(t, i, iteration);
  }
  for (size_t t = 0; t < kTensors.size(); ++t) {
    TensorPiece p{kTensors[t].first, kTensors[t].second, kTensors[t].second};
    p.data = p.dest = s.buffers[t].data();
    s.pieces.push_back(p);
  }
  return s;
}

class CheckpointAtomicity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / concat("mt_ckpt_atomic_", ::getpid())).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SaveRequest request(const State& s, int64_t iteration) const {
    SaveRequest req;
    req.dir = dir_;
    req.iteration = iteration;
    req.metadata = {{"iteration", iteration}};
    req.pieces = s.pieces;
    return req;
  }

  void save_now(const State& s, int64_t iteration,
                std::function<void(const std::string&)> hook = nullptr) {
    auto comm = parallel::make_single_process_communicator("world");
    SaveRequest req = request(s, iteration);
    req.on_step = std::move(hook);
    save(req, *comm, /*keep_last=*/2, /*protect=*/checkpoint_path(dir_, 1));
  }

  // As save_now, through AsyncSave: started, then waited for and committed.
  void save_async(const State& s, int64_t iteration) {
    auto comm = parallel::make_single_process_communicator("world");
    AsyncSave a;
    a.start(request(s, iteration), *comm);
    a.finish(*comm, /*wait=*/true, /*keep_last=*/2, checkpoint_path(dir_, 1));
  }

  // Forks a child that saves `iteration` (async: through AsyncSave); kills it at `kill_step`
  // (hook) or after `delay`. Returns whether the child was killed (rather than finishing first).
  bool crash_save(int64_t iteration, const std::string& kill_step, std::chrono::microseconds delay,
                  bool async = false) {
    const State s = make_state(iteration, true);  // filled before the clock starts
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        if (async)
          save_async(s, iteration);
        else
          save_now(s, iteration, [&](const std::string& step) {
            if (step == kill_step) ::raise(SIGKILL);
          });
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    EXPECT_GT(pid, 0);
    if (kill_step.empty()) {
      std::this_thread::sleep_for(delay);
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's save failed";
    }
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

  void expect_loads(int64_t iteration) {
    State s = make_state(0, false);
    const auto meta = load(LoadRequest{dir_, iteration, s.pieces});
    EXPECT_EQ(meta["iteration"], iteration);
    for (size_t t = 0; t < kTensors.size(); ++t)
      for (int64_t i = 0; i < kTensors[t].second.numel(); ++i)
        ASSERT_EQ(s.buffers[t][i], value_of(t, i, iteration))
            << kTensors[t].first << "[" << i << "] of iteration " << iteration;
  }

  // The invariants after any crash; returns the latest iteration.
  int64_t check_consistent(const std::string& what) {
    SCOPED_TRACE(what);
    const auto latest = latest_iteration(dir_);
    EXPECT_TRUE(latest.has_value());
    if (!latest) return -1;
    // The latest file itself names that complete checkpoint (no fallback scan needed).
    std::ifstream f(fs::path(dir_) / "latest");
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line, fs::path(checkpoint_path(dir_, *latest)).filename().string());
    expect_loads(*latest);  // every element of the newest checkpoint
    expect_loads(1);        // the protected first checkpoint
    return *latest;
  }

  std::string dir_;
};

TEST_F(CheckpointAtomicity, KilledSavesNeverBreakTheLatestCheckpoint) {
  save_now(make_state(1, true), 1);
  int64_t iteration = 1, latest = 1;
  // A kill at each step of the commit protocol.
  const std::vector<std::string> steps = {"shard_written", "before_metadata", "before_rename",
                                          "before_latest", "before_cleanup"};
  for (const std::string& step : steps) {
    ++iteration;
    EXPECT_TRUE(crash_save(iteration, step, {})) << step;
    const int64_t now = check_consistent("killed at " + step);
    // Only after `latest` was replaced does the new checkpoint count.
    EXPECT_EQ(now, step == "before_cleanup" ? iteration : latest) << step;
    latest = now;
  }
  // Kills at fixed and random moments of the write.
  std::mt19937 rng(99);
  std::vector<int> delays_us = {0, 1000, 5000, 20000, 50000, 100000};
  for (int k = 0; k < 6; ++k) delays_us.push_back(static_cast<int>(rng() % 200000));
  int killed = 0;
  for (int us : delays_us) {
    ++iteration;
    killed += crash_save(iteration, {}, std::chrono::microseconds(us));
    const int64_t now = check_consistent(concat("killed after ", us, " us"));
    EXPECT_TRUE(now == latest || now == iteration) << now;
    latest = now;
  }
  std::printf("timed kills: %d of %zu saves were killed before finishing\n", killed,
              delays_us.size());
  EXPECT_GT(killed, 0) << "every save finished before its kill; nothing was tested";
  // Leftovers are there (some kill interrupted a save) until the next good save removes them.
  ++iteration;
  save_now(make_state(iteration, true), iteration);
  EXPECT_EQ(check_consistent("after a clean save"), iteration);
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string n = e.path().filename().string();
    EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n;
    EXPECT_EQ(n.find(".old-"), std::string::npos) << n;
  }
  // keep_last 2 plus the protected iteration 1.
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir_)) checkpoints += e.is_directory();
  EXPECT_LE(checkpoints, 3);
}

TEST_F(CheckpointAtomicity, KilledAsyncSavesNeverBreakTheLatestCheckpoint) {
  save_now(make_state(1, true), 1);
  int64_t iteration = 1, latest = 1;
  std::mt19937 rng(7);
  std::vector<int> delays_us = {0, 2000, 10000, 40000, 80000};
  for (int k = 0; k < 5; ++k) delays_us.push_back(static_cast<int>(rng() % 200000));
  int killed = 0;
  for (int us : delays_us) {
    ++iteration;
    killed += crash_save(iteration, {}, std::chrono::microseconds(us), /*async=*/true);
    const int64_t now = check_consistent(concat("async save killed after ", us, " us"));
    EXPECT_TRUE(now == latest || now == iteration) << now;
    latest = now;
  }
  std::printf("timed kills: %d of %zu async saves were killed before finishing\n", killed,
              delays_us.size());
  EXPECT_GT(killed, 0) << "every save finished before its kill; nothing was tested";
  ++iteration;
  save_async(make_state(iteration, true), iteration);
  EXPECT_EQ(check_consistent("after a clean async save"), iteration);
}

// The checkpoint holds the buffers as they were when the save started, though training changes
// them while the shard is written.
TEST_F(CheckpointAtomicity, AsyncSaveWritesTheSnapshotTakenAtStart) {
  save_now(make_state(1, true), 1);
  State s = make_state(2, true);
  auto comm = parallel::make_single_process_communicator("world");
  AsyncSave a;
  a.start(request(s, 2), *comm);
  EXPECT_TRUE(a.pending());
  for (auto& b : s.buffers) std::fill(b.begin(), b.end(), -7.0f);  // the next steps' updates
  EXPECT_THROW(a.start(request(s, 3), *comm), Error);              // one save in flight at a time
  EXPECT_TRUE(a.finish(*comm, /*wait=*/true, 2, checkpoint_path(dir_, 1)));
  EXPECT_FALSE(a.pending());
  EXPECT_FALSE(a.finish(*comm, true, 2, checkpoint_path(dir_, 1)));  // nothing pending
  EXPECT_EQ(check_consistent("async save"), 2);
}

// Stable pieces (device tensors staged to private host copies by the checkpointer) are written
// from their own buffers, which the request keeps alive, not copied into the snapshot again.
TEST_F(CheckpointAtomicity, AsyncSaveWritesStablePiecesWithoutASecondCopy) {
  save_now(make_state(1, true), 1);
  State s = make_state(2, true);
  SaveRequest req = request(s, 2);
  int64_t copied = 0;
  for (size_t t = 0; t < req.pieces.size(); ++t) {
    if (t % 2 == 1) {  // a private copy: owned by a tensor handed to the request
      Tensor staged = Tensor::empty(kTensors[t].second, DType::F32);
      std::copy(s.buffers[t].begin(), s.buffers[t].end(), staged.data<float>());
      req.pieces[t].data = staged.data<float>();
      req.pieces[t].stable = true;
      req.keep_alive.push_back(staged);
    } else {
      copied += kTensors[t].second.numel();
    }
  }
  auto comm = parallel::make_single_process_communicator("world");
  AsyncSave a;
  a.start(std::move(req), *comm);
  EXPECT_EQ(a.snapshot_floats(), copied);
  for (auto& b : s.buffers) std::fill(b.begin(), b.end(), -7.0f);  // training goes on
  EXPECT_TRUE(a.finish(*comm, /*wait=*/true, 2, checkpoint_path(dir_, 1)));
  EXPECT_EQ(check_consistent("async save with stable pieces"), 2);
}

// A write that fails in the background (here a file size limit, standing in for a full disk)
// fails the save on every rank at commit, with the error, and `latest` keeps the last good one.
TEST_F(CheckpointAtomicity, FailedAsyncWriteIsAnErrorAndKeepsTheLatestCheckpoint) {
  save_now(make_state(1, true), 1);
  const State s = make_state(2, true);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    const rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_async(s, 2);
    } catch (const Error& e) {
      const std::string what = e.what();
      ::_exit(what.find("checkpoint save of iteration 2") != std::string::npos ? 0 : 4);
    }
    ::_exit(5);  // the save did not fail
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "4: another error; 5: the save did not fail";
  EXPECT_EQ(check_consistent("failed async write"), 1);
}

}  // namespace
}  // namespace megatron::checkpoint
