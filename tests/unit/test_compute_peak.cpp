// ComputePeak on the CPU: a step that outruns a measured peak (impossible on the hardware: the
// start's measurement was disturbed) triggers a new measurement that only raises the peak, a
// bounded number of times; a peak the recipe gives is never second-guessed.
#include <gtest/gtest.h>

#include "megatron/training/compute_peak.h"

namespace megatron::training {
namespace {

TEST(ComputePeak, StepsFasterThanTheMeasuredPeakMeasureItAgain) {
  ComputePeak p = ComputePeak::decide(Device::CPU, DType::F32, 0.0, 0.0);
  ASSERT_GT(p.peak_flops, 0.0);
  const double measured = p.peak_flops;
  EXPECT_FALSE(p.remeasure_if_exceeded(0.5 * measured));  // a plausible step: nothing to do
  p.peak_flops = 1.0;                                     // as if the start's loops had hardly run
  p.gemm_flops = 1.0;
  EXPECT_TRUE(p.remeasure_if_exceeded(1e6));
  EXPECT_GT(p.peak_flops, 1e6);  // any real CPU does more than a megaFLOP/s
  EXPECT_GT(p.gemm_flops, 1e6);
  EXPECT_EQ(p.remeasured, 1);
  const double again = p.peak_flops;
  EXPECT_TRUE(p.remeasure_if_exceeded(2 * again));  // keeps the larger of the measurements
  EXPECT_GE(p.peak_flops, again);
  EXPECT_TRUE(p.remeasure_if_exceeded(1e30));
  EXPECT_FALSE(p.remeasure_if_exceeded(1e30));  // bounded: at most three per run
  EXPECT_EQ(p.remeasured, 3);
}

// A step above the GEMM probe's rate measures the probe again (bounded), keeping the larger
// value; a step below it leaves the probe alone.
TEST(ComputePeak, StepsFasterThanTheGemmProbeMeasureItAgain) {
  ComputePeak p = ComputePeak::decide(Device::CPU, DType::F32, 0.0, 0.0);
  ASSERT_GT(p.gemm_flops, 0.0);
  EXPECT_FALSE(p.remeasure_gemm_if_exceeded(0.5 * p.gemm_flops));
  p.gemm_flops = 1.0;  // as if the probe had hardly run
  EXPECT_TRUE(p.remeasure_gemm_if_exceeded(1e6));
  EXPECT_GT(p.gemm_flops, 1e6);
  EXPECT_TRUE(p.remeasure_gemm_if_exceeded(1e30));
  EXPECT_TRUE(p.remeasure_gemm_if_exceeded(1e30));
  EXPECT_FALSE(p.remeasure_gemm_if_exceeded(1e30));  // at most three per run
  EXPECT_EQ(p.gemm_remeasured, 3);
}

TEST(ComputePeak, ARecipePeakIsNeverRemeasured) {
  ComputePeak p = ComputePeak::decide(Device::CPU, DType::F32, 0.5, 0.0);
  EXPECT_EQ(p.peak_flops, 0.5e12);
  EXPECT_FALSE(p.remeasure_if_exceeded(1e15));
  EXPECT_EQ(p.peak_flops, 0.5e12);
}

}  // namespace
}  // namespace megatron::training
