#pragma once
// Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention), tensor-parallel over
// heads. Per token x [D]:
//   queries   q = W_qup RMSNorm(W_qdown x)   (q_lora_rank > 0; else q = W_q x)   [H, Dn + Dr]
//   latent    [c | k_r] = W_kvdown x,  c [Rkv], k_r [Dr] (the rope key, shared by all heads)
//   keys/values [k_n | v] = W_kvup RMSNorm(c)                                   [H, Dn + Dv]
//   head h:   q_h = [rope(q_r) | q_n],  k_h = [rope(k_r) | k_n],  attention of q_h, k_h, v_h
// The attention core (attention_core.h: unfused, flash or context parallel) runs on a packed qkv
// with one query group per head and head dimension Dn + Dr; the rope part comes first in each
// head (a consistent permutation of q and k leaves the scores alone), so the partial-rotary rope
// kernels turn it; values are zero-padded to Dn + Dr and the padding dropped from the output.
// The packing moves whole rows of a common width (ops::gather_rows / moe_combine), so it runs
// wherever those ops do. Weights: "<prefix>.attention.q_down" [Rq, D], ".q_down_norm" [Rq],
// ".q_up" [H (Dr + Dn), Rq] (or ".q" [H (Dr + Dn), D]), ".kv_down" [Rkv + Dr, D],
// ".kv_down_norm" [Rkv], ".kv_up" [H (Dn + Dv), Rkv], ".proj" [D, H Dv]. The down projections and
// their norms are replicated over tp; under sequence parallelism the query path runs on each
// rank's slice (its gradients tp partial sums) and the small latent [Rkv + Dr] is gathered along
// the sequence before the per-head up projection.
#include <map>
#include <memory>

#include "megatron/transformer/attention_core.h"
#include "megatron/transformer/submodules.h"

namespace megatron {

class MultiLatentAttention final : public AttentionLayer {
 public:
  struct State final : LayerState {
    Linear::Ctx q_down, q_up, kv_down, kv_up, proj;
    Norm::Ctx q_norm, kv_norm;
    Tensor cq, cq_n, q;             // [Sl, B, Rq], normed; queries [S, B, H Dqk]
    Tensor ckv, ckv_full, c, c_n;   // latent [Sl, B, Rkv + Dr], gathered [S, ...]; c, normed
    Tensor kv;                      // [S, B, H (Dn + Dv)]
    Tensor qkv, attn, attn_v, out;  // packed; core output [S, B, H Dqk]; [S, B, H Dv]; [Sl, B, D]
    Tensor scratch, d_attn_v, d_attn, d_qkv, d_q, d_kv, d_kr32, d_kr, d_c_n, d_c, d_ckv_full;
    Tensor d_cq_n, d_cq, d_x;
    AttentionCore::State core;
  };

  explicit MultiLatentAttention(const SubmoduleArgs& args,
                                std::shared_ptr<const ContextParallelAttention> cp = nullptr);
  ~MultiLatentAttention();

  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<State>(); }
  bool owns(const LayerState& s) const override { return typeid(s) == typeid(State); }
  Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb,
                  const uint8_t* key_mask) const override;
  void backward(LayerState& state, const Tensor& d_out, Tensor& d_in, const MicroBatchInfo& mb,
                const uint8_t* key_mask) const override;
  void collect_params(std::vector<Parameter*>& out) const override;

  // The row indices of the packing for T tokens (mla.cpp).
  struct Rows;

 private:
  const Rows& rows(int64_t T) const;
  // The queries, the latent and (expand_kv) the per-head keys and values of `in`.
  void project(State& s, const Tensor& in, int64_t S, const MicroBatchInfo* mb,
               bool expand_kv = true) const;
  // The packed qkv (with_kv false: the keys' rope part only, the rest zero).
  void pack(State& s, const Rows& r, bool with_kv = true) const;
  void project_backward(State& s, const Rows& r, Tensor& d_in, const MicroBatchInfo& mb) const;
  kernels::AttentionShape shape(int64_t S, int64_t B, int64_t batch_offset) const;
  // KV-cached decoding (mla_decode.cpp): the cache keeps the latents, not the keys and values.
  Tensor& cached_forward(State& s, const Tensor& in, KvCache& cache) const;
  // The absorbed attention of S new positions over the cached latents (host fp32).
  void latent_attention(const State& s, KvCache& cache, Tensor& attn_v) const;
  int64_t full_seq(int64_t local_seq) const { return sp_ ? local_seq * tp_->size() : local_seq; }
  DType act() const { return spec_.activation_dtype; }

  TransformerSpec spec_;
  TransformerSpec::Mla d_;  // its dimensions
  Device device_;
  int64_t layer_;
  parallel::Communicator* tp_;
  bool sp_;
  int64_t heads_;  // this rank's
  int64_t width_;  // the row width the packing moves
  std::unique_ptr<Linear> q_down_, q_up_, kv_down_, kv_up_, proj_;
  std::unique_ptr<Norm> q_norm_, kv_norm_;
  AttentionCore core_;
  mutable std::map<int64_t, std::unique_ptr<Rows>> rows_;  // by token count
};

}  // namespace megatron
