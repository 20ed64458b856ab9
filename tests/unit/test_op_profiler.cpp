// The ops' profiler (megatron/backend/op_profiler.h): marks at each outermost op's start and
// end on the device's clock, the time between ops kept apart, the kinds by op name, only the
// installing thread's ops; and the front end (ops.h) marking every op while one is installed.
#include <gtest/gtest.h>

#include <thread>

#include "megatron/backend/op_profiler.h"
#include "megatron/backend/ops.h"

namespace megatron {
namespace {

// A clock whose marks are the times it is given, in order.
class ScriptedClock final : public OpClock {
 public:
  explicit ScriptedClock(std::vector<double> times) : times_(std::move(times)) {}
  void mark() override { ++marks_; }
  std::vector<double> resolve() override {
    std::vector<double> out(times_.begin(), times_.begin() + marks_);
    times_.erase(times_.begin(), times_.begin() + marks_);
    marks_ = 0;
    return out;
  }

 private:
  std::vector<double> times_;
  size_t marks_ = 0;
};

TEST(OpProfiler, AddsOpsUpByNameAndKindWithTheGapsApart) {
  // linear_forward 0-3, (gap 1) attention 4-10, (gap 2) linear_forward 12-13.
  backend::OpProfiler p(std::make_unique<ScriptedClock>(std::vector<double>{0, 3, 4, 10, 12, 13}));
  p.begin("linear_forward");
  p.begin("cast");  // inside linear_forward: counted there
  p.end();
  p.end();
  p.begin("flash_attention_forward");
  p.end();
  p.begin("linear_forward");
  p.end();
  const backend::OpProfileReport r = p.report();
  EXPECT_DOUBLE_EQ(r.op_seconds, 10.0);
  EXPECT_DOUBLE_EQ(r.between_seconds, 3.0);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].op, "flash_attention_forward");
  EXPECT_EQ(r.ops[0].kind, "attention");
  EXPECT_DOUBLE_EQ(r.ops[0].seconds, 6.0);
  EXPECT_EQ(r.ops[1].op, "linear_forward");
  EXPECT_EQ(r.ops[1].calls, 2);
  EXPECT_DOUBLE_EQ(r.ops[1].seconds, 4.0);
  ASSERT_EQ(r.kinds.size(), 2u);
  EXPECT_EQ(r.kinds[1].kind, "gemm");
  // The report starts afresh.
  EXPECT_DOUBLE_EQ(p.report().op_seconds, 0.0);
  const std::string text = backend::format_op_profile(r, 2);
  EXPECT_NE(text.find("attention 3000.0 ms (46.2%)"), std::string::npos) << text;
  EXPECT_NE(text.find("between ops 1500.0 ms"), std::string::npos) << text;
}

// The trainer ends a segment after each profiled step: the host work until the next step is
// outside the steps' wall time, so it is not time between ops.
TEST(OpProfiler, TheGapAfterASegmentIsNotBetweenOps) {
  // step 1: linear_forward 0-2, (gap 1) cast 3-4; step 2 (after 96 of host work): cast 100-101,
  // (gap 2) linear_forward 103-105.
  backend::OpProfiler p(
      std::make_unique<ScriptedClock>(std::vector<double>{0, 2, 3, 4, 100, 101, 103, 105}));
  p.begin("linear_forward");
  p.end();
  p.begin("cast");
  p.end();
  p.end_segment();
  p.begin("cast");
  p.end();
  p.begin("linear_forward");
  p.end();
  const backend::OpProfileReport r = p.report();
  EXPECT_DOUBLE_EQ(r.op_seconds, 6.0);
  EXPECT_DOUBLE_EQ(r.between_seconds, 3.0);
}

TEST(OpProfiler, KindsByOpName) {
  EXPECT_EQ(backend::op_kind("linear_backward"), "gemm");
  EXPECT_EQ(backend::op_kind("attention_backward"), "attention");
  EXPECT_EQ(backend::op_kind("rope_forward"), "attention");
  EXPECT_EQ(backend::op_kind("rmsnorm_forward"), "norm");
  EXPECT_EQ(backend::op_kind("cross_entropy_loss"), "loss");
  EXPECT_EQ(backend::op_kind("adamw_step"), "optimizer");
  EXPECT_EQ(backend::op_kind("gather_rows"), "moe");
  EXPECT_EQ(backend::op_kind("gelu_forward"), "elementwise");
  EXPECT_EQ(backend::op_kind("dropout_rows"), "elementwise");
}

TEST(OpProfiler, OnlyTheInstallingThreadsOpsAreTimed) {
  backend::OpProfiler p(std::make_unique<HostOpClock>());
  std::thread other([&] {
    p.begin("cast");
    p.end();
  });
  other.join();
  EXPECT_TRUE(p.report().ops.empty());
}

TEST(OpProfiler, TheOpsFrontEndMarksEveryOpWhileInstalled) {
  Tensor x = Tensor::zeros({4, 8}, DType::F32), w = Tensor::zeros({16, 8}, DType::F32);
  Tensor y = Tensor::empty({4, 16}, DType::F32), g = Tensor::empty({4, 16}, DType::F32);
  ops::linear_forward(x, w, nullptr, y);  // not installed: not seen
  backend::OpProfiler p(backend::make_op_clock(Device::CPU));
  ASSERT_EQ(backend::set_op_profiler(Device::CPU, &p), nullptr);
  ops::linear_forward(x, w, nullptr, y);
  ops::linear_forward(x, w, nullptr, y);
  ops::gelu_forward(y, g, math::Gelu::Tanh);
  Tensor bad = Tensor::empty({3, 16}, DType::F32);
  EXPECT_THROW(ops::linear_forward(x, w, nullptr, bad), Error);  // refused before it runs
  EXPECT_EQ(backend::set_op_profiler(Device::CPU, nullptr), &p);
  ops::gelu_forward(y, g, math::Gelu::Tanh);  // removed: not seen
  const backend::OpProfileReport r = p.report();
  ASSERT_EQ(r.ops.size(), 2u);
  for (const backend::OpTime& o : r.ops) {
    EXPECT_EQ(o.calls, o.op == "linear_forward" ? 2 : 1) << o.op;
    EXPECT_GE(o.seconds, 0.0);
  }
  EXPECT_GE(r.between_seconds, 0.0);
}

}  // namespace
}  // namespace megatron
