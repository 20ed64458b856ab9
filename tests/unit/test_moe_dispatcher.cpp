// The token dispatcher (megatron/transformer/moe/token_dispatcher.h) in one process (ep of one;
// test_moe_equivalence runs it over ep ranks): the rows each expert receives, in expert-major
// order with zero padding rows; combine returns every kept slot its expert row and zeros for the
// dropped; the backward moves are the exact adjoints of the forward ones; dispatch_backward sums
// a token's slots in slot order (bit for bit); 16-bit rows move untouched. The plan's indices
// and every move are the device ops the CUDA path runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/backend/ops.h"
#include "megatron/transformer/moe/token_dispatcher.h"

namespace megatron::moe {
namespace {

constexpr int64_t kT = 23, kK = 3, kE = 5, kD = 7;

struct Routing {
  std::vector<int32_t> experts;
  std::vector<uint8_t> kept;
};

// Distinct experts per token, about one slot in six dropped.
Routing random_routing(uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r;
  for (int64_t t = 0; t < kT; ++t) {
    std::vector<int32_t> all{0, 1, 2, 3, 4};
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < kK; ++j) {
      r.experts.push_back(all[static_cast<size_t>(j)]);
      r.kept.push_back(rng() % 6 == 0 ? 0 : 1);
    }
  }
  return r;
}

Tensor random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  Tensor t = Tensor::empty({n, kD}, DType::F32);
  for (int64_t i = 0; i < n * kD; ++i) t.data<float>()[i] = d(rng);
  return t;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.data<float>()[i]) * b.data<float>()[i];
  return s;
}

class Dispatcher : public ::testing::TestWithParam<int64_t> {};  // pad_to (0: none; > kT fits all)

TEST_P(Dispatcher, RowsGoToTheirExpertsAndComeBackToTheirSlots) {
  const int64_t pad_to = GetParam();
  auto ep = parallel::make_single_process_communicator("ep");
  TokenDispatcher disp(*ep, kE, Device::CPU);
  const Routing r = random_routing(1);
  const DispatchPlan p = disp.plan(r.experts.data(), r.kept.data(), kT, kK, kD, pad_to);
  const Tensor x = random_rows(kT, 2);
  Tensor rows;
  disp.dispatch(p, x, rows);
  // Expected: expert by expert, its kept slots in slot order, then zero padding rows.
  std::vector<int64_t> want_slot;  // -1: padding
  for (int32_t e = 0; e < kE; ++e) {
    int64_t n = 0;
    for (int64_t i = 0; i < kT * kK; ++i)
      if (r.kept[i] && r.experts[i] == e) {
        want_slot.push_back(i);
        ++n;
      }
    ASSERT_LE(n, pad_to > 0 ? pad_to : n);
    for (; pad_to > 0 && n < pad_to; ++n) want_slot.push_back(-1);
    EXPECT_EQ(p.rows_per_local_expert[e], pad_to > 0 ? pad_to : n) << "expert " << e;
  }
  ASSERT_EQ(rows.dim(0), static_cast<int64_t>(want_slot.size()));
  for (size_t i = 0; i < want_slot.size(); ++i)
    for (int64_t d = 0; d < kD; ++d)
      ASSERT_EQ(rows.data<float>()[i * kD + d],
                want_slot[i] < 0 ? 0.0f : x.data<float>()[(want_slot[i] / kK) * kD + d])
          << "row " << i;

  // combine: each kept slot gets its expert row back, dropped slots zeros.
  const Tensor expert_out = random_rows(rows.dim(0), 3);
  Tensor slots;
  disp.combine(p, expert_out, slots);
  for (int64_t i = 0; i < kT * kK; ++i) {
    int64_t at = -1;
    for (size_t j = 0; j < want_slot.size(); ++j)
      if (want_slot[j] == i) at = static_cast<int64_t>(j);
    for (int64_t d = 0; d < kD; ++d)
      ASSERT_EQ(slots.data<float>()[i * kD + d],
                at < 0 ? 0.0f : expert_out.data<float>()[at * kD + d])
          << "slot " << i;
  }

  // The backward moves are the adjoints: <dispatch x, g> = <x, dispatch_backward g> and
  // <combine y, s> = <y, combine_backward s>.
  const Tensor g = random_rows(rows.dim(0), 4), s = random_rows(kT * kK, 5);
  Tensor dx, d_expert;
  disp.dispatch_backward(p, g, dx);
  disp.combine_backward(p, s, d_expert);
  EXPECT_NEAR(dot(rows, g), dot(x, dx), 1e-4);
  EXPECT_NEAR(dot(slots, s), dot(expert_out, d_expert), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Padding, Dispatcher, ::testing::Values(int64_t{0}, int64_t{kT + 1}),
                         [](const auto& info) { return "pad_to_" + std::to_string(info.param); });

// dx[t] = the token's kept slots' gradients added in slot order from zero (not expert order):
// values of very different sizes make the order visible.
TEST(DispatcherBackward, SumsEachTokensSlotsInSlotOrder) {
  auto ep = parallel::make_single_process_communicator("ep");
  TokenDispatcher disp(*ep, kE, Device::CPU);
  const Routing r = random_routing(6);
  const DispatchPlan p = disp.plan(r.experts.data(), r.kept.data(), kT, kK, kD, 0);
  Tensor slot_grads = random_rows(kT * kK, 7);
  for (int64_t i = 0; i < slot_grads.numel(); i += 4) slot_grads.data<float>()[i] *= 3e7f;
  Tensor d_rows, dx;
  disp.combine_backward(p, slot_grads, d_rows);  // the slots' gradients, expert-major
  disp.dispatch_backward(p, d_rows, dx);
  ASSERT_EQ(dx.dtype(), DType::F32);
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t d = 0; d < kD; ++d) {
      volatile float acc = 0.0f;
      for (int64_t j = 0; j < kK; ++j)
        if (r.kept[t * kK + j]) acc = acc + slot_grads.data<float>()[(t * kK + j) * kD + d];
      const float want = acc;
      ASSERT_EQ(std::memcmp(&dx.data<float>()[t * kD + d], &want, sizeof(float)), 0)
          << "token " << t << " column " << d;
    }
}

TEST(DispatcherBackward, SixteenBitRowsMoveUntouched) {
  auto ep = parallel::make_single_process_communicator("ep");
  TokenDispatcher disp(*ep, kE, Device::CPU);
  const Routing r = random_routing(8);
  const DispatchPlan p = disp.plan(r.experts.data(), r.kept.data(), kT, kK, kD, 0);
  const Tensor x32 = random_rows(kT, 9);
  Tensor x = Tensor::empty({kT, kD}, DType::BF16), x_back32 = Tensor::empty({kT, kD}, DType::F32);
  ops::cast(x32, x);
  ops::cast(x, x_back32);
  Tensor rows, rows32;
  disp.dispatch(p, x, rows);
  disp.dispatch(p, x_back32, rows32);
  ASSERT_EQ(rows.dtype(), DType::BF16);
  for (int64_t i = 0; i < rows.numel(); ++i)
    ASSERT_EQ(math::bf16_bits_to_float(rows.data<bf16_t>()[i].bits), rows32.data<float>()[i]);
}

}  // namespace
}  // namespace megatron::moe
