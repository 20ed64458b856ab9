// mpirun-np: 2 4 8
// The schedules that split backwards into B and a deferred W (parallel.pipeline_schedule zb_h1,
// zb_v, dualpipe_v) reproduce the single-process loss curve over 20 steps in fp32 at pp 2, 4 and
// 8, alone and with tp + sp, dp under every sharding strategy (ZeRO-2/3 reduce-scatter after the
// last W), full recompute, MoE with expert parallelism, and in bf16; the runtime posts their
// messages in the simulated order. On one layout ZB-H1's losses and gradient norms equal 1F1B's
// bit for bit: a stage runs its W's in micro-batch order, so every gradient sums in the same
// order.
#include <filesystem>
#include <sstream>

#include "equivalence_fixture.h"
#include "megatron/pipeline/dualpipe_v.h"
#include "megatron/pipeline/zero_bubble.h"
#include "megatron/training/pipeline_runtime.h"
#include "models/registry.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

eq::RecipeSpec dense_model() {
  eq::RecipeSpec model;
  model.layers = 8;
  model.dropout = 0.1;
  model.seed = 21;
  return model;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{104729, 11, 7, 3});
}

TEST(ZeroBubbleH1, MatchesSingleProcess) {
  const std::string zb = "zb_h1";
  const std::vector<eq::Layout> layouts = {
      // 2 ranks
      {.pp = 2, .micro = 2, .schedule = zb},
      {.pp = 2, .micro = 1, .schedule = zb},
      {.pp = 2, .micro = 2, .recompute = "full", .schedule = zb},
      // 4 ranks
      {.pp = 4, .micro = 1, .schedule = zb},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true, .schedule = zb},
      {.pp = 2, .dp = 2, .micro = 1, .schedule = zb},
      {.pp = 2, .dp = 2, .micro = 2, .distributed = true, .schedule = zb},
      // ZeRO-2 and -3: the gradients reduce-scattered after the last W
      {.pp = 2, .dp = 2, .micro = 1, .sharding = "optim_grads", .schedule = zb},
      {.pp = 2, .dp = 2, .micro = 2, .sharding = "optim_grads_params", .schedule = zb},
      // 8 ranks
      {.pp = 8, .micro = 1, .schedule = zb},
      {.tp = 2, .pp = 2, .dp = 2, .micro = 1, .sp = true, .distributed = true, .schedule = zb},
  };
  EXPECT_GT(eq::expect_layouts_match(dense_model(), tokens(), layouts), 0)
      << "no layout for " << world().size() << " ranks";
  eq::report_max_diff("zb_h1 equivalence");
}

// The layouts of the V schedules (two chunks per stage in a V: stage 0 holds the embeddings and
// the tied head, stage pp - 1 hands its first chunk's output to its second by a copy), each with
// at least 2 pp micro-batches (DualPipeV's minimum): pp 2 and 4, recompute, tp + sp, dp under
// every sharding strategy.
std::vector<eq::Layout> v_layouts(const std::string& schedule) {
  return {
      // 2 ranks (4 and 8 micro-batches)
      {.pp = 2, .vpp = 2, .micro = 2, .schedule = schedule},
      {.pp = 2, .vpp = 2, .micro = 1, .recompute = "full", .schedule = schedule},
      // 4 ranks
      {.pp = 4, .vpp = 2, .micro = 1, .schedule = schedule},
      {.tp = 2, .pp = 2, .vpp = 2, .micro = 2, .sp = true, .schedule = schedule},
      {.pp = 2, .dp = 2, .vpp = 2, .micro = 1, .schedule = schedule},
      {.pp = 2, .dp = 2, .vpp = 2, .micro = 1, .distributed = true, .schedule = schedule},
      {.pp = 2, .dp = 2, .vpp = 2, .micro = 1, .sharding = "optim_grads", .schedule = schedule},
      {.pp = 2,
       .dp = 2,
       .vpp = 2,
       .micro = 1,
       .sharding = "optim_grads_params",
       .schedule = schedule},
      // 8 ranks
      {.tp = 2,
       .pp = 2,
       .dp = 2,
       .vpp = 2,
       .micro = 1,
       .sp = true,
       .distributed = true,
       .schedule = schedule},
  };
}

