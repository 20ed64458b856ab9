#include "megatron/transformer/mla.h"

#include <numeric>

#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/attention.h"

namespace megatron {

// Row indices (int32, on the layer's device) of the copies between the projections and the
// packed qkv, in rows of width w, for T tokens of H local heads. -1: no source (another copy
// fills the row, or it is padding).
struct MultiLatentAttention::Rows {
  Tensor q_in, kv_in, kr_in;     // qkv rows <- q / kv / latent rows
  Tensor q_out, kv_out;          // q / kv rows <- qkv rows (their gradients)
  Tensor kr_sum;                 // [T Dr/w, H]: the qkv rows of each rope-key row, one per head
  Tensor v_out, v_pad;           // attention rows without the value padding, and back
  Tensor c_in, c_back, kr_back;  // c rows <- latent rows; latent rows <- c / rope-key rows
};

namespace {

// Row counts per head (q: Dqk / w, ...) and the row numbering of each tensor.
struct RowLayout {
  int64_t T, H, nq, nk, nr, nv, nc;
  RowLayout(int64_t T_, int64_t H_, const TransformerSpec::Mla& d, int64_t w)
      : T(T_),
        H(H_),
        nq((d.qk_nope + d.qk_rope) / w),
        nk(d.qk_nope / w),
        nr(d.qk_rope / w),
        nv(d.v / w),
        nc(d.kv_lora_rank / w) {}
  int32_t qkv(int64_t t, int64_t h, int64_t slot, int64_t j) const {
    return static_cast<int32_t>(((t * H + h) * 3 + slot) * nq + j);
  }
  int32_t q(int64_t t, int64_t h, int64_t j) const {
    return static_cast<int32_t>((t * H + h) * nq + j);
  }
  int32_t kv(int64_t t, int64_t h, int64_t j) const {
    return static_cast<int32_t>((t * H + h) * (nk + nv) + j);
  }
  int32_t latent(int64_t t, int64_t j) const { return static_cast<int32_t>(t * (nc + nr) + j); }
  int32_t attn_v(int64_t t, int64_t h, int64_t j) const {
    return static_cast<int32_t>((t * H + h) * nv + j);
  }
};

class IndexBuilder {
 public:
  IndexBuilder(int64_t n, Device device) : host_(Tensor::empty({n}, DType::I32)), device_(device) {
    std::fill(data(), data() + n, -1);
  }
  int32_t* data() { return host_.data<int32_t>(); }
  Tensor done() { return host_.to(device_); }

