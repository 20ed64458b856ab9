// The planner (megatron/planning/planner.h): parameter counts against the real model (whole and
// tp/pp shards), FLOPs against the trainer, the layout search, and shipped recipes on their
// documented clusters. The memory prediction, a hand-checked breakdown and the pipeline in-flight
// count: test_planner_memory.cpp; the CLI: test_planner_cli.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>

#include "data/tokenizer.h"
#include "megatron/planning/flops.h"
#include "megatron/planning/planner.h"
#include "megatron/training/trainer.h"
#include "models/bert/bert_model.h"
#include "models/registry.h"
#include "tests/support/planner_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

using planning::ClusterSpec;
using planning::Layout;
using planning::PlanReport;
using planning::testing::CountingSource;
using planning::testing::gpt_small;
using planning::testing::llama_small;
using planning::testing::one_device;
using planning::testing::recipe_from;
using planning::testing::ShapeOnlyComm;
using ::testing::HasSubstr;

// ---- (a) parameter counts against the real model ---------------------------------------------

// Builds the model pieces a (tp rank, pipeline stage) holds and returns their parameter count.
int64_t real_stage_numel(const config::Recipe& r, int64_t vocab, int tp, int tp_rank, int pp,
                         int stage) {
  ShapeOnlyComm comm(tp_rank, tp);
  const models::GPTSpec spec = models::gpt_spec_from_recipe(r, vocab, tp);
  const auto counts = planning::virtual_stage_layers(r, pp, 1);
  models::GPTStage st;
  for (int i = 0; i < stage; ++i) st.first_layer += counts[static_cast<size_t>(i)];
  st.num_layers = counts[static_cast<size_t>(stage)];
  st.pre_process = stage == 0;
  st.post_process = stage == pp - 1;
  ParamStore store;
  models::GPTModel model(spec, store, comm, st);
  store.finalize();
  return store.numel();
}

TEST(PlannerParams, WholeModelMatchesParamStore) {
  for (const config::Recipe& r : {gpt_small(), llama_small()}) {
    const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, 1);
    const int64_t real = real_stage_numel(r, r.model.vocab_size, 1, 0, 1, 0);
    EXPECT_EQ(planning::count_parameters(r.model, V).total, real)
        << config::option_name(r.model.arch);
    EXPECT_EQ(planning::stage_parameters(r, V, Layout{}, 0), real)
        << config::option_name(r.model.arch);
  }
}

// Every stage and tp rank of each (tp, pp) layout: the planner's count = the model's numel
// (layouts whose tp does not divide the query groups are skipped).
void expect_stages_match_the_model(config::Recipe r,
                                   const std::vector<std::pair<int, int>>& layouts) {
  for (auto [tp, pp] : layouts) {
    if (r.model.query_groups() % tp != 0) continue;
    r.parallel.tensor = tp;
    r.parallel.pipeline = pp;
    Layout lay;
    lay.tp = tp;
    lay.pp = pp;
    const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, tp);
    for (int stage = 0; stage < pp; ++stage)
      for (int rank = 0; rank < tp; ++rank)
        EXPECT_EQ(planning::stage_parameters(r, V, lay, stage),
                  real_stage_numel(r, r.model.vocab_size, tp, rank, pp, stage))
            << "tp" << tp << " pp" << pp << " stage " << stage << " rank " << rank;
  }
}

TEST(PlannerParams, TensorAndPipelineShardsMatchTheModel) {
  for (config::Recipe r : {gpt_small(), llama_small()}) {
    SCOPED_TRACE(config::option_name(r.model.arch));
    expect_stages_match_the_model(r, {{2, 2}, {4, 1}, {1, 4}, {2, 4}});
  }
}

