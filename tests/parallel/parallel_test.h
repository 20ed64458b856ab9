#pragma once
// Shared by the tests/parallel programs (run under mpirun -np N by ctest): the world
// communicator and launch info that parallel_main.cpp sets up around RUN_ALL_TESTS.
//
// Every rank runs every test; a test must make the same collective calls on every rank (a
// check that throws on one rank only must come after that rank's last collective of the test).
#include <gtest/gtest.h>

#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"

namespace megatron::parallel::testing {

MpiCommunicator& world();
const LaunchInfo& launch();

}  // namespace megatron::parallel::testing
