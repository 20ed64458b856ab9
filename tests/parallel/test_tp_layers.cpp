// mpirun-np: 2 4
// Each tensor-parallel layer against its unsplit version: outputs, input gradients and every
// weight-gradient shard equal the matching slice of the single-process layer's results, with
// and without sequence parallelism; the split (zero-bubble) backward against the joint one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "megatron/backend/ops.h"
#include "megatron/transformer/layers.h"
#include "megatron/transformer/weight_grads.h"
#include "parallel_test.h"
#include "tests/support/random_tensor.h"

namespace megatron {
namespace {

namespace mp = megatron::parallel;
using mp::testing::world;

using megatron::testing::random_tensor;

// Rows [r * n / parts, (r + 1) * n / parts) of dim 0, or columns of the last dim.
Tensor slice_dim0(const Tensor& t, int64_t part, int64_t parts) {
  const int64_t rows = t.dim(0) / parts;
  return t.slice(part * rows, (part + 1) * rows);
}

Tensor slice_last(const Tensor& t, int64_t part, int64_t parts) {
  const int64_t cols = t.dim(t.ndim() - 1), w = cols / parts, rows = t.numel() / cols;
  Shape s = t.shape();
  s[s.ndim() - 1] = w;
  Tensor out = Tensor::empty(s, DType::F32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c)
      out.data<float>()[r * w + c] = t.data<float>()[r * cols + part * w + c];
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i],
                1e-4f * (1.0f + std::abs(want.data<float>()[i])))
        << what << " element " << i;
}

// Every local element of each sharded parameter equals the full parameter's gradient at its
// global index.
void expect_grad_shards(ParamStore& sharded, ParamStore& full) {
  for (Parameter* p : sharded.params()) {
    Parameter& f = full.get(p->name);
    for (int64_t i = 0; i < p->grad.numel(); ++i)
      ASSERT_NEAR(p->grad.data<float>()[i], f.grad.data<float>()[p->global_index(i)],
                  1e-4f * (1.0f + std::abs(f.grad.data<float>()[p->global_index(i)])))
          << p->name << " local element " << i;
  }
}

struct LayerCase {
  TPMode mode;
  bool sp;
};

TEST(TensorParallelLayers, LinearMatchesUnsplit) {
  const int tp = world().size(), r = world().rank();
  auto self = mp::make_single_process_communicator();
  const int64_t S = 4 * tp, B = 3, in = 8 * tp, out = 4 * tp;
  for (const LayerCase c : {LayerCase{TPMode::Column, false}, LayerCase{TPMode::Column, true},
                            LayerCase{TPMode::Row, false}, LayerCase{TPMode::Row, true}}) {
    SCOPED_TRACE(std::string(c.mode == TPMode::Column ? "column" : "row") +
                 (c.sp ? " sequence-parallel" : ""));
    ParamStore full_store, tp_store;
    Linear full(full_store, "l", in, out, true, c.mode, *self, 0.5f);
    Linear split(tp_store, "l", in, out, true, c.mode, world(), 0.5f, Shape{}, c.sp);
    for (ParamStore* s : {&full_store, &tp_store}) {
      s->finalize();
      s->initialize(3);
    }
    // Biases start at zero; give them values so the bias path is exercised.
    for (ParamStore* s : {&full_store, &tp_store}) {
      Parameter& b = s->get("l.bias");
      for (int64_t i = 0; i < b.weight.numel(); ++i)
        b.weight.data<float>()[i] = 0.1f * static_cast<float>(b.global_index(i) % 7);
    }
    const Tensor x = random_tensor({S, B, in}, 11), dy = random_tensor({S, B, out}, 12);
    Linear::Ctx fc, sc;
    Tensor y_full = Tensor::empty({S, B, out}, DType::F32);
    full.forward(fc, x, y_full);
    Tensor dx_full = Tensor::empty({S, B, in}, DType::F32);
    full.backward(fc, dy, &dx_full);

    // What this rank sees of x and dy, and what it must produce.
    Tensor x_local = c.mode == TPMode::Row ? slice_last(x, r, tp) : x;
    if (c.sp && c.mode == TPMode::Column) x_local = slice_dim0(x, r, tp);
    Tensor y_want = c.mode == TPMode::Column ? slice_last(y_full, r, tp) : y_full;
    if (c.sp && c.mode == TPMode::Row) y_want = slice_dim0(y_full, r, tp).clone();
    Tensor dy_local = c.mode == TPMode::Column ? slice_last(dy, r, tp) : dy;
    if (c.sp && c.mode == TPMode::Row) dy_local = slice_dim0(dy, r, tp).clone();
    Tensor dx_want = c.mode == TPMode::Row ? slice_last(dx_full, r, tp) : dx_full;
    if (c.sp && c.mode == TPMode::Column) dx_want = slice_dim0(dx_full, r, tp).clone();

    Tensor y = Tensor::empty(y_want.shape(), DType::F32);
    split.forward(sc, x_local, y);
    expect_close(y, y_want, "output");
    Tensor dx = Tensor::empty(dx_want.shape(), DType::F32);
    split.backward(sc, dy_local, &dx);
    expect_close(dx, dx_want, "input gradient");
    expect_grad_shards(tp_store, full_store);
  }
}