// GPT-OSS's blocks: learned attention sinks (a logit per head, split over tp) and, with experts,
// the router's and the experts' biases.
TEST(PlannerParams, GptOssBlocksMatchTheModel) {
  config::Recipe r = llama_small();
  r.model.softmax_type = config::SoftmaxType::Learnable;
  r.model.add_bias = r.model.add_qkv_bias = true;
  r.model.activation = config::Activation::QuickGeGLU;
  r.model.glu_linear_offset = 1.0;
  r.model.activation_func_clamp_value = 7.0;
  expect_stages_match_the_model(r, {{1, 1}, {2, 2}, {1, 4}});
}

// Multi-latent attention: the replicated down projections and latent norms, the head-split up
// projections (with and without the query low-rank path); its FLOPs by Megatron's MLA formula.
TEST(PlannerParams, MultiLatentAttentionMatchesTheModel) {
  for (int64_t q_lora : {0, 24}) {
    config::Recipe r = llama_small();
    r.model.num_query_groups = 0;
    r.model.mla = {true, q_lora, 16, 8, 4, 6};
    r.validate();
    SCOPED_TRACE(q_lora);
    expect_stages_match_the_model(r, {{1, 1}, {2, 2}, {4, 1}});
  }
  config::Recipe r = llama_small();
  r.model.num_query_groups = 0;
  r.model.mla = {true, 24, 16, 8, 4, 6};
  planning::FlopsModel f = planning::flops_model_from_spec(
      models::transformer_spec_from_recipe(r, 1), r.model.padded_vocab_size(r.model.vocab_size, 1));
  const double h = double(r.model.hidden_size), H = double(r.model.num_attention_heads),
               S = double(r.model.seq_length), L = double(r.model.num_layers);
  const double attention = 6 * (24 * (h + H * 12 + 1) + 16 * (h + H * 14 + 1) + h * 4 + H * 6 * h +
                                S * H * 12 / 2 + S * H * 6 / 2);
  f.mla = {};
  const double dense = planning::megatron_flops_per_step(f, 2);
  f.mla = {24, 16, 8, 4, 6};
  const double dense_attention =
      12 * 2 * S * L * h * h * (1 + 1 + S / h) * (H * 12 / h);  // (G = H, head_dim 12)
  EXPECT_NEAR(planning::megatron_flops_per_step(f, 2),
              dense - dense_attention + 2 * S * L * attention, 1e-9 * dense);
}

// MoE: the router, this rank's E / ep experts (split over tp or whole), the shared expert, dense
// layers where moe_layer_freq says so; the model the registry builds is the reference.
TEST(PlannerParams, MixtureOfExpertsShardsMatchTheModel) {
  config::Recipe r = llama_small();
  r.model.moe.num_experts = 4;
  r.model.moe.moe_ffn_hidden_size = 32;
  r.model.moe.moe_router_topk = 2;
  r.model.moe.moe_shared_expert_intermediate_size = 16;
  r.model.moe.moe_shared_expert_gate = true;
  r.model.moe.moe_layer_freq.every = 2;
  // etp 1: whole experts under tp (expert_tensor 1, ep folded over tp x dp), built with an
  // expert tp group of one; etp 0: the experts split over tp. add_bias: the router's and the
  // experts' biases too (GPT-OSS's).
  for (auto [tp, pp, ep, etp, bias] : {std::tuple{1, 1, 1, 0, false},
                                       {2, 1, 2, 0, false},
                                       {1, 2, 4, 0, false},
                                       {2, 2, 2, 0, false},
                                       {2, 1, 2, 1, false},
                                       {2, 2, 4, 1, false},
                                       {2, 1, 1, 1, false},
                                       {1, 1, 1, 0, true},
                                       {2, 1, 2, 0, true},
                                       {2, 2, 4, 1, true}}) {
    r.model.add_bias = bias;
    r.parallel.tensor = tp;
    r.parallel.pipeline = pp;
    r.parallel.expert_tensor = etp;
    r.parallel.sequence_parallel = etp == 1;
    Layout lay;
    lay.tp = tp;
    lay.pp = pp;
    lay.ep = ep;
    lay.etp = etp;
    const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, tp);
    for (int stage = 0; stage < pp; ++stage)
      for (int e = 0; e < ep; ++e) {
        ShapeOnlyComm tp_comm(etp == 1 ? e % tp : 0, tp), ep_comm(e, ep), etp_comm(0, 1);
        ParamStore store;
        const auto chunks =
            models::build_model_chunks(r, r.model.vocab_size, store, tp_comm, stage, pp,
                                       {&ep_comm, etp == 1 ? &etp_comm : nullptr});
        store.finalize();
        EXPECT_EQ(planning::stage_parameters(r, V, lay, stage), store.numel())
            << "tp" << tp << " pp" << pp << " ep" << ep << " etp" << etp << " bias " << bias
            << " stage " << stage;
      }
  }
  r.parallel.expert_tensor = 0;
  r.parallel.sequence_parallel = false;
  r.model.add_bias = false;
  // Active parameters: the whole model less, per MoE layer, the experts a token skips.
  const planning::ParamCounts c =
      planning::count_parameters(r.model, r.model.padded_vocab_size(r.model.vocab_size, 1));
  const int64_t D = r.model.hidden_size, expert = (2 * 32 + 32) * D;  // SwiGLU: [2F, D] + [D, F]
  const int64_t moe_layers = (r.model.num_layers + 1) / 2;
  EXPECT_EQ(c.experts, moe_layers * 4 * expert);
  EXPECT_EQ(c.active, c.total - moe_layers * 2 * expert);
}

