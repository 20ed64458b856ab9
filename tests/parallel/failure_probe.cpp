// A job in which rank 1 fails while the other ranks sit in an all-reduce, to check that the
// whole job ends with an error naming rank 1 in bounded time (run by ctest through
// run_failure_probe.cmake, which checks the exit status, the time and the output).
//   failure_probe hang           rank 1 never joins: rank 0's watchdog (5 s) aborts the job
//   failure_probe abort          rank 1 calls std::abort(): mpirun kills the job
//   failure_probe exit           rank 1 exits with status 7 without MPI_Finalize
//   failure_probe runtime_abort  rank 1 reports an error through MpiRuntime::abort
//   failure_probe send_hang      rank 0 sends 64 MiB point to point, rank 1 never receives:
//                                rank 0's watchdog (5 s) aborts the job naming the send
//   failure_probe send_exit      the same, rank 1 exits with status 7 instead: the job ends
//   failure_probe ok             nobody fails (the harness's control case)
//   failure_probe slow           rank 1 joins after 3 s: rank 0 prints "waiting" lines (every
//                                1 s) and the job completes
//   failure_probe late_start     rank 1 reaches MPI_Init 8 s late (as a rank stopped before or
//                                inside it): rank 0's start-up watchdog (MEGATRON_COMM_TIMEOUT_S
//                                4) ends the job naming the start-up
//   failure_probe stopped        rank 1 waits in the all-reduce, rank 0 stops it (SIGSTOP) for
//                                7 s, resumes it and joins: rank 1 says it did not run, does not
//                                count that against its 5 s timeout (nor blames rank 0), and the
//                                job completes
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  namespace mp = megatron::parallel;
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode == "late_start") {
    ::setenv("MEGATRON_COMM_TIMEOUT_S", "4", 1);
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (rank != nullptr && std::strcmp(rank, "1") == 0)
      std::this_thread::sleep_for(std::chrono::seconds(8));
  }
  mp::MpiRuntime runtime(&argc, &argv);
  auto world = mp::MpiCommunicator::world(/*timeout_s=*/5.0);
  world->set_warn_seconds(1.0);
  const int rank = world->rank();
  world->barrier();  // everybody is up
  // Every rank's process id (all ranks of the probe run on this machine).
  megatron::Tensor pid = megatron::Tensor::zeros(megatron::Shape{1}, megatron::DType::F64);
  pid.data<double>()[0] = static_cast<double>(::getpid());
  megatron::Tensor pids =
      megatron::Tensor::zeros(megatron::Shape{world->size()}, megatron::DType::F64);
  world->all_gather(pid, pids);
  if (mode == "stopped" && rank == 0) {
    const auto rank1 = static_cast<pid_t>(pids.data<double>()[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is in the all-reduce
    ::kill(rank1, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(7));
    ::kill(rank1, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }

  if (mode.starts_with("send_") && rank == 0) {
    // A large point-to-point send (as a local checkpoint's replica) to a peer that never takes
    // it: the same watchdog ends the wait naming the operation and the peer.
    megatron::Tensor big = megatron::Tensor::zeros(megatron::Shape{16 << 20}, megatron::DType::F32);
    world->batch_isend_irecv({{mp::P2POp::Send, big, 1, 7}})->wait();
  }
  if (rank == 1) {
    if (mode == "hang" || mode == "send_hang")
      std::this_thread::sleep_for(std::chrono::seconds(120));
    if (mode == "send_exit") std::exit(7);
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
