#pragma once
// Timing of collectives for the MPI bandwidth benchmarks (bench_allreduce, bench_alltoall).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace megatron::bench {

// Seconds per call of fn, the slowest rank's average over `iters` calls.
inline double time_per_call(int iters, const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) fn();
  double dt = (MPI_Wtime() - t0) / iters, slowest = 0;
  MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// Iterations that take about `seconds` (agreed on by all ranks).
inline int calibrate(double seconds, const std::function<void()>& fn) {
  const double once = time_per_call(2, fn);
  return std::clamp(static_cast<int>(seconds / std::max(once, 1e-9)), 3, 2000);
}

// --max-mb M (largest message, MiB) and --seconds S (time per size) of both benchmarks.
struct CollectiveArgs {
  int64_t max_mb = 64;
  double seconds = 0.3;
};
inline CollectiveArgs parse_collective_args(int argc, char** argv) {
  CollectiveArgs a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-mb") == 0) a.max_mb = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) a.seconds = std::atof(argv[i + 1]);
  }
  return a;
}

}  // namespace megatron::bench