TEST(PlannerParams, BertMatchesTheModel) {
  // Post-LN encoder: token-type embeddings + embedding norm on the first stage; MLM head (dense,
  // norm, vocab-parallel bias, tied decoder), pooler and sentence-pair head on the last.
  config::Recipe r = recipe_from(
      "arch: bert, num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, "
      "max_position_embeddings: 40, vocab_size: 1000",
      "micro_batch_size: 2, global_batch_size: 4, train_iters: 1");
  for (auto [tp, pp, nsp] : {std::tuple{1, 1, true},
                             {2, 1, true},
                             {2, 2, true},
                             {1, 4, true},
                             {1, 1, false},
                             {2, 2, false}}) {
    const int64_t V = r.model.padded_vocab_size(1000, tp);
    const models::BertSpec spec = models::make_bert_spec(4, 64, 4, 256, 32, 40, 1000, V, nsp);
    r.data.bert_binary_head = nsp;
    r.parallel.tensor = tp;
    r.parallel.pipeline = pp;
    Layout lay;
    lay.tp = tp;
    lay.pp = pp;
    int64_t whole = 0;
    for (int stage = 0; stage < pp; ++stage) {
      ShapeOnlyComm comm(0, tp);
      models::ModelStage st;
      st.first_layer = stage * (4 / pp);
      st.num_layers = 4 / pp;
      st.pre_process = stage == 0;
      st.post_process = stage == pp - 1;
      ParamStore store;
      models::BertModel model(spec, store, comm, st);
      store.finalize();
      EXPECT_EQ(planning::stage_parameters(r, V, lay, stage), store.numel())
          << "tp" << tp << " pp" << pp << " stage " << stage << " nsp " << nsp;
      whole += store.numel();
    }
    if (tp == 1 && pp == 1) {
      EXPECT_EQ(planning::count_parameters(r.model, V, nsp).total, whole);
    }
  }
}

// model.kv_channels (48, not 256 / 8 = 32): QKV (H + 2G) d x h and output h x H d, split over tp.
TEST(PlannerParams, KvChannelsMatchTheModel) {
  config::Recipe r = llama_small();
  r.model.kv_channels = 48;
  const int64_t V1 = r.model.padded_vocab_size(r.model.vocab_size, 1);
  const int64_t whole = real_stage_numel(r, r.model.vocab_size, 1, 0, 1, 0);
  EXPECT_EQ(planning::count_parameters(r.model, V1).total, whole);
  const int64_t D = 256, H = 8, G = 2, d = 48;
  EXPECT_EQ(planning::count_parameters(r.model, V1).per_layer,
            (H + 2 * G) * d * D + D * H * d + 3 * 704 * D + 2 * D);
  expect_stages_match_the_model(r, {{2, 1}, {2, 2}, {1, 4}});
}

