#include "megatron/transformer/context_parallel.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "megatron/backend/ops.h"
#include "megatron/pipeline/timeline.h"
#include "megatron/transformer/attention.h"

namespace megatron {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Units of `width` floats per (row, sample): qkv rows have G groups of (H/G + 2) * Dh, output
// rows H heads of Dh.
struct RowUnits {
  int64_t rows, B, units, width;
};

// The fp32 tensor t itself when it already is one (sharing memory), else `scratch` holding it.
Tensor& as_f32(const Tensor& t, const Shape& shape, Tensor& scratch) {
  if (t.dtype() == DType::F32) {
    scratch = t.view(shape);
    return scratch;
  }
  ensure(scratch, shape, DType::F32, t.device());
  ops::cast(t.view(shape), scratch);
  return scratch;
}

// Where an fp32 result for t goes: t itself when it is fp32 (sharing memory), else `scratch`;
// finish_f32 then narrows the scratch into t.
Tensor& f32_target(Tensor& t, const Shape& shape, Tensor& scratch) {
  if (t.dtype() == DType::F32)
    scratch = t.view(shape);
  else
    ensure(scratch, shape, DType::F32, t.device());
  return scratch;
}
void finish_f32(const Tensor& scratch, Tensor& t) {
  if (t.dtype() != DType::F32) ops::cast(scratch, t);
}

// Every rearrangement of rows below is a gather or scatter of rows (ops::gather_rows,
// scatter_rows) through an int32 index built once per shape on the host and kept on the
// tensors' device: the same code moves host or device memory.
const Tensor& row_index(RowIndexCache& cache, std::vector<int64_t> key, Device dev,
                        const std::function<void(std::vector<int32_t>&)>& fill) {
  key.push_back(static_cast<int64_t>(dev));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<int32_t> host;
  fill(host);
  Tensor t = Tensor::empty({static_cast<int64_t>(host.size())}, DType::I32);
  std::copy(host.begin(), host.end(), t.data<int32_t>());
  return cache.emplace(std::move(key), t.to(dev)).first->second;
}

// The rows of Dh holding the key and value heads in qkv [S, B, G, H/G + 2, Dh], in order.
const Tensor& kv_rows(RowIndexCache& cache, const Tensor& qkv, const kernels::AttentionShape& s) {
  const int64_t slots = s.H / s.G + 2, units = qkv.numel() / (slots * s.Dh);
  return row_index(cache, {0, units, slots}, qkv.device(), [&](std::vector<int32_t>& idx) {
    for (int64_t u = 0; u < units; ++u)
      for (int64_t k = slots - 2; k < slots; ++k)
        idx.push_back(static_cast<int32_t>(u * slots + k));
  });
}

// qkv rows [S, B, G, H/G + 2, Dh] -> packed keys/values [S, B, G, 2, Dh], and back into the
// key/value slots of a qkv-layout gradient.
void pack_kv(RowIndexCache& cache, const Tensor& qkv, const kernels::AttentionShape& s,
             Tensor& kv) {
  Tensor rows = kv.view({kv.numel() / s.Dh, s.Dh});
  ops::gather_rows(qkv.view({qkv.numel() / s.Dh, s.Dh}), kv_rows(cache, qkv, s), rows);
}
void unpack_kv(RowIndexCache& cache, const Tensor& kv, const kernels::AttentionShape& s,
               Tensor& qkv) {
  Tensor rows = qkv.view({qkv.numel() / s.Dh, s.Dh});
  ops::scatter_rows(kv.view({kv.numel() / s.Dh, s.Dh}), kv_rows(cache, qkv, s), rows);
}

}  // namespace

ContextParallelAttention::ContextParallelAttention(parallel::Communicator& cp,
                                                   ContextParallelComm comm)
    : cp_(&cp), comm_(comm) {}

kernels::AttentionBlock ContextParallelAttention::block(const kernels::AttentionShape& gs,
                                                        int64_t q_chunk, int64_t src,
                                                        int64_t k_chunk) const {
  const auto mine = kernels::ContextChunks::of(gs.S, cp_->size(), cp_->rank());
  const auto theirs = kernels::ContextChunks::of(gs.S, cp_->size(), src);
  const int64_t C = mine.chunk;
  return kernels::AttentionBlock{(q_chunk == 0 ? mine.first : mine.second) * C, C,
                                 (k_chunk == 0 ? theirs.first : theirs.second) * C, C, true};
}

