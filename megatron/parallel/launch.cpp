#include "megatron/parallel/launch.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "megatron/core/error.h"
#include "megatron/parallel/mpi_communicator.h"

namespace megatron::parallel {
namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

constexpr int kNameBytes = 256;

// Ends the process when MPI start-up (MPI_Init and the first gather) has not finished within
// the communication timeout: a rank that never started, or was stopped inside MPI_Init, leaves
// the others blocked there, where no communicator watchdog runs yet. The timeout is
// MEGATRON_COMM_TIMEOUT_S, else the default parallel.comm_timeout_s (the recipe is read later).
class StartupWatchdog {
 public:
  StartupWatchdog() : timeout_s_(resolve_comm_timeout_s()) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
  }
  ~StartupWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, std::chrono::duration<double>(timeout_s_), [this] { return done_; }))
      return;
    const char* rank = env_or_null("OMPI_COMM_WORLD_RANK");
    if (rank == nullptr) rank = env_or_null("SLURM_PROCID");
    std::fprintf(stderr,
                 "rank %s (pid %d): MPI start-up did not complete within %.0f s: a rank of the "
                 "job did not start or was stopped during MPI_Init (the limit is "
                 "MEGATRON_COMM_TIMEOUT_S, default parallel.comm_timeout_s)\n",
                 rank ? rank : "?", static_cast<int>(::getpid()), timeout_s_);
    std::fflush(stderr);
    std::_Exit(1);
  }
  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

std::string local_node_name() {
  if (const char* slurm = env_or_null("SLURMD_NODENAME")) return slurm;
  char buf[kNameBytes] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string detect_launcher(int world_size) {
  if (env_or_null("OMPI_COMM_WORLD_SIZE")) return "mpirun";
  if (env_or_null("SLURM_STEP_ID") || (env_or_null("SLURM_PROCID") && env_or_null("SLURM_NTASKS")))
    return "slurm";
  return world_size > 1 ? "mpirun" : "none";
}

LaunchInfo single_process_launch_info() {
  LaunchInfo info;
  info.node_name = local_node_name();
  info.launcher = detect_launcher(1);
  return info;
}

LaunchInfo layout_from_node_names(int rank, const std::vector<std::string>& node_of_rank) {
  const int n = static_cast<int>(node_of_rank.size());
  MT_CHECK(rank >= 0 && rank < n, "rank ", rank, " outside a world of ", n);
  LaunchInfo info;
  info.world_rank = rank;
  info.world_size = n;
  info.node_name = node_of_rank[static_cast<size_t>(rank)];
  std::vector<std::string> order;  // distinct names by first appearance
  for (const std::string& name : node_of_rank)
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  info.num_nodes = static_cast<int>(order.size());
  info.node_index =
      static_cast<int>(std::find(order.begin(), order.end(), info.node_name) - order.begin());
  info.local_rank = 0;
  info.local_size = 0;
  for (int r = 0; r < n; ++r) {
    if (node_of_rank[static_cast<size_t>(r)] != info.node_name) continue;
    if (r < rank) ++info.local_rank;
    ++info.local_size;
  }
  return info;
}

int default_cpu_threads(const LaunchInfo& info) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  if (const char* slurm = env_or_null("SLURM_CPUS_ON_NODE")) {
    const long s = std::strtol(slurm, nullptr, 10);
    if (s >= 1) cpus = std::min(cpus, s);
  }
  const long per_rank = cpus / std::max(1, info.local_size);
  return static_cast<int>(std::max(1L, per_rank));
}

LaunchInfo discover_launch_info() {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");

  const std::string name = local_node_name();
  MT_CHECK(name.size() < static_cast<size_t>(kNameBytes), "node name '", name, "' longer than ",
           kNameBytes - 1, " bytes");
  std::vector<char> mine(kNameBytes, '\0');
  std::memcpy(mine.data(), name.data(), name.size());
  std::vector<char> all(static_cast<size_t>(kNameBytes) * static_cast<size_t>(size));
  check_mpi(MPI_Allgather(mine.data(), kNameBytes, MPI_CHAR, all.data(), kNameBytes, MPI_CHAR,
                          MPI_COMM_WORLD),
            "MPI_Allgather of node names");

  // Shared-memory domain of each rank, identified by its lowest world rank.
  MPI_Comm shared = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  int leader = rank;
  check_mpi(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, shared),
            "MPI_Allreduce over the shared-memory group");
  MPI_Comm_free(&shared);
  std::vector<int> leaders(static_cast<size_t>(size));
  check_mpi(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD),
            "MPI_Allgather of shared-memory leaders");

  // Names first; split a name further only when its ranks sit in different shared-memory
  // domains (distinct hosts reporting one name).
  std::vector<std::string> names(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    names[static_cast<size_t>(r)] = std::string(all.data() + static_cast<size_t>(r) * kNameBytes);
  std::map<std::string, std::vector<int>> domains_of_name;  // name -> leaders, first-seen order
  for (int r = 0; r < size; ++r) {
    auto& d = domains_of_name[names[static_cast<size_t>(r)]];
    if (std::find(d.begin(), d.end(), leaders[static_cast<size_t>(r)]) == d.end())
      d.push_back(leaders[static_cast<size_t>(r)]);
  }
  std::vector<std::string> keys(names);
  for (int r = 0; r < size; ++r) {
    const auto& d = domains_of_name[names[static_cast<size_t>(r)]];
    if (d.size() > 1) {
      const auto k = std::find(d.begin(), d.end(), leaders[static_cast<size_t>(r)]) - d.begin();
      keys[static_cast<size_t>(r)] += concat(":", k + 1);
    }
  }
  LaunchInfo info = layout_from_node_names(rank, keys);
  info.launcher = detect_launcher(size);
  return info;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  const StartupWatchdog watchdog;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  MT_CHECK(!finalized, "MpiRuntime: MPI was already finalised in this process");
  if (!initialized) {
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &thread_level_),
              "MPI_Init_thread");
    owns_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  MT_CHECK(thread_level_ >= MPI_THREAD_FUNNELED, "MPI provides thread level ", thread_level_,
           ", below MPI_THREAD_FUNNELED");
  info_ = discover_launch_info();
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from an error: finalising could wait forever on ranks blocked on this one.
    std::fprintf(stderr, "rank %d: exception escaping main; aborting the MPI job\n",
                 info_.world_rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

void MpiRuntime::abort(int code, std::string_view message) {
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool live = initialized && !finalized;
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %.*s\n", rank, static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  // Under Open MPI's mpirun a non-zero exit already ends the job (orte_abort_on_non_zero_status,
  // on by default) with one short notice, where MPI_Abort adds its help texts ("MPI_ABORT was
  // invoked ...", "help message aggregation") to the user's error. srun needs MPI_Abort to stop
  // the other tasks; a hung peer is still caught by its own watchdog either way.
  if (live && env_or_null("OMPI_COMM_WORLD_SIZE") == nullptr) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace megatron::parallel
