// mpirun-np: 2
// BERT under tensor parallelism, with and without sequence parallelism (and with dropout on),
// also split into two pipeline stages: the same losses, per-token losses and gradients (each
// shard, partial gradients summed over tp as the trainer does) as the single-process model on
// the same padded batch.
#include <algorithm>
#include <cmath>
#include <random>

#include "megatron/backend/ops.h"
#include "models/bert/bert_model.h"
#include "parallel_test.h"

namespace megatron::models {
namespace {

namespace mp = megatron::parallel;
using mp::testing::world;

constexpr int64_t kVocab = 29, kPaddedVocab = 32, kSeq = 8, kBatch = 3;

BertSpec spec_for(bool sp, float dropout) {
  BertSpec s = make_bert_spec(2, 16, 4, 24, kSeq, 10, kVocab, kPaddedVocab, true, dropout, dropout);
  s.transformer.init_std = 0.2f;
  s.transformer.norm_eps = 1e-5f;
  s.transformer.sequence_parallel = sp;
  return s;
}

// The same batch on every rank: samples padded to different lengths, two segments.
MicroBatch batch() {
  std::mt19937 rng(17);
  MicroBatch mb;
  mb.tokens = Tensor::empty({kSeq, kBatch}, DType::I32);
  mb.labels = Tensor::empty({kSeq, kBatch}, DType::I32);
  mb.token_types = Tensor::empty({kSeq, kBatch}, DType::I32);
  mb.padding_mask = Tensor::empty({kBatch, kSeq}, DType::U8);
  mb.nsp_labels = Tensor::empty({kBatch}, DType::I32);
  for (int64_t b = 0; b < kBatch; ++b) {
    const int64_t len = kSeq - 3 * b;
    for (int64_t s = 0; s < kSeq; ++s) {
      const int64_t i = s * kBatch + b;
      mb.tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % kVocab);
      mb.labels.data<int32_t>()[i] =
          s < len && rng() % 2 == 0 ? static_cast<int32_t>(rng() % kVocab) : kIgnoreIndex;
      mb.token_types.data<int32_t>()[i] = s < len && s >= len / 2 ? 1 : 0;
      mb.padding_mask.data<uint8_t>()[b * kSeq + s] = s < len ? 1 : 0;
    }
    mb.nsp_labels.data<int32_t>()[b] = static_cast<int32_t>(b % 2);
  }
  mb.info = MicroBatchInfo{2, 4, true};
  return mb;
}

// Biases and norms start at 0 / 1: move them by a function of the global element, so every
// layout holds the same values.
void perturb(ParamStore& store) {
  for (Parameter* p : store.params())
    if (p->init.kind != ParamInit::Kind::Normal)
      for (int64_t i = 0; i < p->weight.numel(); ++i)
        p->weight.data<float>()[i] +=
            0.3f * std::sin(0.7f * static_cast<float>(p->global_index(i)) +
                            static_cast<float>(name_hash(p->name) % 100));
}

void expect_close(float got, float want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-5f + 2e-4f * std::abs(want)) << what;
}

// Sums the sequence-parallel partial gradients over tp (as the trainer does before the step).
void sum_partial_grads(ParamStore& store) {
  for (Parameter* p : store.params())
    if (p->tp_partial_grad) world().all_reduce(p->grad, mp::ReduceOp::Sum);
}

// Every local gradient element equals the single-process gradient at its global index.
void expect_grads_match(ParamStore& sharded, ParamStore& full, const std::string& what) {
  for (Parameter* p : sharded.params()) {
    Parameter& f = full.get(p->name);
    for (int64_t i = 0; i < p->grad.numel(); ++i)
      expect_close(p->grad.data<float>()[i], f.grad.data<float>()[p->global_index(i)],
                   what + p->name + " local element " + std::to_string(i));
  }
}