void ContextParallelAttention::attend(State& s, const kernels::AttentionShape& gs,
                                      const kernels::AttentionOptions& opt, const Tensor& kv,
                                      int64_t src) const {
  const int64_t C = gs.S / (2 * cp_->size());
  for (int64_t qc = 0; qc < 2; ++qc)
    for (int64_t kc = 0; kc < 2; ++kc) {
      const kernels::AttentionBlock b = block(gs, qc, src, kc);
      if (!kernels::block_visible(opt, b)) continue;
      ensure(w_.blk_out, {C, gs.B, gs.H, gs.Dh}, DType::F32, kv.device());
      ensure(w_.blk_lse, {gs.B, gs.H, C}, DType::F32, kv.device());
      ops::flash_attention_block_forward(gs, opt, b, w_.q32.slice(qc * C, (qc + 1) * C),
                                         kv.slice(kc * C, (kc + 1) * C), w_.blk_out, w_.blk_lse);
      Tensor acc = w_.out32.slice(qc * C, (qc + 1) * C);
      ops::flash_attention_merge(w_.blk_out, w_.blk_lse, acc, s.lse, qc * C);
    }
}

void ContextParallelAttention::attend_backward(const kernels::AttentionShape& gs,
                                               const kernels::AttentionOptions& opt,
                                               const Tensor& kv, Tensor& dkv, int64_t src) const {
  const int64_t C = gs.S / (2 * cp_->size());
  for (int64_t qc = 0; qc < 2; ++qc)
    for (int64_t kc = 0; kc < 2; ++kc) {
      const kernels::AttentionBlock b = block(gs, qc, src, kc);
      if (!kernels::block_visible(opt, b)) continue;
      Tensor dq = w_.dq32.slice(qc * C, (qc + 1) * C), dk = dkv.slice(kc * C, (kc + 1) * C);
      ops::flash_attention_block_backward(
          gs, opt, b, w_.q32.slice(qc * C, (qc + 1) * C), kv.slice(kc * C, (kc + 1) * C),
          w_.out32.slice(qc * C, (qc + 1) * C), w_.chunk_lse.slice(qc, qc + 1),
          w_.dout32.slice(qc * C, (qc + 1) * C), dq, dk);
    }
}

ContextParallelAttention::Hop ContextParallelAttention::pass_block(int step, const Shape& kv_shape,
                                                                   int tag) const {
  const int cp = cp_->size(), r = cp_->rank();
  Hop hop{nullptr, now()};
  if (step + 1 < cp) {
    ensure(w_.kv_next, kv_shape, DType::F32, w_.q32.device());
    hop.work =
        cp_->batch_isend_irecv({{parallel::P2POp::Send, w_.kv, (r + 1) % cp, tag},
                                {parallel::P2POp::Recv, w_.kv_next, (r - 1 + cp) % cp, tag}});
  }
  return hop;
}

void ContextParallelAttention::finish_hop(const Hop& hop) const {
  if (!hop.work) return;
  hop.work->wait();
  record_exchange(hop.start_s);
  std::swap(w_.kv, w_.kv_next);
}

void ContextParallelAttention::ring_forward(State& s, const kernels::AttentionShape& gs,
                                            const kernels::AttentionOptions& opt) const {
  const int cp = cp_->size(), r = cp_->rank();
  const int64_t Sl = w_.q32.dim(0);
  const Shape kv_shape{Sl, gs.B, gs.G, 2, gs.Dh};
  pack_kv(w_.index, w_.q32, gs, ensure(w_.kv, kv_shape, DType::F32, w_.q32.device()));
  if (comm_ == ContextParallelComm::AllGather) {
    ensure(s.kv_all, {cp * Sl, gs.B, gs.G, 2, gs.Dh}, DType::F32, w_.q32.device());
    const double t0 = now();
    cp_->all_gather(w_.kv, s.kv_all);
    record_exchange(t0);
  }
  for (int step = 0; step < cp; ++step) {
    const int src = (r - step + cp) % cp;
    if (comm_ == ContextParallelComm::AllGather) {
      attend(s, gs, opt, s.kv_all.slice(src * Sl, (src + 1) * Sl), src);
      continue;
    }
    // The next block travels while this one is attended to.
    const Hop hop = pass_block(step, kv_shape, 1);
    attend(s, gs, opt, w_.kv, src);
    finish_hop(hop);
  }
}

