#include "megatron/planning/activation_memory.h"

#include "kernels/cpu/gemm.h"

namespace megatron::planning::detail {

double cpu_widening_workspace(const Dims& d, config::Precision precision, int64_t V, double t,
                              double tokens, bool last_stage) {
  const double qkv = static_cast<double>((d.H + 2 * d.G) * d.Dh) / t;
  const double attn = static_cast<double>(d.H * d.Dh) / t;
  double most = tokens * 2 * (qkv + attn);
  const bool native = precision == config::Precision::BF16 && kernels::cpu::native_bf16_gemm();
  if (!native) {
    const auto rows = static_cast<int64_t>(tokens);
    auto linear = [&](double in, double out) {
      const auto b = kernels::cpu::widened_gemm_block_rows(rows, static_cast<int64_t>(in),
                                                           static_cast<int64_t>(out));
      return in * out + static_cast<double>(b) * (in + out);
    };
    const double D = static_cast<double>(d.D);
    most = std::max(most, linear(D, static_cast<double>(d.fc1) / t));
    most = std::max(most, linear(static_cast<double>(d.F) / t, D));
    most = std::max(most, linear(D, qkv));
    if (last_stage) most = std::max(most, linear(D, static_cast<double>(V) / t));
  }
  if (precision == config::Precision::FP16 && last_stage)
    most = std::max(most, tokens * static_cast<double>(V) / t);
  return 4 * most;
}

}  // namespace megatron::planning::detail
