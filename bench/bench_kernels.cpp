// Micro-benchmarks of the CPU kernels at GPT-2 small shapes (hidden 768, 12 heads, vocab 50304).
// Threads follow OMP_NUM_THREADS (OpenBLAS is the OpenMP build and shares the pool), e.g.
//   OMP_NUM_THREADS=1 build/bin/bench_kernels --benchmark_filter=Gemm
// Counters: GFLOP/s (gemm, attention) and GB/s of memory traffic (memory-bound kernels), per
// wall-clock second (UseRealTime: the kernels run on several threads).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"

namespace {

namespace cpu = megatron::kernels::cpu;

std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rate counters: the value is per iteration, reported per second.
benchmark::Counter gflops(double flops_per_iter) {
  return benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
benchmark::Counter gbytes(double bytes_per_iter) {
  return benchmark::Counter(bytes_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: M, N, K, trans_a, trans_b. The linear layers of a GPT-2 small block over 2048 tokens.
void BM_Gemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const auto A = random_vector(M * K, 1), B = random_vector(K * N, 2);
  std::vector<float> C(M * N);
  for (auto _ : state) {
    cpu::gemm(ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] = gflops(2.0 * M * N * K);
}
BENCHMARK(BM_Gemm)
    ->ArgNames({"M", "N", "K", "ta", "tb"})
    ->Args({2048, 2304, 768, 0, 1})  // fused QKV projection
    ->Args({2048, 3072, 768, 0, 1})  // MLP up
    ->Args({2048, 768, 3072, 0, 1})  // MLP down
    ->Args({2048, 768, 3072, 0, 0})  // dX = dY W
    ->Args({3072, 768, 2048, 1, 0})  // dW += dY^T X
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = 2048, D = 768;
  const bool backward = state.range(0) != 0;
  const auto x = random_vector(rows * D, 1), w = random_vector(D, 2), b = random_vector(D, 3);
  const auto dy = random_vector(rows * D, 4);
  std::vector<float> y(rows * D), mean(rows), rstd(rows), dx(rows * D), dw(D), db(D);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, D,
                         1e-5f);
  for (auto _ : state) {
    if (backward) {
      cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                              dw.data(), db.data(), rows, D);
    } else {
      cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows,
                             D, 1e-5f);
    }
    benchmark::ClobberMemory();
  }
  // forward reads x, writes y; backward reads x and dy twice (dx pass, param pass), writes dx
  state.counters["GB/s"] = gbytes((backward ? 5.0 : 2.0) * rows * D * sizeof(float));
}
BENCHMARK(BM_LayerNorm)
    ->ArgNames({"backward"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  const int64_t n = 2048 * 3072;
  const bool backward = state.range(0) != 0;
  const auto x = random_vector(n, 1, -4.0f, 4.0f), dy = random_vector(n, 2);
  std::vector<float> y(n);
  for (auto _ : state) {
    if (backward) {
      cpu::gelu_backward(x.data(), dy.data(), y.data(), n);
    } else {
      cpu::gelu_forward(x.data(), y.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbytes((backward ? 3.0 : 2.0) * n * sizeof(float));
}
BENCHMARK(BM_Gelu)
    ->ArgNames({"backward"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: causal, dropout percentage, backward included. S=256, B=8, H=12, Dh=64.
// GFLOP/s counts the dense S x S work (4 S^2 Dh per head forward, 8 backward) also when causal,
// so causal numbers show the effective rate including the skipped upper triangle.
void BM_Attention(benchmark::State& state) {
  const megatron::kernels::AttentionShape shape{256, 8, 12, 12, 64};
  const bool causal = state.range(0) != 0, backward = state.range(2) != 0;
  megatron::kernels::AttentionOptions opt{};
  opt.scale = 1.0f / std::sqrt(float(shape.Dh));
  opt.causal = causal;
  opt.dropout_p = float(state.range(1)) / 100.0f;
  opt.seed = 1;
  const int64_t tokens = shape.S * shape.B;
  const auto qkv = random_vector(tokens * (shape.H + 2 * shape.G) * shape.Dh, 1);
  const auto dout = random_vector(tokens * shape.H * shape.Dh, 2);
  std::vector<float> out(tokens * shape.H * shape.Dh), dqkv(qkv.size());
  std::vector<float> probs(shape.B * shape.H * shape.S * shape.S);
  for (auto _ : state) {
    cpu::attention_forward(shape, opt, qkv.data(), out.data(), probs.data());
    if (backward)
      cpu::attention_backward(shape, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
    benchmark::ClobberMemory();
  }
  const double per_head = double(shape.S) * shape.S * shape.Dh;
  state.counters["GFLOP/s"] =
      gflops((backward ? 12.0 : 4.0) * per_head * double(shape.B) * double(shape.H));
}
BENCHMARK(BM_Attention)
    ->ArgNames({"causal", "dropout%", "bwd"})
    ->Args({1, 0, 0})
    ->Args({1, 0, 1})
    ->Args({0, 0, 1})
    ->Args({1, 10, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Flash (kernels/cpu/flash_attention.h) vs unfused attention, forward + backward, causal.
// Args: flash, S. B=2, H=8, Dh=64.
void BM_AttentionFlashVsUnfused(benchmark::State& state) {
  const bool flash = state.range(0) != 0;
  const megatron::kernels::AttentionShape shape{state.range(1), 2, 8, 8, 64};
  megatron::kernels::AttentionOptions opt{};
  opt.scale = 1.0f / std::sqrt(float(shape.Dh));
  opt.causal = true;
  const int64_t tokens = shape.S * shape.B;
  const auto qkv = random_vector(tokens * (shape.H + 2 * shape.G) * shape.Dh, 1);
  const auto dout = random_vector(tokens * shape.H * shape.Dh, 2);
  std::vector<float> out(tokens * shape.H * shape.Dh), dqkv(qkv.size());
  std::vector<float> saved(flash ? shape.B * shape.H * shape.S
                                 : shape.B * shape.H * shape.S * shape.S);
  for (auto _ : state) {
    if (flash) {
      cpu::flash_attention_forward(shape, opt, qkv.data(), out.data(), saved.data());
      cpu::flash_attention_backward(shape, opt, qkv.data(), out.data(), saved.data(), dout.data(),
                                    dqkv.data());
    } else {
      cpu::attention_forward(shape, opt, qkv.data(), out.data(), saved.data());
      cpu::attention_backward(shape, opt, qkv.data(), saved.data(), dout.data(), dqkv.data());
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_AttentionFlashVsUnfused)
    ->ArgNames({"flash", "S"})
    ->Args({0, 256})
    ->Args({1, 256})
    ->Args({0, 1024})
    ->Args({1, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: backward. N = 2048 tokens, V = 50304 (GPT-2's padded vocabulary, 50257 real).
void BM_CrossEntropy(benchmark::State& state) {
  const int64_t N = 2048, V = 50304;
  const bool backward = state.range(0) != 0;
  const megatron::kernels::VocabSlice vs{V, 0, 50257};
  const auto logits = random_vector(N * V, 1, -5.0f, 5.0f);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = int32_t((n * 7919) % 50257);
  std::vector<float> loss(N), lse(N), dloss(N, 1.0f / N), dlogits(backward ? N * V : 0);
  cpu::cross_entropy_forward(logits.data(), targets.data(), N, vs, -100, loss.data(), lse.data());
  for (auto _ : state) {
    if (backward) {
      cpu::cross_entropy_backward(logits.data(), targets.data(), N, vs, -100, lse.data(),
                                  dloss.data(), dlogits.data());
    } else {
      cpu::cross_entropy_forward(logits.data(), targets.data(), N, vs, -100, loss.data(),
                                 lse.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbytes((backward ? 2.0 : 1.0) * N * V * sizeof(float));
}
BENCHMARK(BM_CrossEntropy)
    ->ArgNames({"backward"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// 16M parameters: reads param, grad, m, v and writes param, m, v (28 bytes per element).
void BM_AdamW(benchmark::State& state) {
  const int64_t n = 1 << 24;
  auto param = random_vector(n, 1), m = std::vector<float>(n, 0.0f), v = m;
  const auto grad = random_vector(n, 2);
  const megatron::math::AdamWParams p{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f};
  for (auto _ : state) {
    cpu::adamw_step(param.data(), grad.data(), m.data(), v.data(), n, p);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbytes(28.0 * n);
}
BENCHMARK(BM_AdamW)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
