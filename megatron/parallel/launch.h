#pragma once
// Where this process sits in the job: rank, node, local rank, launcher.
//
// Node identity comes from names, never from rank arithmetic: SLURMD_NODENAME when set (under
// Slurm several "nodes" may share one host name, see shared/notes/slurm-local.md), else the
// host name. Ranks with the same name are one node unless MPI's shared-memory split
// (MPI_COMM_TYPE_SHARED) separates them (distinct hosts that report the same name); they are
// then told apart as "name:1", "name:2", ... Conversely ranks on one host under different
// node names are different nodes (the names win). Node order is first appearance in world
// rank order; local_rank is the index among the ranks of one node, in world rank order.
#include <string>
#include <string_view>
#include <vector>

namespace megatron::parallel {

struct LaunchInfo {
  int world_rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  int node_index = 0, num_nodes = 1;
  std::string node_name;
  std::string launcher = "none";  // "none" | "mpirun" | "slurm"
};

// This process alone (no MPI): rank 0 of 1 on this node.
LaunchInfo single_process_launch_info();

// The name this process gives its node: SLURMD_NODENAME, else gethostname().
std::string local_node_name();

// "mpirun" when Open MPI's launcher started us (OMPI_COMM_WORLD_SIZE), "slurm" under srun
// (SLURM_STEP_ID / SLURM_PROCID), else "none" for one process and "mpirun" for more.
std::string detect_launcher(int world_size);

// Pure: rank/node layout of `rank` given the node name of every world rank (already made
// unique per node). Sets everything but launcher.
LaunchInfo layout_from_node_names(int rank, const std::vector<std::string>& node_of_rank);

// CPU threads for this rank: max(1, processors on the node / ranks on the node).
// Processors = online CPUs, capped by SLURM_CPUS_ON_NODE when Slurm sets it.
int default_cpu_threads(const LaunchInfo& info);

// Owns MPI's lifetime: MPI_Init_thread (asking for MPI_THREAD_SERIALIZED) in the constructor,
// MPI_Finalize in the destructor. Works without a launcher (a singleton world of one). If MPI
// is already initialised it neither initialises nor finalises. Construct one per process,
// first thing in main, and destroy every MpiCommunicator before it.
//
// On a fatal error in a multi-rank job call abort(): returning from main would reach
// MPI_Finalize, which waits for ranks that may be stuck waiting for this one.
class MpiRuntime {
 public:
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Gathered over MPI_COMM_WORLD at construction (a collective: every rank constructs).
  const LaunchInfo& info() const { return info_; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_* provided
  bool owns_mpi() const { return owns_; }

  // Prints "rank R: <message>" to stderr and ends the whole job (MPI_Abort) with `code`.
  [[noreturn]] static void abort(int code, std::string_view message);

 private:
  LaunchInfo info_;
  int thread_level_ = 0;
  bool owns_ = false;
};

// The LaunchInfo of this process in MPI_COMM_WORLD (collective; MPI must be initialised).
LaunchInfo discover_launch_info();

}  // namespace megatron::parallel
