#pragma once
// Model FLOPs per training step with Megatron-LM's formula (num_floating_point_operations in
// megatron/training/training.py), so TFLOP/s and MFU compare directly with Megatron's logs:
//   12 * B * S * L * h^2 * ( (1 + G/H + S/h) * q/h  +  (F/h) * gated  +  V / (2 L h) )
// with q = heads * head_dim, G query groups, F the FFN size, gated = 3/2 for SwiGLU, V the
// padded vocabulary. It counts forward + backward (3x forward) without recomputation and
// without halving causal attention.
#include <cstdint>

namespace megatron::training {

struct FlopsModel {
  int64_t num_layers, hidden, heads, query_groups, head_dim, ffn, seq_length, padded_vocab;
  bool swiglu = false;
  int64_t experts_per_token = 1;
};

double megatron_flops_per_step(const FlopsModel& m, int64_t global_batch_size);

// Peak fp32 FLOP/s of this CPU measured with an sgemm (OpenBLAS) on the current thread count.
double measure_cpu_peak_flops();

}  // namespace megatron::training
