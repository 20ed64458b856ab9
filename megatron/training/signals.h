#pragma once
// SIGTERM and SIGUSR1 (what Slurm sends before a time limit or preemption) ask the trainer to
// save at the next step boundary and exit cleanly. The handler only sets a flag; the trainer
// polls it and all ranks agree through an all-reduce, so they stop at the same step.
namespace megatron::training {

void install_exit_signal_handlers();
bool exit_signal_received();
void reset_exit_signal();  // tests

}  // namespace megatron::training