void ContextParallelAttention::ring_backward(State& s, const kernels::AttentionShape& gs,
                                             const kernels::AttentionOptions& opt) const {
  const int cp = cp_->size(), r = cp_->rank();
  const int64_t Sl = w_.q32.dim(0);
  const Shape kv_shape{Sl, gs.B, gs.G, 2, gs.Dh};
  const bool gathered = comm_ == ContextParallelComm::AllGather;
  if (gathered) {
    ensure(w_.dkv_all, {cp * Sl, gs.B, gs.G, 2, gs.Dh}, DType::F32, w_.q32.device()).zero_();
  } else {
    pack_kv(w_.index, w_.q32, gs, ensure(w_.kv, kv_shape, DType::F32, w_.q32.device()));
    ensure(w_.dkv, kv_shape, DType::F32, w_.q32.device()).zero_();
  }
  for (int step = 0; step < cp; ++step) {
    const int src = (r - step + cp) % cp;
    if (gathered) {
      Tensor dkv = w_.dkv_all.slice(src * Sl, (src + 1) * Sl);
      attend_backward(gs, opt, s.kv_all.slice(src * Sl, (src + 1) * Sl), dkv, src);
      continue;
    }
    const Hop hop = pass_block(step, kv_shape, 2);
    attend_backward(gs, opt, w_.kv, w_.dkv, src);
    finish_hop(hop);
    // The block's key/value gradient follows it; after cp hops it is back with its owner. It
    // arrives in kv_next (free since the swap: the block it held is done), and the gradient
    // just sent becomes the next key/value receive buffer: three blocks in all.
    if (cp > 1) {
      ensure(w_.kv_next, kv_shape, DType::F32, w_.q32.device());
      const double t1 = now();
      cp_->batch_isend_irecv({{parallel::P2POp::Send, w_.dkv, (r + 1) % cp, 3},
                              {parallel::P2POp::Recv, w_.kv_next, (r - 1 + cp) % cp, 3}})
          ->wait();
      record_exchange(t1);
      std::swap(w_.dkv, w_.kv_next);
    }
  }
  if (gathered) {
    ensure(w_.dkv, kv_shape, DType::F32, w_.q32.device());
    const double t0 = now();
    cp_->reduce_scatter(w_.dkv_all, w_.dkv, parallel::ReduceOp::Sum);
    record_exchange(t0);
  }
  unpack_kv(w_.index, w_.dkv, gs, w_.dq32);
}

namespace {

// Ulysses' exchanges over the cp group (n ranks, Sl rows each, B samples). Two row orders:
// unit_order: row (j Sl + t) B + b of the all-to-all buffer (rank j's units of row t, sample b)
// is row (t B + b) n + j of the local tensor viewed as rows of one rank's units;
// seq_order: row j Sl + t of the buffer (rank j's row t) is global row chunks(j).global(t).
const Tensor& unit_order(RowIndexCache& cache, int n, int64_t Sl, int64_t B, Device dev) {
  return row_index(cache, {1, n, Sl, B}, dev, [&](std::vector<int32_t>& idx) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < Sl; ++t)
        for (int64_t b = 0; b < B; ++b) idx.push_back(static_cast<int32_t>((t * B + b) * n + j));
  });
}
const Tensor& seq_order(RowIndexCache& cache, int n, int64_t Sl, int64_t S, Device dev) {
  return row_index(cache, {2, n, Sl, S}, dev, [&](std::vector<int32_t>& idx) {
    for (int j = 0; j < n; ++j) {
      const auto ch = kernels::ContextChunks::of(S, n, j);
      for (int64_t t = 0; t < Sl; ++t) idx.push_back(static_cast<int32_t>(ch.global(t)));
    }
  });
}

// seq_to_heads: this rank's rows [Sl, B, cp * N units] -> the whole sequence (global order) of
// units [r N, (r + 1) N): full [S, B, N units]. heads_to_seq is its inverse.
void seq_to_heads(parallel::Communicator& cp, RowIndexCache& cache, const Tensor& local,
                  const RowUnits& u, int64_t S, Tensor& send, Tensor& recv, Tensor& full) {
  const int n = cp.size();
  const int64_t Sl = u.rows, unit_floats = (u.units / n) * u.width, part = u.B * unit_floats;
  const Device dev = local.device();
  ensure(send, {local.numel()}, DType::F32, dev);
  ensure(recv, {local.numel()}, DType::F32, dev);
  Tensor send_rows = send.view({local.numel() / unit_floats, unit_floats});
  ops::gather_rows(local.view({local.numel() / unit_floats, unit_floats}),
                   unit_order(cache, n, Sl, u.B, dev), send_rows);
  const std::vector<int64_t> counts(static_cast<size_t>(n), Sl * part);
  cp.all_to_all(send, counts, recv, counts);
  Tensor rows = full.view({S, part});
  ops::scatter_rows(recv.view({n * Sl, part}), seq_order(cache, n, Sl, S, dev), rows);
}

