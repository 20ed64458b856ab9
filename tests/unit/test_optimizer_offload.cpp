// Optimizer offload (optimizer.offload: cpu): the offloaded fraction of the owned segments keeps
// its fp32 masters and Adam moments in host memory and is stepped by the host AdamW through the
// chunked copy pipeline (megatron/optimizer/offload.h). On the CPU backend the "device" is host
// memory too, so the pipeline, the bookkeeping and the numerics run here as they do beside a GPU
// (the recipe key itself is cuda-only; the GPU run is in test_cuda_training): the offloaded
// masters and moments equal the reference AdamW's bit for bit, the model weights are their
// rounding, the rest steps on the device as before, and the device keeps no state for the
// offloaded part.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/reference/optim.h"
#include "megatron/backend/ops.h"
#include "megatron/optimizer/optimizer.h"

namespace megatron {
namespace {

void build(ParamStore& store) {
  store.add("emb", Shape{300, 16}, {}, true);  // 4800 elements
  store.add("w1", Shape{64, 33}, {}, true);
  store.add("b1", Shape{64}, {ParamInit::Kind::Zeros, 0.0f}, false);
  store.add("w2", Shape{128, 17}, {}, true);
}

void fill_grads(ParamStore& store, int step) {
  for (const ParamSegment& s : store.segments()) {
    // The same gradient for the same global element in any layout.
    for (int64_t i = 0; i < s.size(); ++i)
      s.grad.data<float>()[i] = 0.01f * static_cast<float>((s.begin + i) % 97) - 0.3f +
                                static_cast<float>(s.param->name.size()) * 0.001f * step;
  }
}

// build()'s parameters in `dtype` with `fraction` of the owned elements offloaded, initialised.
void finalize_offloaded(ParamStore& store, DType dtype, double fraction,
                        DataParallelSharding sharding = {}) {
  build(store);
  sharding.offload_fraction = fraction;
  store.finalize(dtype, sharding);
  store.initialize(3);
}

std::vector<float> to_vector(const Tensor& t) {
  const Tensor f = t.dtype() == DType::F32 ? t : [&] {
    Tensor w = Tensor::empty(t.shape(), DType::F32);
    ops::cast(t, w);
    return w;
  }();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

// The offloaded masters start from the initial weights, in fp32 too, where the resident masters
// are the weights themselves (an H200 run found them left at zero: every offloaded weight
// became a small update of zero after the first step).
TEST(OptimizerOffload, OffloadedMastersStartFromTheInitialWeights) {
  ParamStore plain;
  build(plain);
  plain.finalize(DType::F32, DataParallelSharding{});
  plain.initialize(3);
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (double fraction : {1.0, 0.5}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " fraction " + std::to_string(fraction));
      ParamStore store;
      finalize_offloaded(store, dtype, fraction);
      int checked = 0;
      for (const ParamSegment& s : store.segments()) {
        if (!s.offloaded) continue;
        const Tensor want = plain.get(s.param->name).weight.view({s.param->local_shape.numel()});
        ASSERT_EQ(std::memcmp(s.master.data<float>(), want.data<float>() + s.begin,
                              static_cast<size_t>(s.size()) * sizeof(float)),
                  0)
            << s.param->name;
        ++checked;
      }
      EXPECT_GT(checked, 0);
    }
  }
}

TEST(OptimizerOffload, OffloadedSegmentsStepOnTheHostBitForBit) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (double fraction : {1.0, 0.5}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " fraction " + std::to_string(fraction));
      ParamStore store;
      DataParallelSharding sharding;
      sharding.bucket_elements = 1000;  // several segments per parameter
      finalize_offloaded(store, dtype, fraction, sharding);
      const optim::OptimizerSettings settings{config::OptimizerType::AdamW, 0.9, 0.95, 1e-8, 0.1};
      optim::Optimizer opt(store, settings);
      // The reference: every offloaded segment's master and moments stepped by ref::adamw_step.
      int64_t offloaded = 0, resident = 0;
      std::vector<std::vector<float>> ref_w, ref_m, ref_v;
      for (const optim::Segment& s : opt.segments()) {
        (s.offloaded ? offloaded : resident) += s.size();
        ref_w.push_back(to_vector(s.master));
        ref_m.emplace_back(static_cast<size_t>(s.size()), 0.0f);
        ref_v.emplace_back(static_cast<size_t>(s.size()), 0.0f);
      }
      EXPECT_GT(offloaded, 0);
      if (fraction == 1.0) {
        EXPECT_EQ(resident, 0);
      } else {
        EXPECT_GT(resident, 0);
      }
      // The device holds state only for the resident part.
      EXPECT_EQ(opt.state_bytes(), 8 * resident);
      if (dtype != DType::F32) {
        EXPECT_EQ(store.masters().numel(), resident);
      }
      EXPECT_EQ(store.host_masters().numel(), offloaded);
      for (int step = 1; step <= 3; ++step) {
        fill_grads(store, step);
        const double lr = 0.01 * step;
        opt.step(lr);
        const math::AdamWParams hp{static_cast<float>(lr),
                                   0.9f,
                                   0.95f,
                                   1e-8f,
                                   0.1f,
                                   static_cast<float>(1.0 - std::pow(0.9, step)),
                                   static_cast<float>(1.0 - std::pow(0.95, step))};
        for (size_t i = 0; i < opt.segments().size(); ++i) {
          const optim::Segment& s = opt.segments()[i];
          if (!s.offloaded) continue;
          math::AdamWParams p = hp;
          p.weight_decay = s.param->weight_decay ? 0.1f : 0.0f;
          kernels::ref::adamw_step(ref_w[i].data(), s.grad.data<float>(), ref_m[i].data(),
                                   ref_v[i].data(), s.size(), p);
        }
      }
      Tensor* host_m = opt.host_exp_avg();
      ASSERT_NE(host_m, nullptr);
      for (size_t i = 0; i < opt.segments().size(); ++i) {
        const optim::Segment& s = opt.segments()[i];
        if (!s.offloaded) continue;
        const size_t bytes = static_cast<size_t>(s.size()) * sizeof(float);
        EXPECT_EQ(std::memcmp(s.master.data<float>(), ref_w[i].data(), bytes), 0) << i;
        EXPECT_EQ(std::memcmp(host_m->data<float>() + s.state_offset, ref_m[i].data(), bytes), 0);
        EXPECT_EQ(std::memcmp(opt.host_exp_avg_sq()->data<float>() + s.state_offset,
                              ref_v[i].data(), bytes),
                  0);
        // The model weights are the masters rounded to the model dtype.
        Tensor rounded = Tensor::empty({s.size()}, dtype);
        ops::cast(s.master, rounded);
        EXPECT_EQ(std::memcmp(rounded.raw(), s.weight.raw(), rounded.nbytes()), 0) << i;
      }
    }
  }
}

}  // namespace
}  // namespace megatron