TEST(ZeroBubbleV, MatchesSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(dense_model(), tokens(), v_layouts("zb_v")), 0)
      << "no layout for " << world().size() << " ranks";
  eq::report_max_diff("zb_v equivalence");
}

// parallel.zero_bubble_pass_times: the trainer runs the lists its greedy makes on those times
// (other lists than with equal times), and they reproduce the single process too.
TEST(ZeroBubbleV, PlansOnTheRecipesPassTimes) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  eq::RecipeSpec spec =
      eq::Layout{.pp = 2, .vpp = 2, .micro = 1, .schedule = "zb_v"}.applied_to(dense_model());
  spec.parallel_extra = "zero_bubble_pass_times: [1.0, 3.0, 0.25]";
  const config::Recipe r = eq::make_recipe(spec);
  mp::MeshSizes sizes;
  sizes.pp = 2;
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  std::ostringstream log;
  training::Trainer trainer(r, eq::kVocab, tokens(), nullptr,
                            training::TrainerGroups::from_mesh(mesh), log);
  const auto planned = pipeline::zero_bubble_v(2, 8, {1.0, 3.0, 0.25});
  EXPECT_EQ(trainer.schedule_actions(), planned.ranks[static_cast<size_t>(world().rank())]);
  EXPECT_NE(planned.ranks, pipeline::zero_bubble_v(2, 8).ranks);
  eq::expect_same_curve(eq::train_on_world(r, tokens(), tokens()),
                        eq::train_single(eq::make_recipe(dense_model()), tokens(), tokens()), {});
}

// A ZB-V checkpoint (stage 0 saves the one tied table of its two chunks) loads into a single
// process, and a single process's into ZB-V; both continue on the uninterrupted curve.
TEST(ZeroBubbleV, CheckpointsLoadAcrossLayouts) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  const auto run = [&](bool zb_v, int64_t iters, const std::string& save, const std::string& load) {
    eq::RecipeSpec s = dense_model();
    s.micro = 2;
    s.iters = iters;
    s.eval_interval = 0;
    s.eval_iters = 0;
    s.dropout = 0;
    s.decay_iters = 10;
    s.save = save;
    s.load = load;
    if (zb_v) {
      s.pp = 2;
      s.vpp = 2;
      s.schedule = "zb_v";
    }
    const config::Recipe recipe = eq::make_recipe(s, "zb_v_checkpoint.yaml");
    return zb_v ? eq::train_on_world(recipe, tokens(), nullptr)
                : eq::train_single(recipe, tokens(), nullptr);
  };
  const auto reference = run(false, 10, "", "");
  const std::filesystem::path base = eq::shared_scratch_path("megatron_zb_v_ckpt_");
  for (const bool from_zb_v : {true, false}) {
    SCOPED_TRACE(from_zb_v ? "zb_v -> single" : "single -> zb_v");
    const std::string dir = (base / (from_zb_v ? "a" : "b")).string();
    if (from_zb_v) {
      run(true, 5, dir, "");
    } else {
      if (world().rank() == 0) run(false, 5, dir, "");
      world().barrier();
    }
    training::TrainSummary resumed;
    if (from_zb_v) {
      if (world().rank() == 0) resumed = run(false, 10, "", dir);
    } else {
      resumed = run(true, 10, "", dir);
    }
    if (world().rank() == 0 || !from_zb_v) {
      ASSERT_EQ(resumed.steps.size(), 5u);
      eq::expect_same_steps(resumed.steps, reference.steps, 5);
    }
    world().barrier();
  }
  if (world().rank() == 0) std::filesystem::remove_all(base);
}

