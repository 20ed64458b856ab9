#include "megatron/training/device_groups.h"

#include "megatron/core/error.h"
#include "megatron/parallel/mpi_communicator.h"
#if MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/nccl_communicator.h"
#endif

namespace megatron::training {

DeviceGroups::DeviceGroups(Device device, const TrainerGroups& mesh_groups) : groups_(mesh_groups) {
  if (device == Device::CPU) return;
  MT_CHECK(device == Device::CUDA, "no communicators for device ", device_name(device));
#if MEGATRON_WITH_CUDA
  auto to_nccl = [&](parallel::Communicator* c) -> parallel::Communicator* {
    if (c == nullptr || c->size() == 1) return c;
    const auto* mpi = dynamic_cast<const parallel::MpiCommunicator*>(c);
    MT_CHECK(mpi != nullptr, "process group '", c->name(), "' is not an MPI group");
    owned_.push_back(std::make_unique<cuda::NcclCommunicator>(*mpi));
    return owned_.back().get();
  };
  const bool expert_tp_is_tp = groups_.expert_tp == groups_.tp;
  groups_.tp = to_nccl(groups_.tp);
  groups_.expert_tp = expert_tp_is_tp ? groups_.tp : to_nccl(groups_.expert_tp);
  groups_.dp = to_nccl(groups_.dp);
  groups_.pp = to_nccl(groups_.pp);
  groups_.embedding = to_nccl(groups_.embedding);
  groups_.model = to_nccl(groups_.model);
  groups_.ep = to_nccl(groups_.ep);
  groups_.expert_dp = to_nccl(groups_.expert_dp);
  groups_.dp_shard = to_nccl(groups_.dp_shard);
  groups_.dp_replica = to_nccl(groups_.dp_replica);
#else
  MT_CHECK(false,
           "training.device: cuda, but this build has no CUDA backend (configure with "
           "-DMEGATRON_CUDA=ON)");
#endif
}

DeviceGroups::~DeviceGroups() = default;

}  // namespace megatron::training
