// mpirun-np: 2 4
// Local checkpoints with replicas (checkpoint.local_interval, training/local_checkpoints.h) on
// two "nodes" (SLURMD_NODENAME n1 for the first half of the ranks, n2 for the rest): after n2's
// copies are lost, a restart rebuilds n2's ranks from their replicas on n1 and continues bit for
// bit as the uninterrupted run; a local checkpoint that is incomplete, damaged or older than the
// global one leaves the global checkpoint in charge; replication without another node is refused.
// (The same under real Slurm with a killed node: tests/slurm/run_slurm_tests.sh local_checkpoint.)
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

std::string node_of(int rank) { return rank < world().size() / 2 ? "n1" : "n2"; }

struct Outcome {
  training::TrainSummary summary;
  std::string log;  // world rank 0's
};

struct Options {
  int64_t iters = 8;
  std::string local_dir = {}, save = {};  // empty: off
  int64_t fault_at = 0;                   // a persistent NaN on the last rank: the run dies there
  std::string node = {};                  // every rank's node name (default: node_of)
  double comm_timeout_s = 600;            // not part of the layout: a restart may change it
};

Outcome train(const Options& o) {
  ::setenv("SLURMD_NODENAME", (o.node.empty() ? node_of(world().rank()) : o.node).c_str(), 1);
  eq::RecipeSpec s;
  s.micro = 2;
  s.iters = o.iters;
  s.decay_iters = 12;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.dropout = 0.1;
  s.save = o.save;
  if (!o.save.empty()) s.checkpoint_extra = ", save_interval: 4";
  config::Recipe r = eq::make_recipe(s, "local.yaml");
  r.parallel.comm_timeout_s = o.comm_timeout_s;
  if (!o.local_dir.empty()) {
    r.checkpoint.local_interval = 3;
    r.checkpoint.local_dir = o.local_dir + "/{node}";
  }
  if (o.fault_at > 0) {
    r.training.error_injection_type = config::ErrorInjection::Persistent;
    r.training.error_injection_iteration = o.fault_at;
    r.training.error_injection_rank = world().size() - 1;
  }
  mp::MeshSizes sizes;
  sizes.dp = world().size();
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  std::ostringstream log;
  Outcome run;
  try {
    training::Trainer t(r, eq::kVocab, std::make_shared<eq::SyntheticTokens>(), nullptr,
                        training::TrainerGroups::from_mesh(mesh), log);
    run.summary = t.run();
  } catch (const Error& e) {
    if (o.fault_at == 0) throw;
    EXPECT_NE(std::string(e.what()).find("non-finite loss"), std::string::npos)
        << "[" << e.what() << "]";
  }
  run.log = log.str();
  return run;
}

// (Barriers on both sides: every rank is done with the files, e.g. deleting its older local
// copies, before rank 0 touches them; a CI run once saw rank 0's clean-up race another rank's.)
void on_rank0(const std::function<void()>& f) {
  world().barrier();
  if (world().rank() == 0) f();
  world().barrier();
}

// Losses of iterations first.. equal (bit for bit) to the reference's.
void expect_continues_exactly(const Outcome& got, const Outcome& reference, int64_t first) {
  ASSERT_EQ(got.summary.start_iteration, first - 1) << got.log;
  ASSERT_EQ(reference.summary.steps.size(), 12u);
  ASSERT_EQ(got.summary.steps.size(), static_cast<size_t>(13 - first));
  for (int64_t i = first; i <= 12; ++i)
    EXPECT_EQ(got.summary.steps[i - first].loss, reference.summary.steps[i - 1].loss)
        << "iteration " << i;
}

// World rank 0's log has `line` (the other ranks log nothing).
void expect_logged(const Outcome& run, const std::string& line) {
  if (world().rank() != 0) return;
  EXPECT_NE(run.log.find(line), std::string::npos) << run.log;
}

class LocalCheckpointsMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() < 2) GTEST_SKIP() << "needs two nodes' worth of ranks";
    dir_ = eq::shared_scratch_path("megatron_local_ckpt_");
    on_rank0([&] {  // a folder of an earlier run with the same pid is not this test's
      std::error_code ec;
      fs::remove_all(dir_, ec);
    });
    reference_ = train({.iters = 12});
  }
  void TearDown() override {
    on_rank0([&] {
      std::error_code ec;  // a failed clean-up must not throw out of TearDown
      fs::remove_all(dir_, ec);
    });
    ::unsetenv("SLURMD_NODENAME");
  }
  fs::path dir_;
  Outcome reference_;
};

TEST_F(LocalCheckpointsMpi, ALostNodeIsRebuiltFromReplicasBitForBit) {
  const std::string local = (dir_ / "local").string();
  train({.iters = 8, .local_dir = local});  // local checkpoints at 3 and 6
  on_rank0([&] {
    EXPECT_FALSE(fs::exists(dir_ / "local/n1/owner_0.iter_3.mtl")) << "the older one is deleted";
    EXPECT_TRUE(fs::exists(dir_ / "local/n1/owner_0.iter_6.mtl"));
    fs::remove_all(dir_ / "local/n2");  // node n2 and its memory are gone
  });
  const Outcome again = train({.iters = 12, .local_dir = local, .comm_timeout_s = 300});
  expect_continues_exactly(again, reference_, 7);
  expect_logged(again, "restored local checkpoint iteration 6");
  expect_logged(again, "rank 0 (n1): its own copy");
  const int last = world().size() - 1;
  expect_logged(again, "rank " + std::to_string(last) + " (n2): replica from rank " +
                           std::to_string(last - world().size() / 2) + " on n1");
}

TEST_F(LocalCheckpointsMpi, IncompleteDamagedOrOlderFallsBackToTheGlobalCheckpoint) {
  const std::string local = (dir_ / "local").string(), global = (dir_ / "global").string();
  // Global at 4, local at 3 and 6, the run dies at 8 (no save at exit).
  train({.iters = 12, .local_dir = local, .save = global, .fault_at = 8});
  on_rank0([&] {  // rank 1's own copy and its replica lost
    for (const char* node : {"n1", "n2"}) fs::remove(dir_ / "local" / node / "owner_1.iter_6.mtl");
  });
  const Outcome incomplete = train({.iters = 12, .local_dir = local, .save = global});
  expect_continues_exactly(incomplete, reference_, 5);
  expect_logged(incomplete, "local checkpoint iteration 6 is incomplete: no copy of rank(s) 1");

  on_rank0([&] { fs::remove_all(dir_); });
  train({.iters = 12, .local_dir = local, .save = global, .fault_at = 8});
  on_rank0([&] {  // one byte of rank 0's copy flipped: its CRC fails on restore
    const fs::path f = dir_ / "local/n1/owner_0.iter_6.mtl";
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 5));
    io.put('\x7f');
  });
  const Outcome damaged = train({.iters = 12, .local_dir = local, .save = global});
  expect_continues_exactly(damaged, reference_, 5);
  expect_logged(damaged, "local checkpoint iteration 6 could not be restored");

  // Global 8 (the end of a clean run) is newer than local 6.
  on_rank0([&] { fs::remove_all(dir_); });
  train({.iters = 8, .local_dir = local, .save = global});
  const Outcome older = train({.iters = 12, .local_dir = local, .save = global});
  expect_continues_exactly(older, reference_, 9);
  expect_logged(older,
                "local checkpoint iteration 6 is not newer than the global "
                "checkpoint (iteration 8): not used");
}

TEST_F(LocalCheckpointsMpi, ReplicationNeedsAnotherNode) {
  try {
    train({.iters = 2, .local_dir = (dir_ / "local").string(), .node = "n1"});
    FAIL() << "replication onto the same node was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.local_replication 1 needs at least 2 nodes "
                                         "to keep each copy on another node (the job has 1)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megatron
