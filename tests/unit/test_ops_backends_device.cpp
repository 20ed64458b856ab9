// How ops:: rejects tensors on the wrong or on mixed devices and dtypes that break the one dtype
// contract (run everywhere); CUDA tensors' copies, views, zero_ and memory stats (GPU only); and
// Tensor's device plumbing (allocation, copies, to(), zero_, memory stats) driven through a fake
// device memory backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "megatron/backend/ops.h"
#include "megatron/core/device_memory.h"
#include "megatron/core/tensor.h"
#include "tests/support/ops_test_util.h"

namespace megatron {
namespace {

using ops::testing::host_tensor;
using ops::testing::round_to;
using ops::testing::values;
using ::testing::HasSubstr;

// ---- CUDA tensors: copies, views, zero_, memory stats (GPU only) ----------------------------

TEST(CudaTensor, CopiesRoundTripEveryDtypeBitForBit) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U16, DType::U8}) {
    Tensor h = Tensor::empty({3, 1001}, t);
    auto* bytes = static_cast<uint8_t*>(h.raw());
    for (size_t i = 0; i < h.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    Tensor d = h.to(Device::CUDA);
    EXPECT_EQ(d.device(), Device::CUDA);
    EXPECT_TRUE(d.owns_storage());
    Tensor d2 = d.clone();  // device to device
    Tensor back = d2.to(Device::CPU);
    EXPECT_EQ(std::memcmp(back.raw(), h.raw(), h.nbytes()), 0) << dtype_name(t);
    // A view (row 1) copied out, and a host row copied into a device view.
    Tensor row = d.slice(1, 2).to(Device::CPU);
    EXPECT_EQ(std::memcmp(row.raw(), h.slice(1, 2).raw(), row.nbytes()), 0) << dtype_name(t);
    Tensor dv = d.slice(2, 3);
    dv.copy_from(h.slice(0, 1));
    Tensor all = d.to(Device::CPU);
    EXPECT_EQ(std::memcmp(all.slice(2, 3).raw(), h.slice(0, 1).raw(), row.nbytes()), 0);
  }
}

TEST(CudaTensor, ZerosToSelfAndMemoryStats) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  const MemoryStats cpu_before = cpu_memory_stats();
  const MemoryStats before = memory_stats(Device::CUDA);
  {
    Tensor z = Tensor::zeros({1 << 20}, DType::F32, Device::CUDA);
    EXPECT_GE(memory_stats(Device::CUDA).current_bytes, before.current_bytes + (4 << 20));
    EXPECT_GE(memory_stats(Device::CUDA).peak_bytes, before.current_bytes + (4 << 20));
    EXPECT_EQ(z.to(Device::CUDA).raw(), z.raw());  // already there: the same memory
    EXPECT_EQ(ops::sum_squares(z), 0.0);
    Tensor ones = host_tensor(std::vector<float>(1 << 20, 1.0f), {1 << 20}, DType::F32);
    z.copy_from(ones);
    EXPECT_EQ(ops::sum_squares(z), double(1 << 20));
    z.zero_();
    EXPECT_EQ(ops::sum_squares(z), 0.0);
    Tensor empty = Tensor::empty({0}, DType::F32, Device::CUDA);
    EXPECT_EQ(empty.to(Device::CPU).numel(), 0);
  }
  EXPECT_EQ(memory_stats(Device::CUDA).current_bytes, before.current_bytes);
  // Device tensors are not host memory. (The host tensor above was freed again.)
  EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_before.current_bytes);
}