TEST(ZeroBubbleH1, EqualsOneFOneBBitForBit) {
  const int n = world().size();
  eq::Layout layout = n == 2   ? eq::Layout{.pp = 2, .micro = 1}
                      : n == 4 ? eq::Layout{.tp = 2, .pp = 2, .micro = 1, .sp = true}
                               : eq::Layout{.tp = 2, .pp = 2, .dp = 2, .micro = 1, .sp = true};
  const auto one_f_one_b =
      eq::train_on_world(eq::make_recipe(layout.applied_to(dense_model())), tokens(), tokens());
  layout.schedule = "zb_h1";
  const auto zero_bubble =
      eq::train_on_world(eq::make_recipe(layout.applied_to(dense_model())), tokens(), tokens());
  ASSERT_EQ(zero_bubble.steps.size(), one_f_one_b.steps.size());
  for (size_t i = 0; i < one_f_one_b.steps.size(); ++i) {
    EXPECT_EQ(zero_bubble.steps[i].loss, one_f_one_b.steps[i].loss) << "step " << i;
    EXPECT_EQ(zero_bubble.steps[i].grad_norm, one_f_one_b.steps[i].grad_norm) << "step " << i;
  }
}

TEST(ZeroBubbleH1, MoeWithExpertParallelism) {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  m.model_extra =
      "num_experts: 4, moe_ffn_hidden_size: 24, moe_router_topk: 2, moe_aux_loss_coeff: 0.01";
  m.micro = 2;
  m.seed = 13;
  const std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2, .schedule = "zb_h1"},
      {.pp = 2, .dp = 2, .micro = 2, .ep = 2, .schedule = "zb_h1"},
  };
  const auto source = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  if (world().size() > 4) GTEST_SKIP() << "MoE zb_h1 layouts are for 2 and 4 ranks";
  EXPECT_GT(eq::expect_layouts_match(m, source, layouts), 0);
  eq::report_max_diff("zb_h1 moe");
}

TEST(ZeroBubbleH1, Bf16TracksSingleProcess) {
  eq::RecipeSpec m = dense_model();
  m.precision = "bf16";
  m.iters = 10;
  const std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2, .schedule = "zb_h1"},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true, .schedule = "zb_h1"},
  };
  if (world().size() > 4) GTEST_SKIP() << "bf16 zb_h1 layouts are for 2 and 4 ranks";
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts, eq::Tolerance{2e-3, 3e-2}), 0);
  eq::report_max_diff("zb_h1 bf16");
}

// LoRA (the frozen base has no W; the adapters' gradients come in B), BERT (its heads' weight
// gradients in B, the blocks' in W) and context parallelism under ZB-H1.
TEST(ZeroBubbleH1, LoraBertAndContextParallel) {
  if (world().size() > 4) GTEST_SKIP() << "these zb_h1 layouts are for 2 and 4 ranks";
  eq::RecipeSpec lora{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  lora.micro = 4;
  lora.seed = 17;
  lora.iters = 12;
  lora.lr = 0.02;
  lora.extra_sections = "peft: {type: lora, dim: 4, alpha: 8}\n";
  const auto llama_tokens = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(lora, llama_tokens,
                                     {{.pp = 2, .micro = 2, .schedule = "zb_h1"},
                                      {.tp = 2, .pp = 2, .micro = 2, .schedule = "zb_h1"}}),
            0);
  eq::RecipeSpec bert{.arch = "bert", .layers = 4, .dropout = 0.1};
  bert.micro = 4;
  bert.seed = 17;
  const auto bert_tokens = std::make_shared<eq::SyntheticBert>();
  EXPECT_GT(eq::expect_layouts_match(bert, bert_tokens,
                                     {{.pp = 2, .micro = 2, .schedule = "zb_h1"},
                                      {.pp = 4, .micro = 1, .schedule = "zb_h1"}}),
            0);
  eq::RecipeSpec cp = dense_model();
  cp.seq = 32;
  const auto cp_tokens =
      std::make_shared<eq::SyntheticTokens>(eq::TokenRule{104729, 11, 7, 3}, cp.seq);
  EXPECT_EQ(
      eq::expect_layouts_match(
          cp, cp_tokens, {{.pp = 2, .micro = 2, .cp = 2, .cp_comm = "p2p", .schedule = "zb_h1"}}),
      world().size() == 4 ? 1 : 0);
  eq::report_max_diff("zb_h1 lora, bert, context parallel");
}