TEST(PlannerParams, UnevenPipelineLayers) {
  config::Recipe r = gpt_small();
  r.parallel.pipeline = 2;
  r.parallel.pipeline_layers = {3, 1};
  Layout lay;
  lay.pp = 2;
  const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, 1);
  for (int stage = 0; stage < 2; ++stage)
    EXPECT_EQ(planning::stage_parameters(r, V, lay, stage),
              real_stage_numel(r, r.model.vocab_size, 1, 0, 2, stage));
}

TEST(PlannerParams, KnownModelSizes) {
  // GPT-2 small: 124,475,904 parameters with the 50304-row padded table (nanoGPT counts
  // 124.44M with 50257 rows).
  config::Recipe g =
      recipe_from("num_layers: 12, hidden_size: 768, num_attention_heads: 12, seq_length: 1024",
                  "micro_batch_size: 1, "
                  "global_batch_size: 1, train_iters: 1");
  EXPECT_EQ(planning::count_parameters(g.model, 50304).total, 124475904);
  // LLaMA-2 7B: 6,738,415,616.
  config::Recipe l = recipe_from(
      "arch: llama, num_layers: 32, hidden_size: 4096, num_attention_heads: 32, "
      "ffn_hidden_size: 11008, seq_length: 4096, normalization: rmsnorm, activation: swiglu, "
      "position_embedding: rope, tie_embeddings: false, add_bias: false",
      "micro_batch_size: 1, global_batch_size: 1, train_iters: 1");
  EXPECT_EQ(planning::count_parameters(l.model, 32000).total, 6738415616);
  // Mistral-NeMo 12B (head_dim 128 with hidden 5120 and 32 heads): 12,247,782,400.
  config::Recipe nemo = recipe_from(
      "arch: llama, num_layers: 40, hidden_size: 5120, num_attention_heads: 32, "
      "num_query_groups: 8, kv_channels: 128, ffn_hidden_size: 14336, seq_length: 4096, "
      "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "tie_embeddings: false, add_bias: false",
      "micro_batch_size: 1, global_batch_size: 1, train_iters: 1");
  EXPECT_EQ(planning::count_parameters(nemo.model, 131072).total, 12247782400);
}

// ---- (b) FLOPs against the trainer -------------------------------------------------------------

TEST(PlannerFlops, EqualTheTrainers) {
  for (const config::Recipe& r : {gpt_small(), llama_small()}) {
    auto src = std::make_shared<CountingSource>(r.model.seq_length, r.model.vocab_size);
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(r, r.model.vocab_size, src, src, *world, log);
    const PlanReport p = planning::plan(r, one_device(), r.model.vocab_size);
    EXPECT_DOUBLE_EQ(p.flops_per_step, t.flops_per_step()) << config::option_name(r.model.arch);
    EXPECT_EQ(p.flops_per_step, p.hardware_flops_per_step);
  }
}

// Megatron's formula with query_projection_size = kv_channels * heads (4096 for Mistral-NeMo's
// hidden 5120): 12 B S L h^2 ((1 + G/H + S/h) q/h + F/h * 3/2 + V / (2 L h)).
TEST(PlannerFlops, KvChannelsScaleTheAttentionTerm) {
  config::Recipe r = recipe_from(
      "arch: llama, num_layers: 40, hidden_size: 5120, num_attention_heads: 32, "
      "num_query_groups: 8, kv_channels: 128, ffn_hidden_size: 14336, seq_length: 4096, "
      "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "tie_embeddings: false, add_bias: false",
      "micro_batch_size: 1, global_batch_size: 2, train_iters: 1");
  const double by_hand = 12.0 * 2 * 4096 * 40 * 5120.0 * 5120.0 *
                         ((1 + 8.0 / 32 + 4096.0 / 5120) * (4096.0 / 5120) + 14336.0 / 5120 * 1.5 +
                          131072.0 / (2 * 40 * 5120.0));
  const double got = planning::megatron_flops_per_step(
      planning::flops_model_from_spec(models::transformer_spec_from_model(r.model), 131072), 2);
  EXPECT_NEAR(got / by_hand, 1.0, 1e-12);
}