 private:
  Tensor host_;
  Device device_;
};

void build_qkv_rows(const RowLayout& L, Device dev, MultiLatentAttention::Rows& r) {
  const int64_t qkv_rows = L.T * L.H * 3 * L.nq;
  IndexBuilder q_in(qkv_rows, dev), kv_in(qkv_rows, dev), kr_in(qkv_rows, dev);
  IndexBuilder q_out(L.T * L.H * L.nq, dev), kv_out(L.T * L.H * (L.nk + L.nv), dev);
  IndexBuilder kr_sum(L.T * L.nr * L.H, dev);
  for (int64_t t = 0; t < L.T; ++t)
    for (int64_t h = 0; h < L.H; ++h) {
      for (int64_t j = 0; j < L.nq; ++j) {
        q_in.data()[L.qkv(t, h, 0, j)] = L.q(t, h, j);
        q_out.data()[L.q(t, h, j)] = L.qkv(t, h, 0, j);
      }
      for (int64_t j = 0; j < L.nr; ++j) {  // the rope key leads each key head
        kr_in.data()[L.qkv(t, h, 1, j)] = L.latent(t, L.nc + j);
        kr_sum.data()[(t * L.nr + j) * L.H + h] = L.qkv(t, h, 1, j);
      }
      for (int64_t j = 0; j < L.nk; ++j) {
        kv_in.data()[L.qkv(t, h, 1, L.nr + j)] = L.kv(t, h, j);
        kv_out.data()[L.kv(t, h, j)] = L.qkv(t, h, 1, L.nr + j);
      }
      for (int64_t j = 0; j < L.nv; ++j) {
        kv_in.data()[L.qkv(t, h, 2, j)] = L.kv(t, h, L.nk + j);
        kv_out.data()[L.kv(t, h, L.nk + j)] = L.qkv(t, h, 2, j);
      }
    }
  r.q_in = q_in.done(), r.kv_in = kv_in.done(), r.kr_in = kr_in.done();
  r.q_out = q_out.done(), r.kv_out = kv_out.done(), r.kr_sum = kr_sum.done();
}

void build_output_and_latent_rows(const RowLayout& L, Device dev, MultiLatentAttention::Rows& r) {
  IndexBuilder v_out(L.T * L.H * L.nv, dev), v_pad(L.T * L.H * L.nq, dev);
  IndexBuilder c_in(L.T * L.nc, dev), c_back(L.T * (L.nc + L.nr), dev);
  IndexBuilder kr_back(L.T * (L.nc + L.nr), dev);
  for (int64_t t = 0; t < L.T; ++t) {
    for (int64_t h = 0; h < L.H; ++h)
      for (int64_t j = 0; j < L.nv; ++j) {  // the core's output rows are laid out as q's
        v_out.data()[L.attn_v(t, h, j)] = L.q(t, h, j);
        v_pad.data()[L.q(t, h, j)] = L.attn_v(t, h, j);
      }
    for (int64_t j = 0; j < L.nc; ++j) {
      c_in.data()[t * L.nc + j] = L.latent(t, j);
      c_back.data()[L.latent(t, j)] = static_cast<int32_t>(t * L.nc + j);
    }
    for (int64_t j = 0; j < L.nr; ++j)
      kr_back.data()[L.latent(t, L.nc + j)] = static_cast<int32_t>(t * L.nr + j);
  }
  r.v_out = v_out.done(), r.v_pad = v_pad.done();
  r.c_in = c_in.done(), r.c_back = c_back.done(), r.kr_back = kr_back.done();
}

// `t` as rows of width w.
Tensor rows_of(const Tensor& t, int64_t w) { return t.view({t.numel() / w, w}); }

// out's rows from src's rows by index (rows of width w; ops::gather_rows).
void gather(const Tensor& src, const Tensor& index, const Tensor& out, int64_t w) {
  Tensor o = rows_of(out, w);
  ops::gather_rows(rows_of(src, w), index, o);
}

// Marks a replicated weight's gradient as a tensor-parallel partial sum (sequence parallelism).
void partial_over_tp(const Linear* l, const Norm* n) {
  std::vector<Parameter*> ps;
  if (l) l->collect_params(ps);
  if (n) n->collect_params(ps);
  for (Parameter* p : ps) p->tp_partial_grad = true;
}

}  // namespace

MultiLatentAttention::MultiLatentAttention(const SubmoduleArgs& a,
                                           std::shared_ptr<const ContextParallelAttention> cp)
    : spec_(a.spec),
      d_(a.spec.mla),
      device_(a.store.device()),
      layer_(a.layer),
      tp_(&a.tp),
      sp_(a.spec.sequence_parallel && a.tp.size() > 1),
      heads_(a.spec.heads / a.tp.size()),
      width_(std::gcd(std::gcd(d_.kv_lora_rank, d_.qk_nope), std::gcd(d_.qk_rope, d_.v))),
      core_(a, softmax_scale_of(a.spec, d_.qk_nope + d_.qk_rope), std::move(cp)) {
  MT_CHECK(d_.enabled() && d_.v <= d_.qk_nope + d_.qk_rope, "multi-latent attention dims");
  const int64_t D = spec_.hidden, H = spec_.heads, Dqk = d_.qk_nope + d_.qk_rope;
  const std::string p = a.prefix + ".attention.";
  const float std = spec_.init_std;
  auto norm = [&](const char* name, int64_t dim, bool seq_slices) {
    return std::make_unique<Norm>(a.store, p + name, dim, Norm::Kind::RMSNorm, spec_.norm_eps,
                                  seq_slices);
  };
  if (d_.q_lora_rank > 0) {
    q_down_ = std::make_unique<Linear>(a.store, p + "q_down", D, d_.q_lora_rank, false,
                                       TPMode::None, a.tp, std);
    q_norm_ = norm("q_down_norm", d_.q_lora_rank, sp_);
    if (sp_) partial_over_tp(q_down_.get(), nullptr);
    q_up_ = std::make_unique<Linear>(a.store, p + "q_up", d_.q_lora_rank, H * Dqk, false,
                                     TPMode::Column, a.tp, std, Shape{}, sp_);
  } else {
    q_up_ = std::make_unique<Linear>(a.store, p + "q", D, H * Dqk, false, TPMode::Column, a.tp, std,
                                     Shape{}, sp_);
  }
  kv_down_ = std::make_unique<Linear>(a.store, p + "kv_down", D, d_.kv_lora_rank + d_.qk_rope,
                                      false, TPMode::None, a.tp, std);
  if (sp_) partial_over_tp(kv_down_.get(), nullptr);
  // (the latent is gathered along the sequence first: its norm sees every token on every rank)
  kv_norm_ = norm("kv_down_norm", d_.kv_lora_rank, false);
  kv_up_ = std::make_unique<Linear>(a.store, p + "kv_up", d_.kv_lora_rank, H * (d_.qk_nope + d_.v),
                                    false, TPMode::Column, a.tp, std);
  proj_ = std::make_unique<Linear>(a.store, p + "proj", H * d_.v, D, false, TPMode::Row, a.tp,
                                   spec_.output_init_std(), Shape{}, sp_);
}

MultiLatentAttention::~MultiLatentAttention() = default;

void MultiLatentAttention::collect_params(std::vector<Parameter*>& out) const {
  if (q_down_) q_down_->collect_params(out);
  if (q_norm_) q_norm_->collect_params(out);
  q_up_->collect_params(out);
  kv_down_->collect_params(out);
  kv_norm_->collect_params(out);
  kv_up_->collect_params(out);
  core_.collect_params(out);
  proj_->collect_params(out);
}

const MultiLatentAttention::Rows& MultiLatentAttention::rows(int64_t T) const {
  auto& slot = rows_[T];
  if (!slot) {
    slot = std::make_unique<Rows>();
    const RowLayout L(T, heads_, d_, width_);
    build_qkv_rows(L, device_, *slot);
    build_output_and_latent_rows(L, device_, *slot);
  }
  return *slot;
}

kernels::AttentionShape MultiLatentAttention::shape(int64_t S, int64_t B,
                                                    int64_t batch_offset) const {
  return core_.shape(S, B, batch_offset, heads_, heads_, d_.qk_nope + d_.qk_rope,
                     heads_ * tp_->rank(), spec_.heads);
}

void MultiLatentAttention::project(State& s, const Tensor& in, int64_t S, const MicroBatchInfo* mb,
                                   bool expand_kv) const {
  const int64_t Sl = in.dim(0), B = in.dim(1), H = heads_, Dqk = d_.qk_nope + d_.qk_rope;
  const int64_t latent = d_.kv_lora_rank + d_.qk_rope;
  Tensor& q = ensure(s.q, {S, B, H * Dqk}, act(), device_);
  if (q_down_) {
    q_down_->forward(s.q_down, in, ensure(s.cq, {Sl, B, d_.q_lora_rank}, act(), device_));
    q_norm_->forward(s.q_norm, s.cq, ensure(s.cq_n, s.cq.shape(), act(), device_));
    q_up_->forward(s.q_up, s.cq_n, q, mb);
  } else {
    q_up_->forward(s.q_up, in, q, mb);
  }
  kv_down_->forward(s.kv_down, in, ensure(s.ckv, {Sl, B, latent}, act(), device_));
  s.ckv_full = s.ckv;
  if (sp_)
    tensor_parallel::gather_from_sequence_forward(
        *tp_, s.ckv, ensure(s.ckv_full, {S, B, latent}, act(), device_));
  gather(s.ckv_full, rows(S * B).c_in, ensure(s.c, {S, B, d_.kv_lora_rank}, act(), device_),
         width_);
  kv_norm_->forward(s.kv_norm, s.c, ensure(s.c_n, s.c.shape(), act(), device_));
  if (expand_kv)
    kv_up_->forward(s.kv_up, s.c_n, ensure(s.kv, {S, B, H * (d_.qk_nope + d_.v)}, act(), device_),
                    mb);
}

void MultiLatentAttention::pack(State& s, const Rows& r, bool with_kv) const {
  const int64_t w = width_;
  Tensor& qkv = ensure(s.qkv, {s.q.dim(0), s.q.dim(1), heads_ * 3 * (d_.qk_nope + d_.qk_rope)},
                       act(), device_);
  Tensor& tmp = ensure(s.scratch, qkv.shape(), act(), device_);
  // Disjoint rows from three sources (zero rows elsewhere): their sum is the packing, exactly.
  gather(s.q, r.q_in, qkv, w);
  if (with_kv) {
    gather(s.kv, r.kv_in, tmp, w);
    ops::add_inplace(qkv, tmp);
  }
  gather(s.ckv_full, r.kr_in, tmp, w);
  ops::add_inplace(qkv, tmp);
}

Tensor& MultiLatentAttention::forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb,
                                      const uint8_t* key_mask) const {
  State& s = static_cast<State&>(state);
  if (mb.kv_cache != nullptr) {
    MT_CHECK(mb.segment_ids == nullptr && mb.position_ids == nullptr,
             "KV-cache decoding takes one document per sequence (no packed position/segment ids)");
    return cached_forward(s, in, *mb.kv_cache);
  }
  const int64_t Sl = in.dim(0), B = in.dim(1), S = full_seq(Sl);
  const Rows& r = rows(S * B);
  project(s, in, S, &mb);
  pack(s, r);
  const auto as = shape(S, B, mb.batch_offset);
  ops::rope_forward(as, s.qkv, rope_frequencies_of(spec_, rope_span(S, mb)), 0, mb.position_ids);
  core_.forward(s.core, as, core_.options(mb, key_mask), mb, s.qkv,
                ensure(s.attn, {S, B, as.H * as.Dh}, act(), device_));
  gather(s.attn, r.v_out, ensure(s.attn_v, {S, B, heads_ * d_.v}, act(), device_), width_);
  proj_->forward(s.proj, s.attn_v, ensure(s.out, {Sl, B, spec_.hidden}, act(), device_), &mb);
  return s.out;
}

