// Fully sharded units (megatron/distributed/fully_sharded.h) on one process, where the shard
// groups have one rank: ZeRO-3's gathers and ZeRO-2's reductions then copy, so the model must
// compute what it computes on a whole store (the loss exactly, the gradients up to the order of
// summing the tied table's two contributions), while the bookkeeping is observable: no
// weight or gradient is resident between steps, a step holds at most the unit in use, the one
// kept for the next use and the prefetched one, and from the second step on (the recorded order
// replayed) the next unit is already gathered when its forward starts.
#include <gtest/gtest.h>

#include <cmath>

#include "megatron/distributed/fully_sharded.h"
#include "models/gpt/gpt_model.h"
#include "tests/support/gpt_model_test_util.h"

namespace megatron::models {
namespace {

GPTSpec spec(int64_t unit_layers = 1) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 4;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 4;
  t.ffn = 24;
  t.seq_length = 6;
  t.init_std = 0.2f;
  t.unit_layers = unit_layers;
  s.vocab_size = 29;
  s.padded_vocab_size = padded_vocab(29, 8, 1);
  s.max_positions = 8;
  s.tie_embeddings = true;
  return s;
}

// Records how many units are gathered whenever one begins, around the real hooks.
class Watching final : public UnitHooks {
 public:
  explicit Watching(distributed::FullyShardedUnits& units) : units_(units) {}
  void before_forward(int64_t u) override {
    const int64_t before = units_.resident_units();
    units_.before_forward(u);
    record(before);
  }
  void after_forward(int64_t u) override { units_.after_forward(u); }
  void before_backward(int64_t u) override {
    const int64_t before = units_.resident_units();
    units_.before_backward(u);
    record(before);
  }
  void after_backward(int64_t u) override { units_.after_backward(u); }
  int64_t max_resident = 0;
  int64_t already_gathered = 0;  // acquisitions that found some unit gathered ahead
  int64_t acquisitions = 0;

 private:
  void record(int64_t before) {
    ++acquisitions;
    max_resident = std::max(max_resident, units_.resident_units());
    if (before > 0) ++already_gathered;
  }
  distributed::FullyShardedUnits& units_;
};

// One forward and backward; the summed loss.
double step(GPTModel& model, const MicroBatch& mb) {
  GPTModel::Activations act;
  const double loss = model.forward(act, mb).lm;
  model.backward(act, mb, LossWeights{0.1f, 0.0f});
  return loss;
}

std::vector<float> segment_grads(ParamStore& store) {
  std::vector<float> out;
  for (const ParamSegment& s : store.segments())
    out.insert(out.end(), s.grad.data<float>(), s.grad.data<float>() + s.size());
  return out;
}

TEST(FullyShardedUnits, SameResultsAndBoundedResidency) {
  auto tp = parallel::make_single_process_communicator();
  auto dp = parallel::make_single_process_communicator();
  const MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 7, MicroBatchInfo{0, 0, true});

  ParamStore whole;
  GPTModel reference(spec(), whole, *tp);
  whole.finalize();
  whole.initialize(42);
  whole.zero_grads();
  const double want = step(reference, mb);
  const std::vector<float> want_grads = segment_grads(whole);

  for (const auto& [weights, unit_layers] :
       {std::pair{false, 1}, std::pair{true, 1}, std::pair{true, 2}, std::pair{false, 3}}) {
    SCOPED_TRACE(std::string(weights ? "optim_grads_params" : "optim_grads") + ", " +
                 std::to_string(unit_layers) + " layers per unit");
    ParamStore store;
    GPTModel model(spec(unit_layers), store, *tp);
    DataParallelSharding sharding;
    sharding.optimizer = sharding.grads = true;
    sharding.weights = weights;
    store.finalize(DType::F32, sharding);
    store.initialize(42);
    // word, positions, the layers' units, head
    EXPECT_EQ(store.num_units(), 3 + (4 + unit_layers - 1) / unit_layers);
    distributed::FullyShardedUnits units(store, {dp.get(), dp.get(), nullptr});
    Watching watch(units);
    model.set_unit_hooks(&watch);
    for (int s = 0; s < 2; ++s) {
      store.zero_grads();
      watch.already_gathered = watch.acquisitions = 0;
      units.begin_step();
      const double got = step(model, mb);
      units.finish_step();
      EXPECT_EQ(got, want) << "step " << s;
      // The tied table's two contributions (head, then lookup) are summed in another order.
      const std::vector<float> got_grads = segment_grads(store);
      ASSERT_EQ(got_grads.size(), want_grads.size());
      for (size_t i = 0; i < got_grads.size(); ++i)
        ASSERT_NEAR(got_grads[i], want_grads[i], 1e-6f * (1.0f + std::abs(want_grads[i]))) << i;
      // Nothing stays gathered, and no parameter points at freed storage.
      EXPECT_EQ(units.resident_units(), 0);
      for (Parameter* p : store.params()) {
        EXPECT_FALSE(p->grad.defined() && p->grad.numel() > 1) << p->name;
        if (weights) {
          EXPECT_FALSE(p->weight.defined() && p->weight.numel() > 1) << p->name;
        }
      }
      if (weights) {
        EXPECT_LE(watch.max_resident, 3) << "step " << s;
        // A unit of several layers is announced once per pass, not per layer.
        EXPECT_LE(watch.acquisitions, 2 * store.num_units() + 2) << "step " << s;
        // Replayed order: most acquisitions find the next unit on its way already.
        if (s == 1) {
          EXPECT_GE(2 * watch.already_gathered, watch.acquisitions) << "step " << s;
        }
      }
    }
    // Payload: ZeRO-3 gathers every weight twice (forward, backward) and reduces every
    // gradient; ZeRO-2 only reduces.
    const int64_t bytes = units.take_bytes();
    EXPECT_GT(bytes, 0);
  }
}

}  // namespace
}  // namespace megatron::models