TEST(PlannerFlops, RecomputeAddsHardwareFlops) {
  config::Recipe r = gpt_small(", device: cuda");
  const double base = planning::plan(r, one_device(), 8000).flops_per_step;
  r.training.recompute = config::RecomputeGranularity::Full;
  const PlanReport full = planning::plan(r, one_device(), 8000);
  EXPECT_EQ(full.flops_per_step, base);
  EXPECT_GT(full.hardware_flops_per_step, base * 1.2);
  EXPECT_LT(full.hardware_flops_per_step, base * 4.0 / 3.0);
  r.training.recompute = config::RecomputeGranularity::Selective;
  const PlanReport sel = planning::plan(r, one_device(), 8000);
  // + the attention core forward: 4 B S^2 L H d.
  EXPECT_DOUBLE_EQ(sel.hardware_flops_per_step - base,
                   4.0 * static_cast<double>(r.training.global_batch_size) * 128 * 128 * 4 * 256);
}

// ---- (e) search and large models ---------------------------------------------------------------

config::Recipe gpt_large(int64_t layers, int64_t hidden, int64_t heads, int64_t global) {
  return recipe_from("num_layers: " + std::to_string(layers) +
                         ", hidden_size: " + std::to_string(hidden) +
                         ", num_attention_heads: " + std::to_string(heads) +
                         ", seq_length: 2048, hidden_dropout: 0.1, attention_dropout: 0.1",
                     "device: cuda, precision: bf16, micro_batch_size: 1, global_batch_size: " +
                         std::to_string(global) + ", train_iters: 1");
}

ClusterSpec h100s(int64_t nodes) {
  ClusterSpec c;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.gpu_memory_bytes = 80e9;
  c.gpu_tflops = 989;
  return c;
}

TEST(PlannerSearch, Gpt13bOnFourNodes) {
  const config::Recipe r = gpt_large(40, 5120, 40, 512);
  const auto result = planning::search(r, h100s(4), 50257);
  ASSERT_FALSE(result.fitting.empty());
  EXPECT_GT(result.too_big, 0);
  EXPECT_EQ(result.candidates, result.too_big + static_cast<int64_t>(result.fitting.size()));
  bool known_good = false;
  for (size_t i = 0; i < result.fitting.size(); ++i) {
    const PlanReport& p = result.fitting[i];
    EXPECT_TRUE(p.fits);
    EXPECT_LE(p.memory().total, 80e9);
    EXPECT_EQ(p.layout.tp * p.layout.pp * p.layout.dp, 32);  // seq 2048: too short for cp
    EXPECT_EQ(p.layout.micro_batch * p.layout.num_microbatches * p.layout.dp, 512);
    if (i > 0) {
      EXPECT_GE(p.time.step, result.fitting[i - 1].time.step);
    }
    // ZeRO-3 gathers every weight twice per micro-batch: at micro-batch 1 over the 50 GB/s
    // inter-node links it is communication-bound (still above 5%).
    EXPECT_GT(p.time.mfu,
              p.layout.sharding == config::ShardingStrategy::OptimGradsParams ? 0.05 : 0.1)
        << p.layout.describe();
    EXPECT_LT(p.time.mfu, 0.7);
    // Megatron's usual 13B layout: tp 2, no pipeline, sequence parallel, distributed optimizer.
    const Layout& l = p.layout;
    if (l.tp == 2 && l.pp == 1 && l.dp == 16 && l.sequence_parallel &&
        l.sharding == config::ShardingStrategy::Optim && l.micro_batch == 1)
      known_good = true;
  }
  EXPECT_TRUE(known_good);
  EXPECT_NE(result.fitting.front().layout.sharding, config::ShardingStrategy::OptimGradsParams);
  // 13B with no model parallelism does not fit 80 GB, even with the distributed optimizer (26 GB
  // of bf16 weights + 52 GB of fp32 gradients); sharding the gradients too (ZeRO-2, 3) does.
  bool sharded_grads_alone = false;
  for (const PlanReport& p : result.fitting) {
    if (p.layout.sharding <= config::ShardingStrategy::Optim) {
      EXPECT_GT(p.layout.tp * p.layout.pp, 1);
    }
    if (p.layout.tp * p.layout.pp == 1) sharded_grads_alone = true;
  }
  EXPECT_TRUE(sharded_grads_alone);
  const std::string table = planning::search_table(result, 5);
  EXPECT_THAT(table, HasSubstr("recompute"));
  EXPECT_THAT(table, HasSubstr("sharding"));
  EXPECT_THAT(table, HasSubstr("   1"));
}

