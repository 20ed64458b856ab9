#pragma once
// SIGTERM and SIGUSR1 (what Slurm sends before a time limit or preemption), SIGINT and SIGHUP
// ask the trainer to save at the next step boundary and exit cleanly. The handler only sets a
// flag; the trainer polls it and all ranks agree through an all-reduce, so they stop at the
// same step. A second signal ends the process at once (exit status 128 + signal).
//
// The handler runs on an alternate signal stack (the installing thread's and every OpenMP
// worker's): run on the interrupted code's own stack, its frame overwrote memory that
// JIT-compiled GEMM kernels keep below the stack pointer, and a SIGTERM in the middle of a GEMM
// corrupted the heap (reproduced: 4 of 11 signals early in training crashed the process;
// tools/reliability_campaign.sh signal).
#include <string>

#include "megatron/parallel/communicator.h"

namespace megatron::training {

// Installs the handlers and the alternate stacks of this thread and of the OpenMP workers of
// the current thread count (set the count first: the trainer does).
void install_exit_signal_handlers();
bool exit_signal_received();
// The signal that set the flag (0: none).
int exit_signal_number();
// "SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP", else "a signal".
const char* signal_name(int sig);
// Collective over `world`: why every rank stops now, the same on all of them ("SIGUSR1
// received" when any rank got a signal, the highest-numbered one; "training.exit_duration_minutes
// reached" when `time_limit_reached` on any rank), or empty to go on.
std::string agreed_stop_reason(parallel::Communicator& world, bool time_limit_reached);
void reset_exit_signal();  // tests

}  // namespace megatron::training
