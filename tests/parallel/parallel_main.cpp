// main() of every tests/parallel program: MPI up, GoogleTest on every rank (rank 0 prints the
// usual report, other ranks only their failures, prefixed with the rank), then all ranks agree
// on the exit code (non-zero if any rank failed).
#include <cstdio>
#include <memory>

#include "parallel_test.h"

namespace megatron::parallel::testing {
namespace {
std::unique_ptr<MpiCommunicator> g_world;
LaunchInfo g_launch;
}  // namespace

MpiCommunicator& world() { return *g_world; }
const LaunchInfo& launch() { return g_launch; }

}  // namespace megatron::parallel::testing

namespace {

// Failures only, prefixed "[rank R]".
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  namespace mp = megatron::parallel;
  mp::MpiRuntime runtime(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = runtime.info().world_rank;
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  mp::testing::g_launch = runtime.info();
  mp::testing::g_world = mp::MpiCommunicator::world();
  int rc = RUN_ALL_TESTS();

  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != 0)
    std::fprintf(stderr, "parallel test: a rank failed (see [rank R] lines above)\n");
  // ctest reports Skipped on this line (tests/CMakeLists.txt): only when no case passed or failed
  // on any rank and some were skipped (e.g. NCCL without GPUs). gtest's own "[  PASSED  ] 0
  // tests" also follows a run whose every case failed, so it cannot be the signal.
  const auto* unit = ::testing::UnitTest::GetInstance();
  int ran[2] = {unit->successful_test_count() + unit->failed_test_count(),
                unit->skipped_test_count()};
  int all[2] = {0, 0};
  MPI_Allreduce(ran, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && worst == 0 && all[0] == 0 && all[1] > 0)
    std::printf("parallel test: every case skipped\n");
  mp::testing::g_world.reset();
  return worst;
}