// A stacked column-parallel weight (SwiGLU's fc1 [2, F, D]) and its bias [2, F] are cut at the
// same rows: local output row (s, j) is global row s * F + rank * F / tp + j for both, so a
// checkpoint or a Hugging Face mapping sees each bias next to its weight row under any tp.
TEST(TensorParallelLayers, StackedColumnBiasFollowsItsWeightRows) {
  auto& world = parallel::testing::world();
  const int64_t F = 8, D = 3, p = world.size(), r = world.rank();
  ParamStore store;
  Linear fc1(store, "fc1", D, 2 * F, true, TPMode::Column, world, 0.02f, Shape{2, F, D});
  store.finalize();
  const Parameter& w = store.get("fc1.weight");
  const Parameter& b = store.get("fc1.bias");
  ASSERT_EQ(b.global_shape, (Shape{2, F}));
  ASSERT_EQ(b.local_shape, (Shape{2, F / p}));
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t j = 0; j < F / p; ++j) {
      const int64_t local = s * (F / p) + j, global_row = s * F + r * (F / p) + j;
      EXPECT_EQ(b.global_index(local), global_row) << s << " " << j;
      EXPECT_EQ(w.global_index(local * D) / D, global_row) << s << " " << j;
    }
}

TEST(TensorParallelLayers, VocabParallelEmbeddingMatchesUnsplit) {
  const int tp = world().size(), r = world().rank();
  auto self = mp::make_single_process_communicator();
  const int64_t S = 2 * tp, B = 3, V = 8 * tp, D = 5;
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence-parallel" : "plain");
    ParamStore full_store, tp_store;
    Embedding full(full_store, "e", V, D, *self, 1.0f);
    Embedding split(tp_store, "e", V, D, world(), 1.0f, sp);
    for (ParamStore* s : {&full_store, &tp_store}) {
      s->finalize();
      s->initialize(5);
    }
    Tensor ids = Tensor::empty({S, B}, DType::I32);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = (i * 7 + 3) % V;
    Embedding::Ctx fc, sc;
    Tensor y_full = Tensor::empty({S, B, D}, DType::F32);
    full.forward(fc, ids, y_full);
    const Tensor dy = random_tensor({S, B, D}, 9);
    full.backward(fc, dy);

    const Tensor y_want = sp ? slice_dim0(y_full, r, tp).clone() : y_full;
    Tensor y = Tensor::empty(y_want.shape(), DType::F32);
    split.forward(sc, ids, y);
    expect_close(y, y_want, "embedding output");
    split.backward(sc, sp ? slice_dim0(dy, r, tp).clone() : dy);
    expect_grad_shards(tp_store, full_store);
  }
}

// Every element of a equals b's, bit for bit.
void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  ASSERT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.numel()) * sizeof(float)), 0)
      << what;
}