void heads_to_seq(parallel::Communicator& cp, RowIndexCache& cache, const Tensor& full,
                  const RowUnits& u, int64_t S, Tensor& send, Tensor& recv, Tensor& local) {
  const int n = cp.size();
  const int64_t Sl = u.rows, unit_floats = (u.units / n) * u.width, part = u.B * unit_floats;
  const Device dev = full.device();
  ensure(send, {local.numel()}, DType::F32, dev);
  ensure(recv, {local.numel()}, DType::F32, dev);
  Tensor send_rows = send.view({n * Sl, part});
  ops::gather_rows(full.view({S, part}), seq_order(cache, n, Sl, S, dev), send_rows);
  const std::vector<int64_t> counts(static_cast<size_t>(n), Sl * part);
  cp.all_to_all(send, counts, recv, counts);
  Tensor rows = local.view({local.numel() / unit_floats, unit_floats});
  ops::scatter_rows(recv.view({local.numel() / unit_floats, unit_floats}),
                    unit_order(cache, n, Sl, u.B, dev), rows);
}

// The shape of one rank's heads over the whole sequence (a2a).
kernels::AttentionShape a2a_shape(const kernels::AttentionShape& gs, int n, int rank) {
  kernels::AttentionShape sh = gs;
  sh.H = gs.H / n;
  sh.G = gs.G / n;
  sh.head_offset = gs.head_offset + rank * sh.H;
  if (sh.total_heads == 0) sh.total_heads = gs.H;
  return sh;
}

}  // namespace

void ContextParallelAttention::a2a_forward(State& s, const kernels::AttentionShape& gs,
                                           const kernels::AttentionOptions& opt) const {
  const int n = cp_->size();
  const int64_t Sl = w_.q32.dim(0), S = gs.S, w = (gs.H / gs.G + 2) * gs.Dh;
  const auto sh = a2a_shape(gs, n, cp_->rank());
  const Device dev = w_.q32.device();
  ensure(s.full_qkv, {S, gs.B, sh.G, w}, DType::F32, dev);
  {
    const double t0 = now();
    seq_to_heads(*cp_, w_.index, w_.q32, {Sl, gs.B, gs.G, w}, S, w_.send, w_.recv, s.full_qkv);
    record_exchange(t0);
  }
  ensure(s.full_out, {S, gs.B, sh.H, gs.Dh}, DType::F32, dev);
  ensure(s.full_lse, {gs.B, sh.H, S}, DType::F32, dev);
  ops::flash_attention_forward(sh, opt, s.full_qkv, s.full_out, s.full_lse);
  {
    const double t0 = now();
    heads_to_seq(*cp_, w_.index, s.full_out, {Sl, gs.B, gs.H, gs.Dh}, S, w_.send, w_.recv,
                 w_.out32);
    record_exchange(t0);
  }
}

void ContextParallelAttention::a2a_backward(State& s, const kernels::AttentionShape& gs,
                                            const kernels::AttentionOptions& opt) const {
  const int n = cp_->size();
  const int64_t S = gs.S, Sl = S / n, w = (gs.H / gs.G + 2) * gs.Dh;
  const auto sh = a2a_shape(gs, n, cp_->rank());
  const Device dev = w_.dout32.device();
  ensure(w_.full_dout, {S, gs.B, sh.H, gs.Dh}, DType::F32, dev);
  {
    const double t0 = now();
    seq_to_heads(*cp_, w_.index, w_.dout32, {Sl, gs.B, gs.H, gs.Dh}, S, w_.send, w_.recv,
                 w_.full_dout);
    record_exchange(t0);
  }
  ensure(w_.full_dqkv, s.full_qkv.shape(), DType::F32, dev);
  ops::flash_attention_backward(sh, opt, s.full_qkv, s.full_out, s.full_lse, w_.full_dout,
                                w_.full_dqkv);
  {
    const double t0 = now();
    heads_to_seq(*cp_, w_.index, w_.full_dqkv, {Sl, gs.B, gs.G, w}, S, w_.send, w_.recv, w_.dq32);
    record_exchange(t0);
  }
}

