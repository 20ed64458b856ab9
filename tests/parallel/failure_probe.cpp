// A job in which rank 1 fails while the other ranks sit in an all-reduce, to check that the
// whole job ends with an error naming rank 1 in bounded time (run by ctest through
// run_failure_probe.cmake, which checks the exit status, the time and the output).
//   failure_probe hang           rank 1 never joins: rank 0's watchdog (5 s) aborts the job
//   failure_probe abort          rank 1 calls std::abort(): mpirun kills the job
//   failure_probe exit           rank 1 exits with status 7 without MPI_Finalize
//   failure_probe runtime_abort  rank 1 reports an error through MpiRuntime::abort
//   failure_probe ok             nobody fails (the harness's control case)
//   failure_probe slow           rank 1 joins after 3 s: rank 0 prints "waiting" lines (every
//                                1 s) and the job completes
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  namespace mp = megatron::parallel;
  mp::MpiRuntime runtime(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "ok";
  auto world = mp::MpiCommunicator::world(/*timeout_s=*/5.0);
  world->set_warn_seconds(1.0);
  const int rank = world->rank();
  world->barrier();  // everybody is up

  if (rank == 1) {
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(120));
    if (mode == "slow") std::this_thread::sleep_for(std::chrono::seconds(3));
    if (mode == "abort") std::abort();
    if (mode == "exit") std::exit(7);
    if (mode == "runtime_abort") mp::MpiRuntime::abort(2, "simulated failure in rank 1");
  }
  megatron::Tensor t = megatron::Tensor::zeros(megatron::Shape{1024}, megatron::DType::F32);
  world->all_reduce(t, mp::ReduceOp::Sum);
  std::printf("rank %d: all-reduce done (mode %s)\n", rank, mode.c_str());
  world.reset();
  return 0;
}
