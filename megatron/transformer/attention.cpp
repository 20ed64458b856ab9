#include "megatron/transformer/attention.h"

#include <cmath>

#include "megatron/backend/ops.h"

namespace megatron {

math::RopeFrequencies rope_frequencies_of(const TransformerSpec& s, int64_t seq_len) {
  const int64_t rotary_dims = s.rope_rotary_dims > 0 ? s.rope_rotary_dims : s.head_dim();
  math::RopeFrequencies f(s.rope_theta);
  if (s.rope_dynamic_factor > 0.0f && seq_len > s.rope_dynamic_positions)
    f.theta = math::dynamic_ntk_theta(s.rope_theta, s.rope_dynamic_factor, seq_len,
                                      s.rope_dynamic_positions, rotary_dims);
  if (!s.longrope_short.empty())
    f.pair_factor = (seq_len > s.longrope_original ? s.longrope_long : s.longrope_short).data();
  f.factor = s.rope_scaling_factor;
  f.low_freq_factor = s.rope_low_freq_factor;
  f.high_freq_factor = s.rope_high_freq_factor;
  f.original_max_positions = s.rope_original_max_positions;
  f.linear_factor = s.rope_linear_factor;
  f.yarn_factor = s.rope_yarn_factor;
  f.yarn_low = s.rope_yarn_low;
  f.yarn_range = s.rope_yarn_range;
  f.attention_scale = s.rope_attention_scale;
  f.rotary_dims = s.rope_rotary_dims;
  return f;
}

SelfAttention::SelfAttention(const SubmoduleArgs& a,
                             std::shared_ptr<const ContextParallelAttention> cp)
    : spec_(a.spec),
      device_(a.store.device()),
      layer_(a.layer),
      tp_(&a.tp),
      sp_(a.spec.sequence_parallel && a.tp.size() > 1),
      local_heads_(a.spec.heads / a.tp.size()),
      local_groups_(a.spec.query_groups / a.tp.size()),
      core_(a, softmax_scale_of(a.spec, a.spec.head_dim()), std::move(cp)) {
  spec_.rope = a.spec.rope_in_layer(a.layer);       // a NoPE layer (model.no_rope_freq) has none
  const auto& full = a.spec.full_attention_layers;  // (model.window_attn_skip_freq)
  if (std::find(full.begin(), full.end(), a.layer) != full.end()) spec_.window = 0;
  if (spec_.window > 0 && spec_.rope_local_theta > 0) use_local_rope(spec_);
  const int64_t D = spec_.hidden, Dh = spec_.head_dim(), H = spec_.heads, G = spec_.query_groups;
  qkv_ =
      std::make_unique<Linear>(a.store, a.prefix + ".attention.qkv", D, G * (H / G + 2) * Dh,
                               spec_.bias || spec_.qkv_bias, TPMode::Column, a.tp, spec_.init_std,
                               Shape{}, sp_, spec_.lora_for(spec_.lora_qkv, a.layer, 0));
  proj_ = std::make_unique<Linear>(a.store, a.prefix + ".attention.proj", H * Dh, D, spec_.bias,
                                   TPMode::Row, a.tp, spec_.output_init_std(), Shape{}, sp_,
                                   spec_.lora_for(spec_.lora_proj, a.layer, 1));
  const auto span = spec_.qk_norm_whole_projection ? QkNorm::Span::Projection : QkNorm::Span::Head;
  if (spec_.qk_norm)
    qk_norm_ = std::make_unique<QkNorm>(a.store, a.prefix, span, H, G, Dh, spec_.norm_eps, a.tp,
                                        spec_.norm_zero_centered_gamma);
}

void SelfAttention::collect_params(std::vector<Parameter*>& out) const {
  qkv_->collect_params(out);
  core_.collect_params(out);
  if (qk_norm_) qk_norm_->collect_params(out);
  proj_->collect_params(out);
}

void SelfAttention::use_local_rope(TransformerSpec& s) {
  s.rope_theta = s.rope_local_theta;
  s.rope_linear_factor = 1.0f;
  s.rope_scaling_factor = 0.0f;
  s.rope_yarn_factor = 0.0f;
  s.rope_attention_scale = 1.0f;
  s.rope_dynamic_factor = 0.0f;
  s.longrope_short.clear();
  s.longrope_long.clear();
}

void SelfAttention::project_qkv(State& s, const Tensor& in, int64_t S,
                                const MicroBatchInfo* mb) const {
  const Shape shape{S, in.dim(1),
                    local_groups_ * (local_heads_ / local_groups_ + 2) * spec_.head_dim()};
  Tensor& out = ensure(s.qkv_out, shape, act(), device_);
  if (!qk_norm_) {
    qkv_->forward(s.qkv, in, out, mb);
    return;
  }
  qkv_->forward(s.qkv, in, ensure(s.qkv_raw, shape, act(), device_), mb);
  qk_norm_->forward(s.qk_norm, s.qkv_raw, out);
}

Tensor& SelfAttention::cached_forward(State& s, const Tensor& in, KvCache& cache) const {
  MT_CHECK(!sp_ && spec_.causal,
           "KV-cache decoding needs a causal model without sequence "
           "parallelism");
  const int64_t S = in.dim(0), B = in.dim(1), D = spec_.hidden, Dh = spec_.head_dim();
  const auto as = shape(S, B, 0);
  project_qkv(s, in, S, nullptr);
  if (spec_.rope)
    ops::rope_forward(as, s.qkv_out, rope_frequencies(cache.length + S), cache.length);
  const size_t l = static_cast<size_t>(layer_);
  MT_CHECK(l < cache.keys.size(), "KV cache has ", cache.keys.size(), " layers, not ", l + 1);
  const Shape cache_shape{B, local_groups_, cache.capacity, Dh};
  // On the layer's device in the activations' dtype (the CPU kernel takes fp32 only).
  const Tensor& held = cache.keys[l];
  if (!(held.shape() == cache_shape) || held.device() != device_ || held.dtype() != act()) {
    cache.keys[l] = Tensor::zeros(cache_shape, act(), device_);
    cache.values[l] = Tensor::zeros(cache_shape, act(), device_);
  }
  Tensor& out = ensure(s.attn_out, {S, B, local_heads_ * Dh}, act(), device_);
  ops::kv_cache_attention(as, core_.scale(), s.qkv_out, cache.keys[l], cache.values[l],
                          cache.length, out, spec_.window, spec_.attn_logit_softcap,
                          core_.sink_logits(s.core.sink_logits));
  proj_->forward(s.proj, s.attn_out, ensure(s.out, {S, B, D}, act(), device_));
  return s.out;
}

Tensor& SelfAttention::forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb,
                               const uint8_t* key_mask) const {
  State& s = static_cast<State&>(state);
  if (mb.kv_cache != nullptr) {
    MT_CHECK(mb.segment_ids == nullptr && mb.position_ids == nullptr,
             "KV-cache decoding takes one document per sequence (no packed position/segment ids)");
    return cached_forward(s, in, *mb.kv_cache);
  }
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden;
  const int64_t S = full_seq(Sl);
  const auto as = shape(S, B, mb.batch_offset);
  project_qkv(s, in, S, &mb);
  if (spec_.rope)
    ops::rope_forward(as, s.qkv_out, rope_frequencies(rope_span(S, mb)), 0, mb.position_ids);
  core_.forward(s.core, as, core_.options(mb, key_mask), mb, s.qkv_out,
                ensure(s.attn_out, {as.S, as.B, as.H * as.Dh}, act(), device_));
  proj_->forward(s.proj, s.attn_out, ensure(s.out, {Sl, B, D}, act(), device_), &mb);
  return s.out;
}