void MultiLatentAttention::backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                                    const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  State& s = static_cast<State&>(state);
  const int64_t S = full_seq(d_out.dim(0)), B = d_out.dim(1);
  const Rows& r = rows(S * B);
  const auto as = shape(S, B, mb.batch_offset);
  const auto ao = core_.options(mb, key_mask);
  Tensor& d_attn = ensure(s.d_attn, s.attn.shape(), act(), device_);
  if (core_.recomputes()) core_.recompute(s.core, as, ao, s.qkv, d_attn);  // (scratch output)
  proj_->backward(s.proj, d_out, &ensure(s.d_attn_v, s.attn_v.shape(), act(), device_), &mb);
  gather(s.d_attn_v, r.v_pad, d_attn, width_);
  core_.backward(s.core, as, ao, mb, s.qkv, s.attn, d_attn,
                 ensure(s.d_qkv, s.qkv.shape(), act(), device_));
  ops::rope_backward(as, s.d_qkv, rope_frequencies_of(spec_, rope_span(S, mb)), 0, mb.position_ids);
  project_backward(s, r, d_in, mb);
}

void MultiLatentAttention::project_backward(State& s, const Rows& r, Tensor& d_in,
                                            const MicroBatchInfo& mb) const {
  const int64_t w = width_, T = s.qkv.dim(0) * s.qkv.dim(1);
  gather(s.d_qkv, r.q_out, ensure(s.d_q, s.q.shape(), act(), device_), w);
  gather(s.d_qkv, r.kv_out, ensure(s.d_kv, s.kv.shape(), act(), device_), w);
  // The rope key's gradient: summed over this rank's heads (fp32), then over tp.
  Tensor& d_kr32 = ensure(s.d_kr32, {T * d_.qk_rope / w, w}, DType::F32, device_);
  ops::moe_combine(rows_of(s.d_qkv, w), &r.kr_sum, nullptr, heads_, d_kr32);
  if (tp_->size() > 1) tp_->all_reduce(d_kr32, parallel::ReduceOp::Sum);
  ops::cast(d_kr32, ensure(s.d_kr, d_kr32.shape(), act(), device_));
  kv_up_->backward(s.kv_up, s.d_kv, &ensure(s.d_c_n, s.c_n.shape(), act(), device_), &mb, true);
  kv_norm_->backward(s.kv_norm, s.d_c_n, ensure(s.d_c, s.c.shape(), act(), device_));
  Tensor& d_ckv = ensure(s.d_ckv_full, s.ckv_full.shape(), act(), device_);
  Tensor& tmp = ensure(s.scratch, d_ckv.shape(), act(), device_);
  gather(s.d_c, r.c_back, d_ckv, w);
  gather(s.d_kr, r.kr_back, tmp, w);
  ops::add_inplace(d_ckv, tmp);
  // Every rank holds the whole latent's gradient: under sequence parallelism its own slice.
  const int64_t Sl = s.ckv.dim(0);
  const Tensor d_ckv_local = sp_ ? d_ckv.slice(tp_->rank() * Sl, (tp_->rank() + 1) * Sl) : d_ckv;
  kv_down_->backward(s.kv_down, d_ckv_local, &d_in, &mb, /*dy_is_state=*/true);
  Tensor& d_x = ensure(s.d_x, d_in.shape(), act(), device_);
  if (q_down_) {
    q_up_->backward(s.q_up, s.d_q, &ensure(s.d_cq_n, s.cq_n.shape(), act(), device_), &mb, true);
    q_norm_->backward(s.q_norm, s.d_cq_n, ensure(s.d_cq, s.cq.shape(), act(), device_));
    q_down_->backward(s.q_down, s.d_cq, &d_x, &mb, /*dy_is_state=*/true);
  } else {
    q_up_->backward(s.q_up, s.d_q, &d_x, &mb, /*dy_is_state=*/true);
  }
  ops::add_inplace(d_in, d_x);
}

}  // namespace megatron
