#include "megatron/training/pretrain.h"

#include <cstdlib>
#include <iomanip>
#include <memory>

#include "megatron/backend/device_backends.h"
#include "megatron/core/device_memory.h"
#include "megatron/core/format.h"
#include "megatron/parallel/mesh.h"
#include "megatron/parallel/mpi_communicator.h"
#include "megatron/training/data_sources.h"
#include "megatron/training/device_groups.h"
#include "megatron/training/elastic.h"
#include "megatron/training/trainer.h"

namespace megatron::training {

int run_pretraining(config::Recipe recipe, const parallel::LaunchInfo& launch, std::ostream& out) {
  fit_recipe_to_world(recipe, launch, out);
  recipe.resolve_for_world(launch.world_size);
  out << "# resolved recipe (" << recipe.source_path << ")\n" << recipe.to_yaml() << std::flush;

  // One process per device: the mesh and its groups, placed by node.
  std::unique_ptr<parallel::Communicator> world = parallel::make_single_process_communicator();
  if (launch.world_size > 1) {
    auto mpi = parallel::MpiCommunicator::world(recipe.parallel.comm_timeout_s);
    mpi->set_warn_seconds(recipe.parallel.comm_warn_s);  // the mesh's groups inherit both
    world = std::move(mpi);
  }
  const auto& p = recipe.parallel;
  parallel::MeshSizes sizes{p.tensor,
                            p.context,
                            p.expert,
                            p.data,
                            p.pipeline,
                            p.order,
                            p.num_distributed_optimizer_instances,
                            p.expert_tensor};
  std::unique_ptr<parallel::Mesh> mesh =
      launch.world_size > 1 ? std::make_unique<parallel::Mesh>(sizes, *world, launch)
                            : parallel::Mesh::single_process();
  if (launch.world_size > 1) {
    out << "launch: " << launch.launcher << ", " << launch.world_size << " ranks on "
        << launch.num_nodes << " node(s)\n"
        << mesh->placement().report() << std::flush;
  }
  const TrainerGroups mesh_groups = TrainerGroups::from_mesh(*mesh);
  // training.device: cuda: one GPU per process, picked by node-local rank.
  const Device device =
      recipe.training.device == config::TrainingDevice::CUDA ? Device::CUDA : Device::CPU;
  if (device == Device::CUDA) {
    MT_INPUT_CHECK(device_available(Device::CUDA), recipe.source_path,
                   ": training.device: cuda but no CUDA device is visible (or this build has no "
                   "CUDA backend: configure with -DMEGATRON_CUDA=ON)");
    const int gpu = backend::select_device_for_local_rank(device, launch.local_rank);
    out << "device: cuda, rank 0 on GPU " << gpu << " (GPU = local rank % visible devices)\n";
  }
  const DeviceGroups groups(device, mesh_groups);
  if (recipe.training.threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr)
    recipe.training.threads = parallel::default_cpu_threads(launch);

  const TrainingData data = make_training_data(recipe, launch, *world, out);
  check_elastic_device_fit(recipe, launch, data.vocab_size);
  Trainer trainer(recipe, data.vocab_size, data.train, data.valid, groups.groups(), out);
  const TrainSummary summary = trainer.run();
  report_rank_memory(*world, device, out);
  if (summary.evals.size() >= 2) {
    const double first = summary.evals.front().loss, last = summary.evals.back().loss;
    const StreamFormatGuard format(out);
    out << "validation loss " << std::fixed << std::setprecision(4) << first << " -> " << last
        << " (" << std::setprecision(1) << 100.0 * last / first << "% of the first)\n";
  }
  return 0;
}

}  // namespace megatron::training
