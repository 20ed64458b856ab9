#include "megatron/transformer/attention_core.h"

#include "megatron/backend/ops.h"

namespace megatron {

AttentionCore::AttentionCore(const SubmoduleArgs& a, float scale,
                             std::shared_ptr<const ContextParallelAttention> cp)
    : spec_(a.spec),
      device_(a.store.device()),
      layer_(a.layer),
      scale_(scale),
      flash_(a.spec.flash_attention),
      shared_probs_(a.spec.recompute == Recompute::Selective && !cp ? a.shared_probs : nullptr),
      cp_(std::move(cp)) {
  MT_CHECK(a.spec.recompute != Recompute::Selective || shared_probs_ || cp_,
           "selective recompute needs the shared probabilities buffer");
  const auto& full = a.spec.full_attention_layers;  // (model.window_attn_skip_freq)
  if (std::find(full.begin(), full.end(), a.layer) != full.end()) spec_.window = 0;
  if (a.spec.attention_sinks != TransformerSpec::Sinks::None) {
    // (Ulysses' all-to-all keeps no row lse of this rank's heads; ring and all-gather do.)
    MT_CHECK(flash_ && (!cp_ || cp_->comm() != ContextParallelComm::AllToAll),
             "attention sinks wrap the flash kernels or ring / all-gather context parallelism");
    sinks_ = std::make_unique<AttentionSinks>(
        a.store, a.prefix, a.spec.heads, a.spec.attention_sinks == TransformerSpec::Sinks::Learned,
        a.spec.init_std, a.tp);
  }
}

void AttentionCore::collect_params(std::vector<Parameter*>& out) const {
  if (sinks_) sinks_->collect_params(out);
}

kernels::AttentionShape AttentionCore::shape(int64_t S, int64_t B, int64_t batch_offset, int64_t H,
                                             int64_t G, int64_t Dh, int64_t head_offset,
                                             int64_t total_heads) const {
  kernels::AttentionShape s;
  s.S = S;
  s.B = B;
  s.H = H;
  s.G = G;
  s.Dh = Dh;
  s.head_offset = head_offset;
  s.total_heads = total_heads;
  s.batch_offset = batch_offset;
  return s;
}

kernels::AttentionOptions AttentionCore::options(const MicroBatchInfo& mb,
                                                 const uint8_t* key_mask) const {
  kernels::AttentionOptions o;
  o.scale = scale_;
  o.causal = spec_.causal;
  o.window = spec_.window;
  o.key_mask = key_mask;
  o.segment_ids = mb.segment_ids != nullptr ? mb.segment_ids->data<int32_t>() : nullptr;
  o.dropout_p = mb.training ? spec_.attention_dropout : 0.0f;
  o.softcap = spec_.attn_logit_softcap;
  o.cudnn = spec_.cudnn_attention;
  o.seed = spec_.seed;
  o.stream = DropoutSite{spec_.seed, mb.iteration, layer_, 0}.stream();
  return o;
}

void AttentionCore::forward(State& s, const kernels::AttentionShape& as,
                            const kernels::AttentionOptions& ao, const MicroBatchInfo& mb,
                            const Tensor& qkv, Tensor& out) const {
  if (cp_) {
    cp_->forward(s.cp, as, ao, mb, qkv, out);
    if (sinks_) sinks_->forward(as, s.cp.lse, s.sink_logits, out);  // the merged rows' lse
    return;
  }
  if (flash_) {
    ops::flash_attention_forward(as, ao, qkv, out,
                                 ensure(s.lse, {as.B, as.H, as.S}, DType::F32, device_));
    if (sinks_) sinks_->forward(as, s.lse, s.sink_logits, out);
  } else {
    ops::attention_forward(as, ao, qkv, out,
                           ensure(probs_of(s), {as.B, as.H, as.S, as.S}, DType::F32, device_));
  }
}

void AttentionCore::recompute(State& s, const kernels::AttentionShape& as,
                              const kernels::AttentionOptions& ao, const Tensor& qkv,
                              Tensor& scratch) const {
  // Same qkv (after rope), options and dropout stream as the forward: the same values.
  ops::attention_forward(as, ao, qkv, scratch,
                         ensure(probs_of(s), {as.B, as.H, as.S, as.S}, DType::F32, device_));
}

void AttentionCore::backward(State& s, const kernels::AttentionShape& as,
                             const kernels::AttentionOptions& ao, const MicroBatchInfo& mb,
                             const Tensor& qkv, const Tensor& out, const Tensor& d_out,
                             Tensor& d_qkv) const {
  if (sinks_) {  // the backward of the scaled output with the scaled gradient
    Tensor& d_sinked = ensure(s.d_sinked, d_out.shape(), d_out.dtype(), device_);
    sinks_->backward(as, cp_ ? s.cp.lse : s.lse, out, d_out, s.sink_logits, d_sinked);
    if (cp_)
      cp_->backward(s.cp, as, ao, mb, qkv, out, d_sinked, d_qkv);
    else
      ops::flash_attention_backward(as, ao, qkv, out, s.lse, d_sinked, d_qkv);
    return;
  }
  if (cp_) {
    cp_->backward(s.cp, as, ao, mb, qkv, out, d_out, d_qkv);
    return;
  }
  if (flash_) {
    ops::flash_attention_backward(as, ao, qkv, out, s.lse, d_out, d_qkv);
    return;
  }
  ops::attention_backward(as, ao, qkv, probs_of(s), d_out, d_qkv);
}

}  // namespace megatron