TEST(CudaTensor, KeyMaskOnTheHostIsRejected) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  const kernels::AttentionShape s{4, 1, 2, 2, 8};
  std::vector<uint8_t> mask(4, 1);
  kernels::AttentionOptions opt;
  opt.scale = 0.3f;
  opt.causal = true;
  opt.key_mask = mask.data();  // host memory
  Tensor qkv = Tensor::zeros({4, 1, 2, 3, 8}, DType::F32, Device::CUDA);
  Tensor out = Tensor::zeros({4, 1, 2, 8}, DType::F32, Device::CUDA);
  Tensor probs = Tensor::zeros({1, 2, 4, 4}, DType::F32, Device::CUDA);
  try {
    ops::attention_forward(s, opt, qkv, out, probs);
    FAIL() << "a host key_mask with cuda tensors was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("key_mask must point to GPU memory"));
  }
}

TEST(CudaTensor, UnsupportedDtypesAreNamed) {
  if (!device_available(Device::CUDA)) GTEST_SKIP() << "no CUDA backend or no GPU here";
  Tensor x = Tensor::zeros({8}, DType::F64, Device::CUDA),
         y = Tensor::zeros({8}, DType::F64, Device::CUDA);
  try {
    ops::gelu_forward(x, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("gelu_forward: x must be fp32, bf16 or fp16 on cuda, got fp64"));
  }
  Tensor a = Tensor::zeros({8}, DType::F32, Device::CUDA),
         b = Tensor::zeros({8}, DType::BF16, Device::CUDA);
  EXPECT_THROW(ops::add(a, b, a), Error);  // mixed dtypes
}

// ---- device checks that hold in every build ---------------------------------------------------

// A CUDA tensor that is never dereferenced: the device checks run before any kernel.
Tensor fake_cuda(const Shape& shape, DType t = DType::F32) {
  alignas(256) static char never_touched[256];
  return Tensor::wrap(never_touched, shape, t, Device::CUDA);
}

TEST(DeviceDispatch, MixedDevicesAreRejectedNamingEachTensor) {
  Tensor a = Tensor::zeros({4}, DType::F32), out = Tensor::zeros({4}, DType::F32);
  try {
    ops::add(a, fake_cuda({4}), out);
    FAIL() << "mixed devices were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("add: tensors on different devices (a on cpu, b on cuda, "
                                    "out on cpu)"));
    EXPECT_THAT(e.what(), HasSubstr("Tensor::to(Device)"));
  }
  Tensor w = Tensor::zeros({3, 4}, DType::F32), y = Tensor::zeros({2, 3}, DType::F32);
  Tensor b = fake_cuda({3});
  try {
    ops::linear_forward(Tensor::zeros({2, 4}, DType::F32), w, &b, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("b on cuda"));
  }
}

TEST(DeviceDispatch, CastRejectsNonFloatTypes) {
  Tensor i = Tensor::zeros({4}, DType::I32), f = Tensor::zeros({4}, DType::F32);
  try {
    ops::cast(i, f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cast: src must be fp32, bf16 or fp16, got int32"));
  }
}

// The dtype contract (backend/float_args.h) holds on every device, so a mix the CUDA kernels
// would reject fails on the CPU too, naming the tensors.
TEST(DeviceDispatch, OpsCheckOneDtypeContractOnEveryDevice) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Tensor x = Tensor::zeros({4, 8}, DType::BF16), y32 = Tensor::zeros({4, 8}, DType::F32);
  EXPECT_THAT(error_of([&] { ops::gelu_forward(x, y32); }),
              HasSubstr("gelu_forward: y is fp32 but x is bf16 (these must have one dtype)"));
  Tensor w16 = Tensor::zeros({8}, DType::F16), mean = Tensor::zeros({4}, DType::F32),
         rstd = Tensor::zeros({4}, DType::F32), y = Tensor::zeros({4, 8}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::layernorm_forward(x, w16, w16, 1e-5f, y, mean, rstd); }),
              HasSubstr("layernorm_forward: w must be fp32 or bf16 (the dtype of x), got fp16"));
  Tensor mean16 = Tensor::zeros({4}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::rmsnorm_forward(x, y32.flat_view(0, {8}), 1e-5f, y, mean16); }),
              HasSubstr("rmsnorm_forward: rstd must be fp32, got bf16"));
  Tensor ints = Tensor::zeros({4, 8}, DType::I32);
  EXPECT_THAT(error_of([&] { ops::add(x, x, ints); }),
              HasSubstr("add: out must be fp32, bf16 or fp16, got int32"));
  // Allowed mixes: fp32 norm weights with bf16 activations, fp32 accumulation of bf16 values.
  ops::layernorm_forward(x, y32.flat_view(0, {8}), y32.flat_view(8, {8}), 1e-5f, y, mean, rstd);
  ops::add_inplace(y32, x);
}

