#include "megatron/transformer/transformer_spec.h"

#include <cmath>

#include "megatron/core/error.h"

namespace megatron {

Recompute parse_recompute(std::string_view name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  MT_INPUT_CHECK(false, "recompute must be none, selective or full, got '", name, "'");
  return Recompute::None;
}

void TransformerSpec::validate(int64_t tp_size) const {
  MT_CHECK(num_layers > 0 && hidden > 0 && heads > 0 && ffn > 0 && seq_length > 0,
           "transformer sizes must be positive");
  MT_CHECK(kv_channels >= 0, "kv_channels ", kv_channels, " must be >= 0");
  // Only the default head dimension needs heads to divide hidden (as in Megatron-Core).
  MT_CHECK(kv_channels > 0 || hidden % heads == 0, "hidden size ", hidden,
           " not divisible by heads ", heads);
  MT_CHECK(query_groups > 0 && heads % query_groups == 0, "heads ", heads,
           " not divisible by query groups ", query_groups);
  MT_CHECK(query_groups % tp_size == 0, "query groups ", query_groups,
           " not divisible by tensor parallel size ", tp_size);
  MT_CHECK(!rope || head_dim() % 2 == 0, "rotary embeddings need an even head dim");
  MT_CHECK(window >= 0 && (window == 0 || causal), "sliding window ", window,
           " needs causal attention and must be >= 0");
  MT_CHECK(!sequence_parallel || seq_length % tp_size == 0, "sequence length ", seq_length,
           " not divisible by tensor parallel size ", tp_size, " (sequence parallelism)");
}

float TransformerSpec::output_init_std() const {
  return init_std / std::sqrt(2.0f * static_cast<float>(num_layers));
}

}  // namespace megatron
