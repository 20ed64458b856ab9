#include "megatron/training/device_groups.h"

#include "megatron/backend/device_backends.h"

namespace megatron::training {

DeviceGroups::DeviceGroups(Device device, const TrainerGroups& mesh_groups) : groups_(mesh_groups) {
  auto on_device = [&](parallel::Communicator* c) -> parallel::Communicator* {
    if (c == nullptr) return c;
    std::unique_ptr<parallel::Communicator> made = backend::device_communicator(device, *c);
    if (made == nullptr) return c;
    owned_.push_back(std::move(made));
    return owned_.back().get();
  };
  const bool expert_tp_is_tp = groups_.expert_tp == groups_.tp;
  groups_.tp = on_device(groups_.tp);
  groups_.expert_tp = expert_tp_is_tp ? groups_.tp : on_device(groups_.expert_tp);
  groups_.dp = on_device(groups_.dp);
  groups_.pp = on_device(groups_.pp);
  groups_.embedding = on_device(groups_.embedding);
  groups_.model = on_device(groups_.model);
  groups_.ep = on_device(groups_.ep);
  groups_.expert_dp = on_device(groups_.expert_dp);
  groups_.dp_shard = on_device(groups_.dp_shard);
  groups_.dp_replica = on_device(groups_.dp_replica);
  groups_.cp = on_device(groups_.cp);
  groups_.dp_cp = on_device(groups_.dp_cp);
  groups_.dp_shard_cp = on_device(groups_.dp_shard_cp);
}

DeviceGroups::~DeviceGroups() = default;

}  // namespace megatron::training