void SelfAttention::backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                             const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  State& s = static_cast<State&>(state);
  const int64_t S = full_seq(d_out.dim(0)), B = d_out.dim(1);
  const auto as = shape(S, B, mb.batch_offset);
  const auto ao = core_.options(mb, key_mask);
  // (Unfused under selective recompute: the probabilities again, with s.d_attn as scratch,
  // which the projection's backward then overwrites with the real gradient.)
  if (core_.recomputes())
    core_.recompute(s.core, as, ao, s.qkv_out,
                    ensure(s.d_attn, s.attn_out.shape(), act(), device_));
  proj_->backward(s.proj, d_out, &ensure(s.d_attn, s.attn_out.shape(), act(), device_), &mb);
  core_.backward(s.core, as, ao, mb, s.qkv_out, s.attn_out, s.d_attn,
                 ensure(s.d_qkv, s.qkv_out.shape(), act(), device_));
  if (spec_.rope)
    ops::rope_backward(as, s.d_qkv, rope_frequencies(rope_span(S, mb)), 0, mb.position_ids);
  if (qk_norm_) qk_norm_->backward(s.qk_norm, s.qkv_raw, s.d_qkv, s.d_qkv);
  qkv_->backward(s.qkv, s.d_qkv, &d_in, &mb, /*dy_is_state=*/true);
}

}  // namespace megatron
