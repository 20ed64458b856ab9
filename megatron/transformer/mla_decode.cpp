// Multi-latent attention's KV-cached decoding: the cache keeps, per layer and position, the
// normalized latent c [Rkv] (KvCache::keys[l], [B, 1, capacity, Rkv]) and the rope key after
// rope k_r [Dr] (KvCache::values[l], [B, 1, capacity, Dr]), fp32 on the host, and the new
// positions attend with the key and value up-projections absorbed (DeepSeek-V2's inference
// form): per head h, with W_k,h [Dn, Rkv] and W_v,h [Dv, Rkv] the head's rows of kv_up,
//   score_j = scale (q_r . k_r,j + (W_k,h^T q_n) . c_j),   out_h = W_v,h sum_j p_j c_j.
// The math runs on the host in fp32 (decoding moves a few vectors per token).
#include <algorithm>
#include <cmath>

#include "megatron/backend/ops.h"
#include "megatron/transformer/attention.h"
#include "megatron/transformer/kv_cache.h"
#include "megatron/transformer/mla.h"

namespace megatron {

namespace {

Tensor host_f32(const Tensor& t) {
  Tensor f = Tensor::empty(t.shape(), DType::F32, t.device());
  ops::cast(t, f);
  return f.to(Device::CPU);
}

}  // namespace

Tensor& MultiLatentAttention::cached_forward(State& s, const Tensor& in, KvCache& cache) const {
  MT_CHECK(!sp_, "KV-cache decoding needs a model without sequence parallelism");
  const int64_t S = in.dim(0), B = in.dim(1);
  project(s, in, S, nullptr, false);
  pack(s, rows(S * B), false);  // the queries and the rope key, turned together below
  ops::rope_forward(shape(S, B, 0), s.qkv, rope_frequencies_of(spec_, cache.length + S),
                    cache.length);
  const size_t l = static_cast<size_t>(layer_);
  MT_CHECK(l < cache.keys.size(), "KV cache has ", cache.keys.size(), " layers, not ", l + 1);
  const Shape latents{B, 1, cache.capacity, d_.kv_lora_rank},
      keys{B, 1, cache.capacity, d_.qk_rope};
  if (!(cache.keys[l].shape() == latents) || cache.keys[l].device() != Device::CPU) {
    cache.keys[l] = Tensor::zeros(latents, DType::F32);
    cache.values[l] = Tensor::zeros(keys, DType::F32);
  }
  MT_CHECK(cache.length + S <= cache.capacity, "KV cache of ", cache.capacity,
           " positions cannot take ", cache.length + S);
  Tensor attn_v = Tensor::empty({S, B, heads_ * d_.v}, DType::F32);
  latent_attention(s, cache, attn_v);
  ops::cast(attn_v.to(device_), ensure(s.attn_v, {S, B, heads_ * d_.v}, act(), device_));
  proj_->forward(s.proj, s.attn_v, ensure(s.out, {S, B, spec_.hidden}, act(), device_));
  return s.out;
}

void MultiLatentAttention::latent_attention(const State& s, KvCache& cache, Tensor& attn_v) const {
  const int64_t S = s.qkv.dim(0), B = s.qkv.dim(1), H = heads_, L = cache.length;
  const int64_t Rkv = d_.kv_lora_rank, Dr = d_.qk_rope, Dn = d_.qk_nope, Dv = d_.v;
  const int64_t Dqk = Dn + Dr;
  const Tensor qkv = host_f32(s.qkv), c_n = host_f32(s.c_n);
  std::vector<Parameter*> w;
  kv_up_->collect_params(w);
  const Tensor wkv = host_f32(w.front()->weight);  // [H (Dn + Dv), Rkv], this rank's heads
  float* cache_c = cache.keys[size_t(layer_)].data<float>();
  float* cache_r = cache.values[size_t(layer_)].data<float>();
  const float scale = core_.scale();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* row = qkv.data<float>() + (t * B + b) * H * 3 * Dqk;
      std::copy_n(c_n.data<float>() + (t * B + b) * Rkv, Rkv,
                  cache_c + (b * cache.capacity + L + t) * Rkv);
      std::copy_n(row + Dqk, Dr, cache_r + (b * cache.capacity + L + t) * Dr);  // head 0's key
    }
  const int64_t window = spec_.window;
  std::vector<double> q_lat(static_cast<size_t>(Rkv)), o_lat(static_cast<size_t>(Rkv)), p;
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv.data<float>() + ((t * B + b) * H + h) * 3 * Dqk;  // [q_r | q_n]
        const float* wk = wkv.data<float>() + h * (Dn + Dv) * Rkv;
        std::fill(q_lat.begin(), q_lat.end(), 0.0);
        for (int64_t d = 0; d < Dn; ++d)
          for (int64_t r = 0; r < Rkv; ++r) q_lat[size_t(r)] += double(q[Dr + d]) * wk[d * Rkv + r];
        const int64_t pos = L + t, first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
        p.assign(size_t(pos - first + 1), 0.0);
        double top = -1e300, sum = 0;
        for (int64_t j = first; j <= pos; ++j) {
          const float* c = cache_c + (b * cache.capacity + j) * Rkv;
          const float* kr = cache_r + (b * cache.capacity + j) * Dr;
          double dot = 0;
          for (int64_t r = 0; r < Rkv; ++r) dot += q_lat[size_t(r)] * c[r];
          for (int64_t d = 0; d < Dr; ++d) dot += double(q[d]) * kr[d];
          top = std::max(top, p[size_t(j - first)] = dot * scale);
        }
        for (double& v : p) sum += (v = std::exp(v - top));
        std::fill(o_lat.begin(), o_lat.end(), 0.0);
        for (int64_t j = first; j <= pos; ++j) {
          const float* c = cache_c + (b * cache.capacity + j) * Rkv;
          for (int64_t r = 0; r < Rkv; ++r) o_lat[size_t(r)] += p[size_t(j - first)] / sum * c[r];
        }
        const float* wv = wk + Dn * Rkv;
        float* out = attn_v.data<float>() + ((t * B + b) * H + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t r = 0; r < Rkv; ++r) acc += double(wv[d * Rkv + r]) * o_lat[size_t(r)];
          out[d] = static_cast<float>(acc);
        }
      }
}

}  // namespace megatron
