// Context parallelism's attention ops and OLMo-2's whole-projection q/k norms through both
// backends, as test_ops_backends.cpp: the same case runs on CPU tensors (fp32) and on CUDA
// tensors, compared by norm-relative error. The block ops (ops::flash_attention_block_*, merge)
// on blocks off and on the diagonal, packed and fused key/value layouts, windows, documents, key
// masks and dropout at global positions, the backward adding into gradients that already hold
// values; ContextParallelAttention itself (ring, all-gather, all-to-all) over a one-rank group,
// which runs the same packs, block kernels, merges and row moves on the device; the q/k
// projection statistics, norm and backward with accumulated weight gradients. Without a CUDA
// build or a GPU these compute the CPU side, then report SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/context_chunks.h"
#include "megatron/backend/ops.h"
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"
#include "megatron/transformer/context_parallel.h"
#include "tests/support/ops_test_util.h"

namespace megatron {
namespace {

using ops::testing::Backend;
using ops::testing::CudaVsCpuOps;
using ops::testing::dtype_param_name;
using ops::testing::Outputs;
using ops::testing::randn;
using ops::testing::values;

constexpr float kNegInf = -INFINITY;

// lse rows no key reaches are -inf on both sides: compare the finite part.
Tensor finite_lse(const Backend& be, const Tensor& lse) {
  std::vector<float> l = values(lse);
  for (float& x : l)
    if (std::isinf(x)) x = 0.0f;
  return be.f32(l, lse.shape());
}

struct BlockCase {
  kernels::AttentionShape shape;  // S: the global sequence
  kernels::AttentionBlock block;
  bool causal = true;
  int64_t window = 0;
  bool key_mask = false, documents = false;
  float dropout = 0.0f;
  float softcap = 0.0f;
};

class CudaVsCpuBlockAttention : public CudaVsCpuOps {
 protected:
  void run_block(const BlockCase& c) {
    const kernels::AttentionShape& s = c.shape;
    const kernels::AttentionBlock& b = c.block;
    const int64_t q_width = s.B * (s.H + 2 * s.G) * s.Dh;
    const int64_t kv_width = s.B * (b.kv_packed ? 2 * s.G : s.H + 2 * s.G) * s.Dh;
    const int64_t out_width = s.B * s.H * s.Dh;
    const auto q = rnd(b.q_rows * q_width, 21), kv = rnd(b.k_rows * kv_width, 22);
    const auto dout = rnd(b.q_rows * out_width, 23), dq0 = rnd(q.size(), 24),
               dkv0 = rnd(kv.size(), 25);
    std::vector<uint8_t> mask(s.B * s.S, 1);
    for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;
    std::vector<int32_t> docs(s.B * s.S);
    for (int64_t bb = 0; bb < s.B; ++bb)
      for (int64_t j = 0; j < s.S; ++j) docs[bb * s.S + j] = int32_t(j / (9 + 4 * bb));
    compare([&](const Backend& be) {
      Tensor tmask = be.bytes(mask), tdocs = be.ints(docs);
      kernels::AttentionOptions opt;
      opt.scale = 1.0f / std::sqrt(float(s.Dh));
      opt.causal = c.causal;
      opt.window = c.window;
      opt.key_mask = c.key_mask ? static_cast<const uint8_t*>(tmask.raw()) : nullptr;
      opt.segment_ids = c.documents ? static_cast<const int32_t*>(tdocs.raw()) : nullptr;
      opt.dropout_p = c.dropout;
      opt.softcap = c.softcap;
      opt.seed = 7;
      opt.stream = 11;
      Tensor tq = be.make(q, {b.q_rows, q_width}), tkv = be.make(kv, {b.k_rows, kv_width});
      Tensor out = be.act_zeros({b.q_rows, s.B, s.H, s.Dh});
      Tensor lse = be.zeros({s.B, s.H, b.q_rows}, DType::F32);
      ops::flash_attention_block_forward(s, opt, b, tq, tkv, out, lse);
      Tensor dq = be.make(dq0, tq.shape()), dkv = be.make(dkv0, tkv.shape());
      ops::flash_attention_block_backward(s, opt, b, tq, tkv, out, lse, be.make(dout, out.shape()),
                                          dq, dkv);
      // Two halves of the block's keys merged into an accumulator equal the whole block.
      Tensor acc = be.act_zeros(out.shape());
      Tensor acc_lse = be.zeros({s.B, s.H, b.q_rows}, DType::F32);
      ops::fill(acc_lse, kNegInf);
      const int64_t half = b.k_rows / 2;
      for (const auto& [k0, k1] : {std::pair<int64_t, int64_t>{0, half}, {half, b.k_rows}}) {
        kernels::AttentionBlock part = b;
        part.k_start = b.k_start + k0;
        part.k_rows = k1 - k0;
        Tensor po = be.act_zeros(out.shape()), pl = be.zeros(lse.shape(), DType::F32);
        ops::flash_attention_block_forward(s, opt, part, tq, tkv.slice(k0, k1), po, pl);
        ops::flash_attention_merge(po, pl, acc, acc_lse, 0);
      }
      return Outputs{{"out", out},    {"lse", finite_lse(be, lse)},
                     {"dq", dq},      {"dkv", dkv},
                     {"merged", acc}, {"merged_lse", finite_lse(be, acc_lse)}};
    });
  }
};

// S 96, B 2, 4 heads in 2 groups, Dh 16; the blocks are 24-row chunks.
constexpr kernels::AttentionShape kShape{96, 2, 4, 2, 16};

TEST_P(CudaVsCpuBlockAttention, DiagonalCausalFused) {
  run_block({kShape, {24, 24, 24, 24, false}});
}
TEST_P(CudaVsCpuBlockAttention, BelowTheDiagonalPackedDropout) {
  run_block({kShape, {72, 24, 0, 24, true}, true, 0, false, false, 0.2f});
}
TEST_P(CudaVsCpuBlockAttention, WindowDocumentsKeyMask) {
  run_block({kShape, {48, 24, 24, 24, true}, true, 30, true, true, 0.0f});
}
TEST_P(CudaVsCpuBlockAttention, BidirectionalAboveTheDiagonalSoftcap) {
  run_block({kShape, {0, 24, 72, 24, true}, false, 0, true, false, 0.1f, 1.5f});
}
TEST_P(CudaVsCpuBlockAttention, LongBlockDh128CrossesTiles) {
  run_block({{160, 1, 2, 1, 128}, {80, 80, 0, 80, true}, true, 0, false, false, 0.0f, 3.0f});
}

// ContextParallelAttention over a one-rank group: chunks 0 and 1 of the sequence, blocks on and
// below the diagonal, merged; backward through the packed gradients (or a2a's row moves).
class CudaVsCpuContextParallel : public CudaVsCpuOps {
 protected:
  void run_cp(ContextParallelComm comm) {
    const kernels::AttentionShape s{64, 2, 4, 2, 32};
    const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
    const auto qkv = rnd(n_qkv, 31), dout = rnd(n_out, 32);
    std::vector<int32_t> docs(s.B * s.S);
    for (int64_t j = 0; j < s.B * s.S; ++j) docs[j] = int32_t((j % s.S) / 21);
    auto group = parallel::make_single_process_communicator();
    const ContextParallelAttention core(*group, comm);
    compare(
        [&](const Backend& be) {
          Tensor tdocs = be.ints(docs);
          kernels::AttentionOptions opt;
          opt.scale = 1.0f / std::sqrt(float(s.Dh));
          opt.causal = true;
          opt.window = 40;
          opt.segment_ids = static_cast<const int32_t*>(tdocs.raw());
          opt.dropout_p = 0.1f;
          opt.seed = 5;
          opt.stream = 9;
          MicroBatchInfo mb;
          mb.cp = kernels::ContextChunks{s.S / 2, 0, 1, s.S};  // (of() is inactive for cp 1)
          ContextParallelAttention::State state;
          Tensor tqkv = be.make(qkv, {s.S, s.B, s.G * (s.H / s.G + 2) * s.Dh});
          Tensor out = be.act_zeros({s.S, s.B, s.H * s.Dh});
          core.forward(state, s, opt, mb, tqkv, out);
          Tensor dqkv = be.act_zeros(tqkv.shape());
          core.backward(state, s, opt, mb, tqkv, out, be.make(dout, out.shape()), dqkv);
          return Outputs{{"out", out}, {"dqkv", dqkv}};
        },
        {{"dqkv", 3.0}});
  }
};

TEST_P(CudaVsCpuContextParallel, Ring) { run_cp(ContextParallelComm::P2P); }
TEST_P(CudaVsCpuContextParallel, AllGather) { run_cp(ContextParallelComm::AllGather); }
TEST_P(CudaVsCpuContextParallel, AllToAll) { run_cp(ContextParallelComm::AllToAll); }

// OLMo-2's q/k RMSNorm over whole projections: 13 tokens, 3 query groups of 2 heads, Dh 16.
class CudaVsCpuQkProjection : public CudaVsCpuOps {};

TEST_P(CudaVsCpuQkProjection, StatisticsNormAndBackward) {
  const kernels::QkProjection p{13, 3, 2, 16, 6 * 16, 3 * 16, 1e-6f};
  const int64_t n = p.tokens * p.row();
  const auto x = rnd(n, 41, 1.5f), dy = rnd(n, 42);
  const auto wq = randn(p.local_q(), 43, 0.3f, 1.0f), wk = randn(p.local_k(), 44, 0.3f, 1.0f);
  const auto dwq0 = randn(p.local_q(), 45), dwk0 = randn(p.local_k(), 46);
  compare(
      [&](const Backend& be) {
        Tensor tx = be.make(x, {n}), tdy = be.make(dy, {n});
        Tensor twq = be.f32(wq, {p.local_q()}), twk = be.f32(wk, {p.local_k()});
        Tensor sums = be.zeros({p.tokens, 2}, DType::F32), rstd = sums.clone();
        ops::qk_projection_sums(tx, nullptr, twq, twk, p, sums);
        Tensor y = be.act_zeros({n});
        ops::qk_projection_norm_forward(tx, twq, twk, sums, p, y, rstd);
        Tensor dots = be.zeros({p.tokens, 2}, DType::F32);
        ops::qk_projection_sums(tx, &tdy, twq, twk, p, dots);
        Tensor dwq = be.f32(dwq0, {p.local_q()}), dwk = be.f32(dwk0, {p.local_k()});
        Tensor dx = be.act_zeros({n});
        ops::qk_projection_norm_backward(tx, twq, twk, rstd, dots, tdy, p, dx, dwq, dwk);
        return Outputs{{"sums", sums}, {"y", y},     {"rstd", rstd}, {"dots", dots},
                       {"dx", dx},     {"dwq", dwq}, {"dwk", dwk}};
      },
      {{"dx", 2.0}, {"dwq", 2.0}, {"dwk", 2.0}});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuBlockAttention, ::testing::Values(DType::F32),
                         dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuContextParallel,
                         ::testing::Values(DType::F32, DType::BF16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuQkProjection,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);

}  // namespace
}  // namespace megatron