TEST(BertTensorParallel, MatchesSingleProcess) {
  auto self = mp::make_single_process_communicator();
  const MicroBatch mb = batch();
  const LossWeights weights{1.0f / 11.0f, 0.6f};
  for (const bool sp : {false, true})
    for (const float dropout : {0.0f, 0.1f}) {
      SCOPED_TRACE(std::string(sp ? "sequence-parallel" : "tensor-parallel") +
                   (dropout > 0 ? " with dropout" : ""));
      const BertSpec spec = spec_for(sp, dropout);
      ParamStore full_store, tp_store;
      BertModel full(spec, full_store, *self);
      BertModel split(spec, tp_store, world());
      for (ParamStore* s : {&full_store, &tp_store}) {
        s->finalize();
        s->initialize(5);
        perturb(*s);
        s->zero_grads();
      }
      auto full_act = full.make_activations(), tp_act = split.make_activations();
      const LossSums want = full.forward(*full_act, mb);
      full.backward(*full_act, mb, weights);
      const LossSums got = split.forward(*tp_act, mb);
      split.backward(*tp_act, mb, weights);

      sum_partial_grads(tp_store);
      const std::vector<Parameter*> params = tp_store.params();
      EXPECT_EQ(std::any_of(params.begin(), params.end(),
                            [](const Parameter* p) { return p->tp_partial_grad; }),
                sp);

      EXPECT_NEAR(got.lm, want.lm, 1e-5 * want.lm);
      EXPECT_NEAR(got.aux, want.aux, 1e-5 * want.aux);
      const Tensor& tl = split.token_losses(*tp_act);
      const Tensor& fl = full.token_losses(*full_act);
      ASSERT_EQ(tl.numel(), fl.numel());
      for (int64_t i = 0; i < tl.numel(); ++i)
        if (mb.labels.data<int32_t>()[i] != kIgnoreIndex)
          expect_close(tl.data<float>()[i], fl.data<float>()[i], "token loss");
      expect_grads_match(tp_store, full_store, "");
    }
}

// Two pipeline stages, each tensor- and sequence-parallel, passing [S/tp, B, D] slices: the
// same losses and gradients as the single-process whole model (the tied word-embedding copies'
// gradients summed, as over the embedding group).
TEST(BertTensorParallel, PipelineStagesMatchSingleProcess) {
  auto self = mp::make_single_process_communicator();
  const MicroBatch mb = batch();
  const LossWeights weights{0.2f, 0.9f};
  const BertSpec spec = spec_for(true, 0.1f);
  ParamStore full_store, first_store, last_store;
  BertModel full(spec, full_store, *self);
  BertModel first(spec, first_store, world(), ModelStage{0, 1, true, false});
  BertModel last(spec, last_store, world(), ModelStage{1, 1, false, true});
  for (ParamStore* s : {&full_store, &first_store, &last_store}) {
    s->finalize();
    s->initialize(8);
    perturb(*s);
    s->zero_grads();
  }
  auto full_act = full.make_activations();
  const LossSums want = full.forward(*full_act, mb);
  full.backward(*full_act, mb, weights);

  auto a1 = first.make_activations(), a2 = last.make_activations();
  first.forward(*a1, mb);
  const Tensor boundary = first.output(*a1).clone();
  ASSERT_EQ(boundary.dim(0), kSeq / world().size());
  const LossSums got = last.forward(*a2, mb, &boundary);
  Tensor d_boundary = Tensor::empty(boundary.shape(), DType::F32);
  last.backward(*a2, mb, weights, {}, nullptr, &d_boundary);
  first.backward(*a1, mb, weights, {}, &d_boundary);
  // The embedding-group sum of the tied table, here within one process.
  ops::add_inplace(first.word_embeddings()->grad, last.word_embeddings()->grad);
  last.word_embeddings()->grad.copy_from(first.word_embeddings()->grad);
  sum_partial_grads(first_store);
  sum_partial_grads(last_store);

  EXPECT_NEAR(got.lm, want.lm, 1e-5 * want.lm);
  EXPECT_NEAR(got.aux, want.aux, 1e-5 * want.aux);
  expect_grads_match(first_store, full_store, "first stage: ");
  expect_grads_match(last_store, full_store, "last stage: ");
}

}  // namespace
}  // namespace megatron::models