TEST(PlannerSearch, Gpt175bFitsWithTp8Pp16) {
  config::Recipe r = gpt_large(96, 12288, 96, 1536);
  r.parallel.tensor = 8;
  r.parallel.pipeline = 16;
  r.parallel.sequence_parallel = true;
  r.optimizer.distributed = true;
  const ClusterSpec c = h100s(128);  // 1024 GPUs: dp 8
  for (const auto rc :
       {config::RecomputeGranularity::Selective, config::RecomputeGranularity::Full}) {
    r.training.recompute = rc;
    const PlanReport p = planning::plan(r, c, 50257);
    EXPECT_EQ(p.layout.dp, 8);
    EXPECT_TRUE(p.fits) << config::option_name(rc) << ": " << p.to_text();
    EXPECT_NEAR(static_cast<double>(p.params.total), 175e9, 1e9);
    EXPECT_GT(p.time.mfu, 0.2) << config::option_name(rc);
    EXPECT_LT(p.time.mfu, 0.65) << config::option_name(rc);
  }
  r.parallel.tensor = 1;
  r.parallel.pipeline = 1;
  const PlanReport single = planning::plan(r, h100s(64), 50257);  // dp 512
  EXPECT_FALSE(single.fits);
  EXPECT_GT(single.memory().weights, 80e9);
}

// The search ranks expert parallelism too: MoE layouts with ep > 1 are among the candidates, and
// their reports carry the all-to-all.
TEST(PlannerSearch, RanksExpertParallelLayouts) {
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/mixtral_8x7b.yaml");
  const planning::SearchResult res = planning::search(r, planning::cluster_from_recipe(r), 32000);
  ASSERT_FALSE(res.fitting.empty());
  bool saw_ep = false;
  for (const PlanReport& p : res.fitting)
    if (p.layout.ep > 1) {
      saw_ep = true;
      EXPECT_GT(p.time.ep_comm, 0.0);
      EXPECT_GT(p.moe.all_to_all_bytes_per_step, 0.0);
      EXPECT_EQ(p.moe.experts_per_device, 8 / p.layout.ep);
    }
  EXPECT_TRUE(saw_ep);
  EXPECT_THAT(planning::search_table(res, 5), HasSubstr(" ep "));
  EXPECT_THAT(planning::search_table(res, 5), HasSubstr("etp"));
}

