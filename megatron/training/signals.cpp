#include "megatron/training/signals.h"

#include <csignal>

namespace megatron::training {
namespace {
// Process-wide by nature: a signal is delivered to the process, not to an object.
volatile std::sig_atomic_t g_exit_requested = 0;

extern "C" void on_exit_signal(int) { g_exit_requested = 1; }
}  // namespace

void install_exit_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool exit_signal_received() { return g_exit_requested != 0; }
void reset_exit_signal() { g_exit_requested = 0; }

}  // namespace megatron::training