TEST(DeviceDispatch, SumSquaresOfSeveralTensors) {
  const Tensor a = host_tensor({1.0f, -2.0f, 0.5f}, {3}, DType::F32),
               b = host_tensor({3.0f}, {1}, DType::F32);
  EXPECT_EQ(ops::sum_squares_of({a, b}), 14.25);
  EXPECT_EQ(ops::sum_squares_of({}), 0.0);
  const Tensor h = host_tensor({1.0f}, {1}, DType::BF16);
  EXPECT_THROW(ops::sum_squares_of({a, h}), Error);
}

// A 16-bit op on the CPU reads its 16-bit inputs exactly, computes in fp32 and rounds each
// written tensor once (to nearest even); in-place arguments see one copy.
TEST(DeviceDispatch, CpuSixteenBitOpsRoundTheFp32ResultOnce) {
  const std::vector<float> a = {1.0f, -2.5f, 3.0f, 0.1f}, b = {0.00390625f, 1.0f, -0.75f, 0.2f};
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor ta = host_tensor(a, {4}, dt), tb = host_tensor(b, {4}, dt), out = Tensor::empty({4}, dt);
    ops::add(ta, tb, out);
    const auto va = values(ta), vb = values(tb), vo = values(out);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(vo[i], round_to(dt, va[i] + vb[i])) << i;
    ops::add(ta, ta, ta);  // in place: every element doubled exactly
    const auto doubled = values(ta);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(doubled[i], 2.0f * va[i]) << i;
    Tensor acc = Tensor::zeros({4}, DType::F32);
    ops::add_inplace(acc, tb);  // fp32 accumulator, 16-bit addend: exact
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(acc.data<float>()[i], vb[i]) << i;
  }
}

TEST(DeviceDispatch, CudaTensorsWithoutACudaBackend) {
#ifdef MEGATRON_WITH_CUDA
  if (device_available(Device::CUDA)) GTEST_SKIP() << "this build has CUDA and a GPU";
  // A CUDA build on a machine without a GPU: allocation names the missing device.
  try {
    Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no CUDA device is visible"));
  }
#else
  try {
    Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("this build has no cuda backend"));
    EXPECT_THAT(e.what(), HasSubstr("-DMEGATRON_CUDA=ON"));
  }
  Tensor x = fake_cuda({4}), y = fake_cuda({4});
  try {
    ops::gelu_forward(x, y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("gelu_forward: the tensors are on cuda but this build has no CUDA "
                          "backend"));
  }
  EXPECT_THROW(Tensor::zeros({4}, DType::F32).to(Device::CUDA), Error);
  EXPECT_THROW(x.to(Device::CPU), Error);
  EXPECT_THROW(memory_stats(Device::CUDA), Error);
  EXPECT_FALSE(device_available(Device::CUDA));
#endif
  EXPECT_TRUE(device_available(Device::CPU));
}

// ---- Tensor's device plumbing through a fake backend (host memory posing as a device) --------

