#pragma once
// The communicators a training device's tensors travel through, made from the mesh's process
// groups: on the CPU the mesh's own groups; with training.device: cuda one NCCL communicator
// per group of more than one rank, made from that group's MPI communicator in the same order on
// every rank. The world group stays as it is: it carries host-side control values only (stop
// flags, checkpoints).
#include <memory>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/training/groups.h"

namespace megatron::training {

class DeviceGroups {
 public:
  DeviceGroups(Device device, const TrainerGroups& mesh_groups);
  ~DeviceGroups();
  const TrainerGroups& groups() const { return groups_; }

 private:
  std::vector<std::unique_ptr<parallel::Communicator>> owned_;
  TrainerGroups groups_;
};

}  // namespace megatron::training