void expect_zero(const Tensor& t, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 0.0f) << what << " " << i;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double{t.data<float>()[i]}));
  return m;
}

// A Linear's input x (this rank's sequence slice under sequence parallelism, its feature shard
// for a row base), an output gradient dy and an output buffer y of its layout.
std::tuple<Tensor, Tensor, Tensor> layer_tensors(const LayerCase& c, int tp, int64_t S, int64_t B,
                                                 int64_t in, int64_t out) {
  const int64_t in_local = c.mode == TPMode::Row ? in / tp : in;
  const int64_t out_local = c.mode == TPMode::Column ? out / tp : out;
  const int64_t s_in = c.sp && c.mode == TPMode::Column ? S / tp : S;
  const int64_t s_out = c.sp && c.mode == TPMode::Row ? S / tp : S;
  return {random_tensor({s_in, B, in_local}, 11), random_tensor({s_out, B, out_local}, 12),
          Tensor::empty({s_out, B, out_local}, DType::F32)};
}

// Zero-bubble's split backward (transformer/weight_grads.h): with a queue on the micro-batch a
// layer's backward writes the same input gradient, leaves its weight gradients untouched, and
// the drained queue then gives the joint backward's gradients bit for bit, even after the
// caller reused its input and output-gradient buffers (the queue keeps copies).
TEST(TensorParallelLayers, DeferredWeightGradientsEqualTheJointBackward) {
  const int tp = world().size();
  auto self = mp::make_single_process_communicator();
  const int64_t S = 4 * tp, B = 3, in = 8 * tp, out = 4 * tp;
  for (const LayerCase c : {LayerCase{TPMode::None, false}, LayerCase{TPMode::Column, false},
                            LayerCase{TPMode::Column, true}, LayerCase{TPMode::Row, false},
                            LayerCase{TPMode::Row, true}}) {
    SCOPED_TRACE(concat(static_cast<int>(c.mode), c.sp ? " sequence-parallel" : ""));
    ParamStore joint_store, split_store;
    parallel::Communicator& comm = c.mode == TPMode::None ? *self : world();
    Linear joint(joint_store, "l", in, out, true, c.mode, comm, 0.5f, Shape{}, c.sp);
    Linear split(split_store, "l", in, out, true, c.mode, comm, 0.5f, Shape{}, c.sp);
    for (ParamStore* s : {&joint_store, &split_store}) {
      s->finalize();
      s->initialize(3);
    }
    auto [x, dy, y] = layer_tensors(c, tp, S, B, in, out);
    Linear::Ctx jc, sc;
    joint.forward(jc, x, y);
    Tensor dx_joint = Tensor::empty(x.shape(), DType::F32);
    joint.backward(jc, dy, &dx_joint);

    split.forward(sc, x, y);
    WeightGradQueue queue;
    MicroBatchInfo mb;
    mb.weight_grads = &queue;
    Tensor dx_split = Tensor::empty(x.shape(), DType::F32);
    split.backward(sc, dy, &dx_split, &mb);
    expect_bitwise(dx_split, dx_joint, "input gradient");
    expect_zero(split_store.get("l.weight").grad, "weight gradient before W");
    ASSERT_EQ(queue.size(), 1u);
    ops::fill(x, 7.0f);  // the caller reuses its buffers before W
    ops::fill(dy, -3.0f);
    queue.drain();
    EXPECT_TRUE(queue.empty());
    for (const char* name : {"l.weight", "l.bias"})
      expect_bitwise(split_store.get(name).grad, joint_store.get(name).grad, name);
  }
}