double ContextParallelAttention::now() const {
  return w_.mb != nullptr && w_.mb->timeline != nullptr ? w_.mb->timeline->now() : 0.0;
}

void ContextParallelAttention::record_exchange(double start_s) const {
  if (w_.mb == nullptr || w_.mb->timeline == nullptr) return;
  w_.mb->timeline->record(pipeline::ActionKind::CpExchange, w_.mb->microbatch, 0, start_s,
                          w_.mb->timeline->now());
}

void ContextParallelAttention::forward(State& s, const kernels::AttentionShape& local,
                                       const kernels::AttentionOptions& opt,
                                       const MicroBatchInfo& mb, const Tensor& qkv,
                                       Tensor& out) const {
  const kernels::ContextChunks& chunks = mb.cp;
  w_.mb = &mb;
  MT_CHECK(chunks.active() && chunks.first == cp_->rank() && local.S == 2 * chunks.chunk &&
               chunks.total == chunks.chunk * 2 * cp_->size(),
           "context-parallel attention: rank ", cp_->rank(), " of ", cp_->size(), " holds ",
           local.S, " rows, chunks ", chunks.first, "/", chunks.second, " of ", chunks.chunk,
           " (sequence ", chunks.total, ")");
  kernels::AttentionShape gs = local;
  gs.S = chunks.total;
  const int64_t Sl = local.S, w = (local.H / local.G + 2) * local.Dh;
  as_f32(qkv, {Sl, local.B, local.G, w}, w_.q32);
  const Shape out_shape{Sl, local.B, local.H, local.Dh};
  f32_target(out, out_shape, w_.out32);
  if (comm_ == ContextParallelComm::AllToAll) {
    a2a_forward(s, gs, opt);
  } else {
    w_.out32.zero_();  // rows no key reaches stay zero
    ensure(s.lse, {local.B, local.H, Sl}, DType::F32, out.device());
    ops::fill(s.lse, kNegInf);
    ring_forward(s, gs, opt);
  }
  finish_f32(w_.out32, out);
}

void ContextParallelAttention::backward(State& s, const kernels::AttentionShape& local,
                                        const kernels::AttentionOptions& opt,
                                        const MicroBatchInfo& mb, const Tensor& qkv,
                                        const Tensor& out, const Tensor& dout, Tensor& dqkv) const {
  const kernels::ContextChunks& chunks = mb.cp;
  w_.mb = &mb;
  kernels::AttentionShape gs = local;
  gs.S = chunks.total;
  const int64_t Sl = local.S, C = chunks.chunk, w = (local.H / local.G + 2) * local.Dh;
  const Shape out_shape{Sl, local.B, local.H, local.Dh};
  as_f32(dout, out_shape, w_.dout32);
  f32_target(dqkv, {Sl, local.B, local.G, w}, w_.dq32);
  if (comm_ == ContextParallelComm::AllToAll) {
    a2a_backward(s, gs, opt);
  } else {
    // The scratch served other layers since this one's forward: this layer's rows again.
    as_f32(qkv, {Sl, local.B, local.G, w}, w_.q32);
    as_f32(out, out_shape, w_.out32);
    w_.dq32.zero_();
    // Each query chunk's lse rows, contiguous for the block kernel.
    const int64_t BH = local.B * local.H;
    ensure(w_.chunk_lse, {2, local.B, local.H, C}, DType::F32, dqkv.device());
    const Tensor& order =
        row_index(w_.index, {3, BH}, dqkv.device(), [&](std::vector<int32_t>& idx) {
          for (int64_t qc = 0; qc < 2; ++qc)
            for (int64_t bh = 0; bh < BH; ++bh) idx.push_back(static_cast<int32_t>(bh * 2 + qc));
        });
    Tensor rows = w_.chunk_lse.view({2 * BH, C});
    ops::gather_rows(s.lse.view({2 * BH, C}), order, rows);
    ring_backward(s, gs, opt);
  }
  finish_f32(w_.dq32, dqkv);
}

BlockSubmodules with_context_parallel(BlockSubmodules base, parallel::Communicator& cp,
                                      ContextParallelComm comm) {
  auto core = std::make_shared<const ContextParallelAttention>(cp, comm);
  base.attention = [core](const SubmoduleArgs& a) { return make_attention(a, core); };
  return base;
}

}  // namespace megatron
