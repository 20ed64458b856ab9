#include "megatron/training/signals.h"

#include <omp.h>
#include <unistd.h>

#include <csignal>
#include <vector>

namespace megatron::training {
namespace {
// Process-wide by nature: a signal is delivered to the process, not to an object.
volatile std::sig_atomic_t g_exit_signal = 0;

constexpr int kExitSignals[] = {SIGTERM, SIGUSR1, SIGINT, SIGHUP};

extern "C" void on_exit_signal(int sig) {
  if (g_exit_signal != 0) _exit(128 + sig);  // the second one: now (async-signal-safe)
  g_exit_signal = sig;
}

// This thread's alternate signal stack, kept for the thread's life.
void use_alternate_stack() {
  thread_local std::vector<char> stack(static_cast<size_t>(SIGSTKSZ) * 8);
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  sigaltstack(&ss, nullptr);
}
}  // namespace

void install_exit_signal_handlers() {
  use_alternate_stack();
  // A process-directed signal may land on any thread that does not block it: the OpenMP workers
  // (which run the GEMM kernels too) get their own stacks.
#pragma omp parallel
  use_alternate_stack();
  struct sigaction action {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_ONSTACK;
  for (int s : kExitSignals) sigaction(s, &action, nullptr);
}

bool exit_signal_received() { return g_exit_signal != 0; }
int exit_signal_number() { return g_exit_signal; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}
void reset_exit_signal() { g_exit_signal = 0; }

std::string agreed_stop_reason(parallel::Communicator& world, bool time_limit_reached) {
  float flags[2] = {static_cast<float>(exit_signal_number()), time_limit_reached ? 1.0f : 0.0f};
  if (world.size() > 1) {
    Tensor t = Tensor::wrap(flags, {2}, DType::F32);
    world.all_reduce(t, parallel::ReduceOp::Max);
  }
  if (flags[0] > 0.0f) return concat(signal_name(static_cast<int>(flags[0])), " received");
  if (flags[1] > 0.0f) return "training.exit_duration_minutes reached";
  return {};
}

}  // namespace megatron::training
