#include "megatron/backend/device_backends.h"

#include "megatron/backend/cpu_ops.h"
#include "megatron/backend/op_profiler.h"
#include "megatron/core/error.h"
#ifdef MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/event_clock.h"
#include "megatron/backend/cuda/nccl_communicator.h"
#include "megatron/backend/cuda/ops_cuda.h"
#include "megatron/parallel/mpi_communicator.h"
#endif

namespace megatron::backend {

namespace {
constexpr const char* kNoCuda =
    "this build has no CUDA backend (configure with -DMEGATRON_CUDA=ON)";
}  // namespace

const ops::DeviceOps& device_ops(Device device, const char* user) {
  static const ops::CpuOps cpu;
  if (device == Device::CPU) return cpu;
#ifdef MEGATRON_WITH_CUDA
  static const ops::cuda_backend::CudaOps cuda;
  if (device == Device::CUDA) return cuda;
#endif
  MT_CHECK(false, user, ": the tensors are on ", device_name(device), " but ", kNoCuda);
  __builtin_unreachable();
}

std::unique_ptr<parallel::Communicator> device_communicator(Device device,
                                                            parallel::Communicator& group) {
  if (device == Device::CPU || group.size() == 1) return nullptr;
#ifdef MEGATRON_WITH_CUDA
  if (device == Device::CUDA) {
    if (dynamic_cast<const cuda::NcclCommunicator*>(&group) != nullptr) return nullptr;
    const auto* mpi = dynamic_cast<const parallel::MpiCommunicator*>(&group);
    MT_CHECK(mpi != nullptr, "process group '", group.name(),
             "' is neither an MPI nor an NCCL group: no NCCL communicator can be made from it");
    return std::make_unique<cuda::NcclCommunicator>(*mpi);
  }
#endif
  MT_CHECK(false, "communicators for ", device_name(device), " tensors, but ", kNoCuda);
  __builtin_unreachable();
}

std::unique_ptr<OpClock> make_op_clock(Device device) {
  if (device == Device::CPU) return std::make_unique<HostOpClock>();
#ifdef MEGATRON_WITH_CUDA
  if (device == Device::CUDA) return cuda::make_event_clock();
#endif
  MT_CHECK(false, "timing ops on ", device_name(device), ", but ", kNoCuda);
  __builtin_unreachable();
}

int select_device_for_local_rank(Device device, int local_rank) {
  if (device == Device::CPU) return -1;
#ifdef MEGATRON_WITH_CUDA
  if (device == Device::CUDA) return cuda::select_device_for_local_rank(local_rank);
#else
  (void)local_rank;
#endif
  MT_CHECK(false, "selecting a ", device_name(device), " device, but ", kNoCuda);
  __builtin_unreachable();
}

}  // namespace megatron::backend
