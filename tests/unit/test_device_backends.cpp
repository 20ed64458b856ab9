// The backends of each device come from one place (megatron/backend/device_backends.h): the
// ops object of a device, the communicator that carries its tensors (NCCL groups on CUDA), and
// the model's check at construction that its device has a backend in this build.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "megatron/backend/device_backends.h"
#include "megatron/backend/ops.h"
#include "megatron/core/device_memory.h"
#include "megatron/core/error.h"
#include "megatron/params/parameter.h"
#include "tests/support/ops_test_util.h"
#include "tests/support/planner_test_util.h"

namespace megatron {
namespace {

using planning::testing::ShapeOnlyComm;
using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

#ifdef MEGATRON_WITH_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

TEST(DeviceBackends, OneOpsObjectPerDevice) {
  const ops::DeviceOps& cpu = backend::device_ops(Device::CPU);
  EXPECT_EQ(cpu.device(), Device::CPU);
  EXPECT_EQ(&cpu, &backend::device_ops(Device::CPU));  // shared, not made per call
  if (kCudaBuild) {
    // The object exists in a CUDA build whether or not a GPU is visible (it holds no state).
    EXPECT_EQ(backend::device_ops(Device::CUDA).device(), Device::CUDA);
  } else {
    EXPECT_THAT(error_of([] { backend::device_ops(Device::CUDA, "linear_forward"); }),
                HasSubstr("linear_forward: the tensors are on cuda but this build has no CUDA "
                          "backend (configure with -DMEGATRON_CUDA=ON)"));
  }
}

// The front end hands the call to the device's backend: the CPU object computes what ops::
// computes, bit for bit.
TEST(DeviceBackends, TheFrontEndRunsTheDevicesBackend) {
  const Tensor a = ops::testing::host_tensor({1.5f, -2.0f, 0.25f, 3.0f}, {4}, DType::BF16);
  const Tensor b = ops::testing::host_tensor({0.5f, 1.0f, -0.75f, 2.0f}, {4}, DType::BF16);
  Tensor via_front = Tensor::empty({4}, DType::BF16), via_backend = Tensor::empty({4}, DType::BF16);
  ops::gelu_forward(a, via_front);
  backend::device_ops(Device::CPU).gelu_forward(a, via_backend, math::Gelu::Tanh);
  EXPECT_EQ(ops::testing::values(via_front), ops::testing::values(via_backend));
  Tensor sum = Tensor::empty({4}, DType::BF16);
  backend::device_ops(Device::CPU).add(a, b, sum);
  EXPECT_EQ(ops::testing::values(sum), (std::vector<float>{2.0f, -1.0f, -0.5f, 5.0f}));
}

TEST(DeviceBackends, CommunicatorsComeFromTheFactory) {
  ShapeOnlyComm pair(0, 2), single(0, 1);
  // The CPU's tensors travel through the host groups themselves; so do a group of one's.
  EXPECT_EQ(backend::device_communicator(Device::CPU, pair), nullptr);
  EXPECT_EQ(backend::device_communicator(Device::CUDA, single), nullptr);
  // On CUDA a group of two becomes NCCL, made only from an MPI group: anything else is named
  // (checked before any GPU is touched, so it runs here).
  const std::string err = error_of([&] { backend::device_communicator(Device::CUDA, pair); });
  if (kCudaBuild)
    EXPECT_THAT(err, HasSubstr("is neither an MPI nor an NCCL group"));
  else
    EXPECT_THAT(err, HasSubstr("communicators for cuda tensors, but this build has no CUDA "
                               "backend"));
}

TEST(DeviceBackends, AModelOnADeviceWithoutABackendFailsWhenBuilt) {
  EXPECT_EQ(ParamStore(Device::CPU).device(), Device::CPU);
  if (kCudaBuild) {
    EXPECT_EQ(ParamStore(Device::CUDA).device(), Device::CUDA);  // allocates nothing yet
  } else {
    EXPECT_THAT(error_of([] { ParamStore store(Device::CUDA); }),
                HasSubstr("the model's parameters: the tensors are on cuda but this build has no "
                          "CUDA backend"));
  }
}

TEST(DeviceBackends, EachProcessPicksItsDeviceOnTheNode) {
  EXPECT_EQ(backend::select_device_for_local_rank(Device::CPU, 3), -1);  // nothing to pick
  if (device_available(Device::CUDA))
    EXPECT_GE(backend::select_device_for_local_rank(Device::CUDA, 0), 0);
  else  // no GPU (or no CUDA build): an error, never a silent CPU run
    EXPECT_THROW(backend::select_device_for_local_rank(Device::CUDA, 0), Error);
}

}  // namespace
}  // namespace megatron
