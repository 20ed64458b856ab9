// Core types: DType names and sizes, the one dtype dispatch, Shape, Tensor ownership and views,
// and errors that carry context.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "megatron/core/tensor.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U16, DType::U8})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  try {
    parse_dtype("fp8");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'fp8'"));
  }
}

TEST(DType, DispatchReachesTheMatchingType) {
  auto size_of = [](DType t) { return dispatch_dtype(t, []<typename T>() { return sizeof(T); }); };
  EXPECT_EQ(size_of(DType::F64), 8u);
  EXPECT_EQ(size_of(DType::F16), 2u);
  EXPECT_EQ(size_of(DType::U16), 2u);
}

TEST(Tensor, OwningViewsShareStorage) {
  Tensor t = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_TRUE(t.owns_storage());
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  rows.data<float>()[0] = 5.0f;
  EXPECT_EQ(t.data<float>()[3], 5.0f);
  Tensor flat = t.view({12});
  EXPECT_EQ(flat.data<float>()[3], 5.0f);
  Tensor copy = t.clone();
  copy.data<float>()[3] = 1.0f;
  EXPECT_EQ(t.data<float>()[3], 5.0f);
}

TEST(Tensor, WrapIsNonOwning) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::wrap(buf, {2, 3}, DType::F32);
  EXPECT_FALSE(t.owns_storage());
  EXPECT_EQ(t.flat_view(4, {2}).data<float>()[1], 6.0f);
}

TEST(Tensor, MisuseIsReportedWithContext) {
  Tensor t = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(t.data<int32_t>(), Error);
  try {
    t.view({5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("tensor.cpp"));
  }
  EXPECT_THROW(t.slice(1, 4), Error);
  EXPECT_THROW(t.flat_view(5, {2}), Error);
  // No CUDA backend in this build, or no GPU on this machine: a CUDA tensor is an error.
  if (!device_available(Device::CUDA)) {
    EXPECT_THROW(Tensor::empty({2}, DType::F32, Device::CUDA), Error);
  }
}

TEST(Tensor, MemoryStatsTrackPeak) {
  const int64_t before = cpu_memory_stats().current_bytes;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::F32);
    EXPECT_GE(cpu_memory_stats().current_bytes, before + (4 << 20));
    EXPECT_GE(cpu_memory_stats().peak_bytes, before + (4 << 20));
  }
  EXPECT_EQ(cpu_memory_stats().current_bytes, before);
}

}  // namespace
}  // namespace megatron