// Whole experts (expert_tensor 1) against experts split over tp at the same tp x ep: the same
// experts per device but unsplit (tp x the weights), reduced over tp x dp / ep ranks; each rank
// sends only its sequence slice through the all-to-all (1 / tp the bytes). The search offers
// both.
TEST(PlannerMoe, WholeExpertsFoldTensorParallel) {
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/mixtral_8x7b.yaml");
  r.parallel.tensor = 2;
  r.parallel.pipeline = 4;
  r.parallel.expert = 8;
  r.parallel.sequence_parallel = true;
  const ClusterSpec cluster = planning::cluster_from_recipe(r);
  const PlanReport split = planning::plan(r, cluster, 32000);
  r.parallel.expert_tensor = 1;
  const PlanReport whole = planning::plan(r, cluster, 32000);
  EXPECT_EQ(split.layout.expert_tp(), 2);
  EXPECT_EQ(whole.layout.expert_tp(), 1);
  EXPECT_EQ(whole.moe.experts_per_device, split.moe.experts_per_device);
  EXPECT_DOUBLE_EQ(whole.moe.expert_params_per_device, 2 * split.moe.expert_params_per_device);
  EXPECT_DOUBLE_EQ(whole.moe.all_to_all_bytes_per_step, split.moe.all_to_all_bytes_per_step / 2);
  EXPECT_THAT(whole.layout.describe(), HasSubstr(" etp1"));
  EXPECT_EQ(whole.to_json()["layout"]["etp"], 1);
  const planning::SearchResult res = planning::search(r, cluster, 32000);
  bool saw_whole = false, saw_split = false;
  for (const PlanReport& p : res.fitting) {
    if (p.layout.tp < 2) continue;
    (p.layout.experts_fold_tp() ? saw_whole : saw_split) = true;
  }
  EXPECT_TRUE(saw_whole);
  EXPECT_TRUE(saw_split);
}

// Under context parallelism ep is carved out of cp x dp: the experts' optimizer state shards
// over what cp x dp leaves, and the search offers ep up to cp x dp.
TEST(PlannerMoe, ExpertParallelSpansContextParallel) {
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/mixtral_8x7b.yaml");
  r.parallel.tensor = 2;
  r.parallel.pipeline = 4;
  r.parallel.context = 2;
  r.parallel.expert = 8;
  r.parallel.data_parallel_sharding_strategy = config::ShardingStrategy::Optim;
  const ClusterSpec cluster = planning::cluster_from_recipe(r);
  const PlanReport cp2 = planning::plan(r, cluster, 32000);
  EXPECT_EQ(cp2.layout.expert_dp(), cp2.layout.cp * cp2.layout.dp / 8);
  EXPECT_EQ(cp2.moe.experts_per_device, 1);
  r.parallel.expert = 1;
  EXPECT_EQ(planning::plan(r, cluster, 32000).layout.expert_dp(), cp2.layout.cp * cp2.layout.dp);
  r.model.num_layers = 8;  // a smaller search, same per-layer shapes
  const planning::SearchResult res = planning::search(r, cluster, 32000);
  bool saw_ep_over_dp = false;
  for (const PlanReport& p : res.fitting) {
    EXPECT_EQ((p.layout.cp * p.layout.dp) % p.layout.ep, 0) << p.layout.describe();
    EXPECT_FALSE(p.layout.experts_fold_tp()) << p.layout.describe();
    if (p.layout.ep > p.layout.dp) saw_ep_over_dp = true;
  }
  EXPECT_TRUE(saw_ep_over_dp);
}

TEST(PlannerSearch, OnlyFittingLayoutsWithCpuRecompute) {
  config::Recipe r = gpt_small();
  r.training.global_batch_size = 16;
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  c.gpu_memory_bytes = 0.35e9;
  const auto result = planning::search(r, c, 8000);
  ASSERT_FALSE(result.fitting.empty());
  std::set<std::string> modes;
  for (const PlanReport& p : result.fitting) {
    EXPECT_LE(p.memory().total, 0.35e9);
    modes.insert(std::string(config::option_name(p.layout.recompute)));
  }
  // The CPU trainer recomputes too: every mode is a candidate.
  EXPECT_EQ(modes, (std::set<std::string>{"none", "selective", "full"}));
  c.gpu_memory_bytes = 1e6;
  EXPECT_TRUE(planning::search(r, c, 8000).fitting.empty());
}

// ---- shipped recipes on their documented clusters ---------------------------------------------