// LoRA's adapter gradients (dB, dA) are deferred with the base's: the input gradient at once,
// every weight gradient bit for bit the joint backward's after W, also through the adapter's
// dropout (its input, rebuilt in a reused buffer, is copied for the W).
TEST(TensorParallelLayers, DeferredLoraGradientsEqualTheJointBackward) {
  const int tp = world().size();
  const int64_t S = 4 * tp, B = 3, in = 8 * tp, out = 4 * tp;
  for (const float dropout : {0.0f, 0.25f})
    for (const LayerCase c : {LayerCase{TPMode::Column, false}, LayerCase{TPMode::Column, true},
                              LayerCase{TPMode::Row, false}, LayerCase{TPMode::Row, true}}) {
      SCOPED_TRACE(
          concat(static_cast<int>(c.mode), c.sp ? " sequence-parallel" : "", " dropout ", dropout));
      const LoraSpec lora{.rank = 2, .alpha = 4.0f, .dropout = dropout, .seed = 5};
      ParamStore joint_store, split_store;
      Linear joint(joint_store, "l", in, out, false, c.mode, world(), 0.5f, Shape{}, c.sp, lora);
      Linear split(split_store, "l", in, out, false, c.mode, world(), 0.5f, Shape{}, c.sp, lora);
      for (ParamStore* s : {&joint_store, &split_store}) {
        s->finalize();
        s->initialize(3);
        // B starts at zero: give it values so that dA is not zero.
        Tensor& b = s->get("l.lora_b.weight").weight;
        for (int64_t i = 0; i < b.numel(); ++i)
          b.data<float>()[i] = 0.1f * static_cast<float>(i % 7);
      }
      auto [x, dy, y] = layer_tensors(c, tp, S, B, in, out);
      MicroBatchInfo joint_mb, split_mb;
      Linear::Ctx jc, sc;
      joint.forward(jc, x, y, &joint_mb);
      Tensor dx_joint = Tensor::empty(x.shape(), DType::F32);
      joint.backward(jc, dy, &dx_joint, &joint_mb);

      split.forward(sc, x, y, &split_mb);
      WeightGradQueue queue;
      split_mb.weight_grads = &queue;
      Tensor dx_split = Tensor::empty(x.shape(), DType::F32);
      split.backward(sc, dy, &dx_split, &split_mb);
      expect_bitwise(dx_split, dx_joint, "input gradient");
      for (const char* name : {"l.weight", "l.lora_a.weight", "l.lora_b.weight"})
        expect_zero(split_store.get(name).grad, concat(name, " before W"));
      ops::fill(x, 7.0f);  // the caller reuses its buffers before W
      ops::fill(dy, -3.0f);
      queue.drain();
      for (const char* name : {"l.weight", "l.lora_a.weight", "l.lora_b.weight"}) {
        EXPECT_GT(max_abs(joint_store.get(name).grad), 0.0) << name;
        expect_bitwise(split_store.get(name).grad, joint_store.get(name).grad, name);
      }
    }
}

TEST(TensorParallelLayers, DeferredEmbeddingGradientEqualsTheJointBackward) {
  const int tp = world().size();
  const int64_t S = 2 * tp, B = 3, V = 8 * tp, D = 5;
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence-parallel" : "plain");
    ParamStore joint_store, split_store;
    Embedding joint(joint_store, "e", V, D, world(), 1.0f, sp);
    Embedding split(split_store, "e", V, D, world(), 1.0f, sp);
    for (ParamStore* s : {&joint_store, &split_store}) {
      s->finalize();
      s->initialize(5);
    }
    Tensor ids = Tensor::empty({S, B}, DType::I32);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = (i * 7 + 3) % V;
    Embedding::Ctx jc, sc;
    Tensor y = Tensor::empty({sp ? S / tp : S, B, D}, DType::F32);
    joint.forward(jc, ids, y);
    split.forward(sc, ids, y);
    Tensor dy = random_tensor(y.shape(), 9);
    joint.backward(jc, dy);
    WeightGradQueue queue;
    MicroBatchInfo mb;
    mb.weight_grads = &queue;
    split.backward(sc, dy, &mb);
    expect_zero(split_store.get("e.weight").grad, "table gradient before W");
    ops::fill(dy, 5.0f);
    queue.drain();
    expect_bitwise(split_store.get("e.weight").grad, joint_store.get("e.weight").grad, "table");
  }
}

}  // namespace
}  // namespace megatron