class FakeDeviceMemory final : public DeviceMemoryBackend {
 public:
  int device_count() override { return 1; }
  DeviceAllocation allocate(size_t bytes) override {
    ++allocs;
    live += static_cast<int64_t>(bytes);
    void* p = std::malloc(bytes);
    sizes[p] = bytes;
    return {p, 3};
  }
  void deallocate(const DeviceAllocation& block) noexcept override {
    ++frees;
    EXPECT_EQ(block.device_index, 3);
    live -= static_cast<int64_t>(sizes[block.ptr]);
    sizes.erase(block.ptr);
    std::free(block.ptr);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override {
    copies.push_back({dst_device, src_device});
    std::memmove(dst, src, bytes);
  }
  void zero(void* ptr, size_t bytes) override {
    ++zeros;
    std::memset(ptr, 0, bytes);
  }
  MemoryStats memory_stats() override { return {live, live}; }
  void synchronize() override { ++syncs; }

  int allocs = 0, frees = 0, zeros = 0, syncs = 0;
  int64_t live = 0;
  std::map<void*, size_t> sizes;
  std::vector<std::pair<Device, Device>> copies;  // (dst, src)
};

class ScopedBackend {
 public:
  explicit ScopedBackend(DeviceMemoryBackend* b)
      : previous_(set_device_memory_backend(Device::CUDA, b)) {}
  ~ScopedBackend() { set_device_memory_backend(Device::CUDA, previous_); }

 private:
  DeviceMemoryBackend* previous_;
};

TEST(TensorDevicePlumbing, AllocatesCopiesAndFreesThroughTheBackend) {
  FakeDeviceMemory fake;
  const MemoryStats cpu_before = cpu_memory_stats();
  {
    ScopedBackend scoped(&fake);
    EXPECT_TRUE(device_available(Device::CUDA));
    Tensor h = Tensor::empty({2, 3}, DType::F32);
    for (int i = 0; i < 6; ++i) h.data<float>()[i] = float(i + 1);
    const int64_t cpu_with_h = cpu_memory_stats().current_bytes;

    Tensor d = h.to(Device::CUDA);  // allocate + host-to-device copy
    EXPECT_EQ(d.device(), Device::CUDA);
    EXPECT_EQ(fake.allocs, 1);
    EXPECT_EQ(memory_stats(Device::CUDA).current_bytes, 24);
    EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_with_h);  // device bytes are not host bytes
    Tensor same = d.to(Device::CUDA);
    EXPECT_EQ(same.raw(), d.raw());
    EXPECT_EQ(fake.allocs, 1);

    Tensor c = d.clone();                         // allocate + device-to-device
    Tensor back = c.slice(1, 2).to(Device::CPU);  // device-to-host of a view
    EXPECT_EQ(back.data<float>()[0], 4.0f);
    EXPECT_EQ(back.data<float>()[2], 6.0f);
    c.zero_();
    EXPECT_EQ(fake.zeros, 1);
    EXPECT_EQ(c.to(Device::CPU).data<float>()[5], 0.0f);
    Tensor z = Tensor::zeros({0}, DType::F32, Device::CUDA);  // nothing to allocate or zero
    EXPECT_EQ(fake.zeros, 1);

    const std::vector<std::pair<Device, Device>> expected = {{Device::CUDA, Device::CPU},
                                                             {Device::CUDA, Device::CUDA},
                                                             {Device::CPU, Device::CUDA},
                                                             {Device::CPU, Device::CUDA}};
    EXPECT_EQ(fake.copies, expected);
    EXPECT_THROW(d.copy_from(Tensor::zeros({5}, DType::F32)), Error);  // numel mismatch
    // Waiting for the device goes to its backend; the CPU has nothing queued.
    synchronize(Device::CPU);
    EXPECT_EQ(fake.syncs, 0);
    synchronize(Device::CUDA);
    EXPECT_EQ(fake.syncs, 1);
  }
  EXPECT_EQ(fake.allocs, fake.frees);
  EXPECT_EQ(fake.live, 0);
  EXPECT_EQ(cpu_memory_stats().current_bytes, cpu_before.current_bytes);
  // The previous registration is back.
  EXPECT_NE(device_memory_backend(Device::CUDA), &fake);
}

}  // namespace
}  // namespace megatron
