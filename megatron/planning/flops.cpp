#include "megatron/planning/flops.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace megatron::planning {

FlopsModel flops_model_from_spec(const TransformerSpec& t, int64_t padded_vocab) {
  FlopsModel m{t.num_layers, t.hidden,     t.heads,      t.query_groups, t.head_dim(),
               t.ffn,        t.seq_length, padded_vocab, t.swiglu};
  m.mla = t.mla;
  return m;
}

namespace {

// Megatron's multi-latent attention FLOPs per token and layer (forward + backward).
double mla_flops_per_token_layer(const FlopsModel& m) {
  const auto& a = m.mla;
  const double h = static_cast<double>(m.hidden), H = static_cast<double>(m.heads);
  const double Dn = static_cast<double>(a.qk_nope), Dr = static_cast<double>(a.qk_rope),
               Dv = static_cast<double>(a.v), S = static_cast<double>(m.seq_length);
  const double q = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) * (h + H * (Dn + Dr) + 1)
                                     : h * H * (Dn + Dr);
  const double kv = static_cast<double>(a.kv_lora_rank) * (h + H * (Dn + Dv) + 1) + h * Dr;
  return 6.0 * (q + kv + H * Dv * h + S * H * (Dn + Dr) / 2 + S * H * Dv / 2);
}

}  // namespace

FlopsModel with_moe(FlopsModel m, const config::MoeConfig& moe) {
  if (!moe.enabled()) return m;
  m.moe_layers = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) m.moe_layers += moe.moe_layer_freq.is_moe(l) ? 1 : 0;
  m.moe_ffn = moe.expert_ffn(m.ffn);
  m.moe_topk = moe.moe_router_topk;
  m.shared_ffn = moe.moe_shared_expert_intermediate_size;
  return m;
}

double megatron_flops_per_step(const FlopsModel& m, int64_t global_batch_size) {
  const double h = static_cast<double>(m.hidden);
  const double q_ratio = static_cast<double>(m.heads * m.head_dim) / h;
  const double gated = m.swiglu ? 1.5 : 1.0;
  const double attention =
      (1.0 + static_cast<double>(m.query_groups) / static_cast<double>(m.heads) +
       static_cast<double>(m.seq_length) / h) *
      q_ratio;
  const double L = static_cast<double>(m.num_layers);
  const double moe_layers = static_cast<double>(m.moe_layers);
  const double active_ffn =
      (static_cast<double>(m.ffn) * (L - moe_layers) +
       static_cast<double>(m.moe_ffn * m.moe_topk + m.shared_ffn) * moe_layers) /
      L;
  const double mlp = active_ffn / h * gated;
  const double logits = static_cast<double>(m.padded_vocab) / (2.0 * m.num_layers * h);
  const double tokens_layers = static_cast<double>(global_batch_size) *
                               static_cast<double>(m.seq_length) *
                               static_cast<double>(m.num_layers);
  if (m.mla.enabled())
    return tokens_layers * (mla_flops_per_token_layer(m) + 12.0 * h * h * (mlp + logits));
  return 12.0 * tokens_layers * h * h * (attention + mlp + logits);
}

kernels::cpu::PeakFlops measure_cpu_peak(DType compute_dtype) {
  return compute_dtype == DType::BF16 ? kernels::cpu::measure_bf16_peak()
                                      : kernels::cpu::measure_fp32_peak();
}

double measure_cpu_gemm_flops(DType compute_dtype) {
  const int64_t n = 1024;
  const bool bf16 = compute_dtype == DType::BF16 && kernels::cpu::native_bf16_gemm();
  std::vector<float> a(bf16 ? 0 : n * n, 0.5f), b(bf16 ? 0 : n * n, 0.25f), c(n * n, 0.0f);
  std::vector<bf16_t> a16(bf16 ? n * n : 0, bf16_t{0x3f00}), b16(bf16 ? n * n : 0, bf16_t{0x3e80});
  kernels::cpu::Bf16Gemm g;
  g.M = g.N = g.K = g.lda = g.ldb = g.ldc = n;
  g.A = a16.data(), g.B = b16.data(), g.C = c.data();
  auto run = [&] {
    if (bf16)
      kernels::cpu::gemm_bf16(g);
    else
      kernels::cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  run();  // warm up threads, caches and (bf16) the kernel
  run();
  // Best of many short runs: a transient (another process, a clock ramp) lowers some of them,
  // never all.
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

}  // namespace megatron::planning