// Multi-latent attention: its five projections' weight gradients read the layer's states in place.
TEST(ZeroBubbleH1, MultiLatentAttention) {
  if (world().size() > 4) GTEST_SKIP() << "these zb_h1 layouts are for 2 and 4 ranks";
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .ffn = 48};
  m.model_extra =
      "multi_latent_attention: true, q_lora_rank: 12, kv_lora_rank: 8, qk_head_dim: 8, "
      "qk_pos_emb_head_dim: 4, v_head_dim: 6, layernorm_epsilon: 1.0e-6";
  m.micro = 4;
  m.iters = 10;
  m.seed = 31;
  m.lr = 0.01;
  const auto source = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(
                m, source,
                {{.pp = 2, .micro = 2, .schedule = "zb_h1"},
                 {.pp = 2, .vpp = 2, .micro = 2, .recompute = "full", .schedule = "zb_v"},
                 {.tp = 2, .pp = 2, .micro = 2, .sp = true, .schedule = "zb_h1"}}),
            0);
  eq::report_max_diff("zb mla");
}

// Forwards everything to `inner` and records each posted send and receive (kind, peer, tag) in
// posting order.
class RecordingCommunicator final : public mp::Communicator {
 public:
  explicit RecordingCommunicator(mp::Communicator& inner) : inner_(inner) {}
  struct Posted {
    mp::P2POp::Kind kind;
    int peer, tag;
    bool operator==(const Posted&) const = default;
  };
  std::vector<Posted> posted;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  int world_rank_of(int r) const override { return inner_.world_rank_of(r); }
  void all_reduce(Tensor& t, mp::ReduceOp op) override { inner_.all_reduce(t, op); }
  std::unique_ptr<mp::Work> all_reduce_async(Tensor& t, mp::ReduceOp op) override {
    return inner_.all_reduce_async(t, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override { inner_.all_gather(in, out); }
  std::unique_ptr<mp::Work> all_gather_async(const Tensor& in, Tensor& out) override {
    return inner_.all_gather_async(in, out);
  }
  void reduce_scatter(const Tensor& in, Tensor& out, mp::ReduceOp op) override {
    inner_.reduce_scatter(in, out, op);
  }
  std::unique_ptr<mp::Work> reduce_scatter_async(const Tensor& in, Tensor& out,
                                                 mp::ReduceOp op) override {
    return inner_.reduce_scatter_async(in, out, op);
  }
  void broadcast(Tensor& t, int root) override { inner_.broadcast(t, root); }
  void barrier() override { inner_.barrier(); }
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    inner_.all_to_all(in, send_counts, out, recv_counts);
  }
  std::unique_ptr<mp::Work> batch_isend_irecv(std::vector<mp::P2POp> ops) override {
    for (const mp::P2POp& op : ops) posted.push_back({op.kind, op.peer, op.tag});
    return inner_.batch_isend_irecv(std::move(ops));
  }

 private:
  mp::Communicator& inner_;
};

// The runtime posts a schedule's sends and receives in the order of its list (what the simulator
// checked), every send without waiting for its receive.
void expect_runtime_posts_in_order(const eq::Layout& layout, const pipeline::Schedule& schedule) {
  const int pp = world().size(), stage = world().rank(), m = schedule.microbatches;
  const config::Recipe r = eq::make_recipe(layout.applied_to(dense_model()));
  RecordingCommunicator rec(world());
  auto self = mp::make_single_process_communicator();
  ParamStore store;
  const models::ModelChunks model =
      models::build_model_chunks(r, eq::kVocab, store, *self, stage, pp);
  store.finalize();
  store.initialize(3);
  std::vector<const models::Model*> chunks;
  for (const auto& c : model.chunks) chunks.push_back(c.get());
  training::PipelineRuntime runtime(chunks, rec, r.model.seq_length, r.model.hidden_size);
  runtime.set_buffered_sends(schedule.buffered_sends);
  runtime.set_placement(schedule.placement);
  const auto fill = [&](int mb, models::MicroBatch& out) {
    const int64_t S = r.model.seq_length, B = 2;
    out.tokens = Tensor::empty({S, B}, DType::I32);
    out.labels = Tensor::empty({S, B}, DType::I32);
    for (int64_t i = 0; i < S * B; ++i) {
      out.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + mb) % eq::kVocab);
      out.labels.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + mb + 1) % eq::kVocab);
    }
    out.info.microbatch = mb;
  };
  const auto& actions = schedule.ranks[static_cast<size_t>(stage)];
  runtime.run(actions, fill, {1.0f / static_cast<float>(m * 32), 0.0f}, nullptr);
  std::vector<RecordingCommunicator::Posted> want;
  for (const pipeline::Action& a : actions)
    if (!pipeline::is_compute(a.kind))
      want.push_back({pipeline::is_send(a.kind) ? mp::P2POp::Send : mp::P2POp::Recv, a.peer_stage,
                      pipeline::p2p_tag(a.kind)});
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(rec.posted, want);
  // Every weight gradient ran: the store's gradients are not all zero.
  double norm = 0;
  for (Parameter* p : store.params())
    for (int64_t i = 0; i < p->grad.numel(); ++i) norm += std::abs(p->grad.data<float>()[i]);
  EXPECT_GT(norm, 0.0);
}

