// mpi_probe: a tiny MPI program for checking a launcher (srun, sbatch, mpirun).
// Every rank describes itself (MPI rank/size, the Slurm task variables, gethostname) and the
// lines are gathered to rank 0, which prints them in rank order:
//   probe rank=R size=N slurm_procid=P slurm_localid=L slurm_nodeid=I slurmd_nodename=NAME
//         host=H cpus_per_task=C omp_num_threads=T
// ("-" where a variable is unset), then its own arguments (launch scripts pass flags through):
//   probe args: ARG1 ARG2 ...
// An MPI_Allreduce of (rank + 1) then proves that the ranks can talk to each other:
//   probe allreduce sum=S expected=E ok
// Exit status: 0 when the sum matches, 1 when it does not, 2 when MPI_Init fails.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_probe: MPI_Init failed\n");
    return 2;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");

  constexpr int kLine = 512;
  std::vector<char> line(kLine, '\0');
  std::snprintf(line.data(), kLine,
                "probe rank=%d size=%d slurm_procid=%s slurm_localid=%s slurm_nodeid=%s "
                "slurmd_nodename=%s host=%s cpus_per_task=%s omp_num_threads=%s",
                rank, size, env_or("SLURM_PROCID", "-").c_str(),
                env_or("SLURM_LOCALID", "-").c_str(), env_or("SLURM_NODEID", "-").c_str(),
                env_or("SLURMD_NODENAME", "-").c_str(), host,
                env_or("SLURM_CPUS_PER_TASK", "-").c_str(), env_or("OMP_NUM_THREADS", "-").c_str());

  std::vector<char> all(rank == 0 ? static_cast<size_t>(kLine) * size : 0);
  MPI_Gather(line.data(), kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD);

  long long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long long expected = static_cast<long long>(size) * (size + 1) / 2;

  if (rank == 0) {
    for (int r = 0; r < size; ++r) std::printf("%s\n", all.data() + static_cast<size_t>(r) * kLine);
    std::printf("probe args:");
    for (int i = 1; i < argc; ++i) std::printf(" %s", argv[i]);
    std::printf("\n");
    std::printf("probe allreduce sum=%lld expected=%lld %s\n", sum, expected,
                sum == expected ? "ok" : "MISMATCH");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return sum == expected ? 0 : 1;
}
