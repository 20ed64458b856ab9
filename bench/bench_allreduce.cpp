// All-reduce bandwidth over MPI (CPU tensors, fp32 sum), NCCL-tests conventions:
//   algbw = bytes / time,  busbw = algbw * 2 (n - 1) / n
// for MpiCommunicator::all_reduce (non-blocking MPI_Iallreduce polled by the watchdog loop)
// next to a plain blocking MPI_Allreduce on the same buffer, 1 KB .. 64 MB.
//
//   mpirun --allow-run-as-root -np 2 build/bin/bench_allreduce [--max-mb 64] [--seconds 0.3]
//
// Each size runs a few warm-up iterations, then enough timed iterations to fill ~--seconds;
// the time per iteration is the slowest rank's average. Results are checked (sum of ranks).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "bench/mpi_timing.h"
#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"

namespace mp = megatron::parallel;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;

using megatron::bench::calibrate;
using megatron::bench::time_per_call;

int main(int argc, char** argv) {
  mp::MpiRuntime runtime(&argc, &argv);
  const auto [max_mb, seconds] = megatron::bench::parse_collective_args(argc, argv);
  auto world = mp::MpiCommunicator::world();
  const int n = world->size(), me = world->rank();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (me == 0) {
    std::printf("# all-reduce fp32 sum over %d rank(s) on %d node(s) (%s), MPI thread level %d\n",
                n, runtime.info().num_nodes, runtime.info().launcher.c_str(),
                runtime.thread_level());
    std::printf("# %10s %12s | %10s %10s %10s | %10s %10s %10s\n", "bytes", "elements", "comm us",
                "algbw GB/s", "busbw GB/s", "MPI us", "algbw GB/s", "busbw GB/s");
  }
  bool ok = true;
  for (int64_t bytes = 1024; bytes <= max_mb * 1024 * 1024; bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor t = Tensor::empty(Shape{count}, DType::F32);
    std::fill_n(t.data<float>(), count, 1.0f);

    auto comm_call = [&] { world->all_reduce(t, mp::ReduceOp::Sum); };
    auto mpi_call = [&] {
      MPI_Allreduce(MPI_IN_PLACE, t.raw(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    world->comm());
    };
    // Correctness once: every element becomes n.
    world->all_reduce(t, mp::ReduceOp::Sum);
    ok = ok && t.data<float>()[0] == static_cast<float>(n) &&
         t.data<float>()[count - 1] == static_cast<float>(n);

    // Values grow by n per call; fp32 stays finite for these iteration counts at n <= 64.
    const int iters_comm = calibrate(seconds, comm_call);
    const double t_comm = time_per_call(iters_comm, comm_call);
    std::fill_n(t.data<float>(), count, 1.0f);
    const int iters_mpi = calibrate(seconds, mpi_call);
    const double t_mpi = time_per_call(iters_mpi, mpi_call);
    if (me == 0) {
      const double alg_comm = bytes / t_comm / 1e9, alg_mpi = bytes / t_mpi / 1e9;
      std::printf("  %10lld %12lld | %10.1f %10.3f %10.3f | %10.1f %10.3f %10.3f\n",
                  static_cast<long long>(bytes), static_cast<long long>(count), t_comm * 1e6,
                  alg_comm, alg_comm * bus_factor, t_mpi * 1e6, alg_mpi, alg_mpi * bus_factor);
      std::fflush(stdout);
    }
  }
  int all_ok = ok ? 1 : 0, agreed = 0;
  MPI_Allreduce(&all_ok, &agreed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (me == 0 && !agreed) std::printf("# WRONG RESULTS\n");
  world.reset();
  return agreed ? 0 : 1;
}
