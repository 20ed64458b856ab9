// mpirun-np: 2 4
// ZeRO++ (parallel.zero_quantized_weights / zero_quantized_gradients; distributed/quantized_comm.h)
// across data-parallel ranks: the int8 all-gather gives every rank every shard as the naive
// decoding of its blocks (bit for bit), the int8 reduce-scatter gives each rank the rank-ordered
// sum of the decoded chunks sent to it (a naive reference's, to float rounding); in training under optim_grads
// and optim_grads_params the bytes fall >= 3x (fp32) and the loss stays near ZeRO-3's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "equivalence_fixture.h"
#include "megatron/distributed/quantized_comm.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;
namespace dist = megatron::distributed;

float value(int rank, int64_t i) {
  return std::sin(0.07f * float(i) + 1.1f * float(rank)) * (i % 29 == 0 ? 8.0f : 1.0f);
}

std::vector<float> decoded(const std::vector<float>& x) {
  std::vector<uint8_t> m(size_t(dist::quantized_bytes(int64_t(x.size()))));
  dist::quantize_int8(x.data(), DType::F32, int64_t(x.size()), m.data());
  std::vector<float> out(x.size());
  dist::dequantize_int8(m.data(), int64_t(x.size()), DType::F32, out.data());
  return out;
}

TEST(ZeroPlusPlus, QuantizedGatherAndReduceScatterEqualTheNaiveReference) {
  const int w = world().size(), me = world().rank();
  const int64_t n = 3 * dist::kQuantBlock + 11;
  // Gather: rank r's shard is value(r, .).
  std::vector<float> shard(n);
  for (int64_t i = 0; i < n; ++i) shard[size_t(i)] = value(me, i);
  Tensor out = Tensor::empty({w * n}, DType::F32);
  dist::QuantizedGather g =
      dist::start_quantized_gather(world(), Tensor::wrap(shard.data(), {n}, DType::F32));
  dist::finish_quantized_gather(g, out);
  for (int r = 0; r < w; ++r) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(r, i);
    const std::vector<float> want = decoded(x);
    ASSERT_EQ(std::memcmp(out.data<float>() + r * n, want.data(), size_t(n) * 4), 0)
        << "shard of rank " << r;
  }
  // Reduce-scatter: rank r's full vector is value(r + 10 * chunk, .) chunk by chunk.
  std::vector<float> full(size_t(w * n));
  for (int c = 0; c < w; ++c)
    for (int64_t i = 0; i < n; ++i) full[size_t(c * n + i)] = value(me + 10 * c, i);
  Tensor mine = Tensor::empty({n}, DType::F32);
  dist::QuantizedReduceScatter rs = dist::start_quantized_reduce_scatter(
      world(), Tensor::wrap(full.data(), {w * n}, DType::F32), 3);
  dist::finish_quantized_reduce_scatter(rs, world(), mine);
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < w; ++r) {
    std::vector<float> chunk(n);
    for (int64_t i = 0; i < n; ++i) chunk[size_t(i)] = value(r + 10 * me, i);
    const std::vector<float> d = decoded(chunk);
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] += d[size_t(i)];
  }
  // (The sum may fuse multiply and add: within float rounding of the naive one.)
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(mine.data<float>()[i], want[size_t(i)], 1e-6f * (1 + std::fabs(want[size_t(i)])))
        << i;
}

eq::RecipeSpec model(const std::string& sharding, const std::string& extra) {
  eq::RecipeSpec s{.arch = "llama", .layers = 2, .groups = 2, .ffn = 48};
  s.hidden = 64;
  s.micro = 1;
  s.global = 8;
  s.iters = 12;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.sharding = sharding;
  s.parallel_extra = extra;
  return s;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 17, 3, 1});
}

TEST(ZeroPlusPlus, QuantizedShardedTrainingSendsLessAndFollowsZero3) {
  struct Case {
    std::string sharding, extra;
    double min_reduction;
  };
  const Case cases[] = {
      {"optim_grads_params", "zero_quantized_weights: true, zero_quantized_gradients: true", 3.0},
      {"optim_grads_params", "zero_quantized_weights: true", 1.4},
      {"optim_grads", "zero_quantized_gradients: true", 1.5},
  };
  for (const Case& c : cases) {
    const auto plain =
        eq::train_on_world(eq::make_recipe(model(c.sharding, "")), tokens(), nullptr);
    const auto quant =
        eq::train_on_world(eq::make_recipe(model(c.sharding, c.extra)), tokens(), nullptr);
    const std::string what = c.sharding + " " + c.extra;
    ASSERT_EQ(plain.steps.size(), quant.steps.size()) << what;
    for (size_t i = 0; i < plain.steps.size(); ++i) {
      EXPECT_GT(double(plain.steps[i].dp_comm_bytes),
                c.min_reduction * double(quant.steps[i].dp_comm_bytes))
          << what << " step " << i + 1;
      EXPECT_NEAR(quant.steps[i].loss, plain.steps[i].loss, 0.02 * plain.steps[i].loss)
          << what << " step " << i + 1;
    }
    EXPECT_LT(quant.steps.back().loss, quant.steps.front().loss) << what << " learns";
  }
}

}  // namespace
}  // namespace megatron