TEST(ZeroBubbleH1, RuntimePostsTheSimulatedMessagesInOrder) {
  const int pp = world().size();
  expect_runtime_posts_in_order({.pp = pp, .micro = 2, .schedule = "zb_h1"},
                                pipeline::zero_bubble_h1(pp, 6));
}

TEST(DualPipeV, RuntimePostsTheSimulatedMessagesInOrder) {
  const int pp = world().size();
  if (pp > 4) GTEST_SKIP() << "8 layers make at most 4 stages of two chunks";
  expect_runtime_posts_in_order({.pp = pp, .vpp = 2, .micro = 2, .schedule = "dualpipe_v"},
                                pipeline::dualpipe_v(pp, 2 * pp + 2));
}

// DualPipeV (pipeline/dualpipe_v.h): the V placement of ZB-V, whole backwards in its middle
// phases and split ones at its ends, 2 pp micro-batches or more.
TEST(DualPipeV, MatchesSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(dense_model(), tokens(), v_layouts("dualpipe_v")), 0)
      << "no layout for " << world().size() << " ranks";
  eq::report_max_diff("dualpipe_v equivalence");
}

TEST(DualPipeV, MoeWithExpertParallelismAndBf16) {
  if (world().size() > 4) GTEST_SKIP() << "these dualpipe_v layouts are for 2 and 4 ranks";
  eq::RecipeSpec moe{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  moe.model_extra =
      "num_experts: 4, moe_ffn_hidden_size: 24, moe_router_topk: 2, moe_aux_loss_coeff: 0.01";
  // One sequence per micro-batch everywhere: the balancing loss is a per-micro-batch statistic.
  moe.micro = 1;
  moe.seed = 13;
  const auto source = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(
                moe, source,
                {{.pp = 2, .vpp = 2, .micro = 1, .schedule = "dualpipe_v"},
                 {.pp = 2, .dp = 2, .vpp = 2, .micro = 1, .ep = 2, .schedule = "dualpipe_v"}}),
            0);
  eq::RecipeSpec bf16 = dense_model();
  bf16.precision = "bf16";
  bf16.iters = 10;
  EXPECT_GT(eq::expect_layouts_match(
                bf16, tokens(),
                {{.pp = 2, .vpp = 2, .micro = 2, .schedule = "dualpipe_v"},
                 {.tp = 2, .pp = 2, .vpp = 2, .micro = 2, .sp = true, .schedule = "dualpipe_v"}},
                eq::Tolerance{2e-3, 3e-2}),
            0);
  eq::report_max_diff("dualpipe_v moe, bf16");
}

}  // namespace
}  // namespace megatron