int64_t vocab_for(const config::Recipe& r) {
  if (r.model.vocab_size > 0) return r.model.vocab_size;
  const auto& t = r.data.tokenizer;
  if (t.type == config::TokenizerType::Null || t.vocab_size > 0) return t.vocab_size;
  try {
    return data::make_tokenizer(data::tokenizer_spec(r))->vocab_size();
  } catch (const std::exception&) {
  }
  // Tokenizer files not shipped: the published vocabulary sizes.
  if (t.type == config::TokenizerType::GPT2BPE) return 50257;
  if (t.type == config::TokenizerType::BertWordPieceLowerCase ||
      t.type == config::TokenizerType::BertWordPieceCase)
    return 30522;
  return 32000;
}

// Every shipped recipe loads and validates; the full-size (cuda) ones record the cluster they
// are written for, and their layout fits it.
// Context parallelism: activations per rank shrink with cp (the sequence splits), the key/value
// traffic appears in the step time, all_gather keeps every rank's keys and values, gradients and
// optimizer shards span dp x cp; and a long-context search ranks cp layouts first.
TEST(PlannerContextParallel, ActivationsTrafficAndShards) {
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/llama3_8b_128k.yaml");
  const ClusterSpec cluster = planning::cluster_from_recipe(r);
  const PlanReport cp8 = planning::plan(r, cluster, vocab_for(r));
  EXPECT_TRUE(cp8.fits) << cp8.to_text();
  EXPECT_GT(cp8.time.cp_comm, 0);
  EXPECT_GT(cp8.time.cp_bytes_per_step, 0);
  EXPECT_THAT(cp8.to_text(), HasSubstr("CP exposed"));
  EXPECT_EQ(cp8.layout.shard_group(), 8);  // dp 1 x cp 8
  r.parallel.cp_comm_type = config::CpCommType::AllGather;
  const PlanReport gathered = planning::plan(r, cluster, vocab_for(r));
  EXPECT_GT(gathered.memory().activations_per_microbatch, cp8.memory().activations_per_microbatch);
  // Half the context-parallel ranks (twice the rows each) on half the devices.
  r.parallel.cp_comm_type = config::CpCommType::P2P;
  r.parallel.context = 4;
  r.cluster.nodes = 4;
  const PlanReport cp4 = planning::plan(r, planning::cluster_from_recipe(r), vocab_for(r));
  EXPECT_NEAR(cp4.memory().activations_per_microbatch / cp8.memory().activations_per_microbatch,
              2.0, 0.25);
}

TEST(PlannerSearch, RanksContextParallelForLongSequences) {
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/llama3_8b_32k.yaml");
  r.model.num_layers = 8;  // a smaller search, same per-layer shapes
  r.parallel.context = 1;
  const auto result = planning::search(r, planning::cluster_from_recipe(r), vocab_for(r));
  ASSERT_FALSE(result.fitting.empty());
  bool with_cp = false, without_cp = false;
  for (const PlanReport& p : result.fitting) {
    EXPECT_EQ(p.layout.tp * p.layout.pp * p.layout.dp * p.layout.cp, 16);
    (p.layout.cp > 1 ? with_cp : without_cp) = true;
  }
  EXPECT_TRUE(with_cp);
  EXPECT_TRUE(without_cp);
  EXPECT_THAT(planning::search_table(result, 40), HasSubstr(" p2p"));
}

TEST(PlannerRecipes, FullSizeRecipesFitTheirCluster) {
  int planned = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MEGATRON_SOURCE_DIR) + "/recipes")) {
    if (entry.path().extension() != ".yaml") continue;
    const config::Recipe r = config::load_recipe(entry.path().string());
    if (r.training.device == config::TrainingDevice::CUDA) {
      EXPECT_TRUE(r.cluster.specified())
          << entry.path() << ": a full-size recipe states its cluster (cluster: section)";
    }
    if (!r.cluster.specified()) continue;
    const PlanReport p = planning::plan(r, planning::cluster_from_recipe(r), vocab_for(r));
    EXPECT_TRUE(p.fits) << entry.path() << "\n" << p.to_text();
    EXPECT_EQ(p.cluster.world(), r.cluster.nodes * r.cluster.gpus_per_node);
    ++planned;
  }
  EXPECT_GE(planned, 1);
}

}  // namespace
}  // namespace megatron
