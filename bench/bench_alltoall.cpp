// All-to-all bandwidth over MPI (the MoE token dispatch), NCCL-tests conventions:
//   algbw = bytes / time (bytes = what one rank sends in total),  busbw = algbw * (n - 1) / n
// for MpiCommunicator::all_to_all (the uneven all-to-all the dispatcher uses, here with even
// counts) next to a plain blocking MPI_Alltoall on the same buffers, 1 KB .. 64 MB per rank.
//
//   mpirun --allow-run-as-root -np 2 build/bin/bench_alltoall [--max-mb 64] [--seconds 0.3]
//
// Each size runs a few warm-up iterations, then enough timed iterations to fill ~--seconds;
// the time per iteration is the slowest rank's average. Results are checked once (every rank
// receives chunk r of each source, holding source * 1000 + r).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

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
  const double bus_factor = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  if (me == 0) {
    std::printf("# all-to-all fp32 over %d rank(s) on %d node(s) (%s)\n", n,
                runtime.info().num_nodes, runtime.info().launcher.c_str());
    std::printf("# %10s %12s | %10s %10s %10s | %10s %10s %10s\n", "bytes", "elements", "comm us",
                "algbw GB/s", "busbw GB/s", "MPI us", "algbw GB/s", "busbw GB/s");
  }
  bool ok = true;
  for (int64_t bytes = 1024; bytes <= max_mb * 1024 * 1024; bytes *= 4) {
    const int64_t chunk = std::max<int64_t>(bytes / 4 / n, 1), count = chunk * n;
    Tensor in = Tensor::empty(Shape{count}, DType::F32),
           out = Tensor::empty(Shape{count}, DType::F32);
    for (int r = 0; r < n; ++r)
      std::fill_n(in.data<float>() + r * chunk, chunk, static_cast<float>(me * 1000 + r));
    const std::vector<int64_t> counts(static_cast<size_t>(n), chunk);
    auto comm_call = [&] { world->all_to_all(in, counts, out, counts); };
    auto mpi_call = [&] {
      MPI_Alltoall(in.raw(), static_cast<int>(chunk), MPI_FLOAT, out.raw(), static_cast<int>(chunk),
                   MPI_FLOAT, world->comm());
    };
    comm_call();
    for (int s = 0; s < n; ++s)
      ok = ok && out.data<float>()[s * chunk] == static_cast<float>(s * 1000 + me) &&
           out.data<float>()[(s + 1) * chunk - 1] == static_cast<float>(s * 1000 + me);
    const double sent = static_cast<double>(count) * 4;
    const double t_comm = time_per_call(calibrate(seconds, comm_call), comm_call);
    const double t_mpi = time_per_call(calibrate(seconds, mpi_call), mpi_call);
    if (me == 0) {
      const double alg_comm = sent / t_comm / 1e9, alg_mpi = sent / t_mpi / 1e9;
      std::printf("  %10.0f %12lld | %10.1f %10.3f %10.3f | %10.1f %10.3f %10.3f\n", sent,
                  static_cast<long long>(count), t_comm * 1e6, alg_comm, alg_comm * bus_factor,
                  t_mpi * 1e6, alg_mpi, alg_mpi * bus_factor);
      std::fflush(stdout);
    }
  }
  int all_ok = ok ? 1 : 0, agreed = 0;
  MPI_Allreduce(&all_ok, &agreed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (me == 0 && !agreed) std::printf("# WRONG RESULTS\n");
  world.reset();
  return agreed ? 0 : 1;
}
