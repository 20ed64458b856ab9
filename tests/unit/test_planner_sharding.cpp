// The planner's data-parallel sharding model (megatron/planning/planner.h, sharding_memory.h):
// the per-strategy formulas (bf16 and fp32, hybrid sharding, optimizer offload), the buffers
// against a ParamStore really finalized for each strategy (shard group 4, ranks 0 and 3), the
// data-parallel traffic, and the search over strategies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "megatron/optimizer/onebit_compression.h"
#include "megatron/planning/planner.h"
#include "megatron/training/memory_check.h"
#include "models/registry.h"
#include "tests/support/planner_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

using config::ShardingStrategy;
using planning::ClusterSpec;
using planning::PlanReport;
using planning::testing::one_device;
using planning::testing::recipe_from;
using planning::testing::ShapeOnlyComm;
using ::testing::HasSubstr;

constexpr ShardingStrategy kStrategies[] = {ShardingStrategy::NoShard, ShardingStrategy::Optim,
                                            ShardingStrategy::OptimGrads,
                                            ShardingStrategy::OptimGradsParams};

ClusterSpec devices(int64_t n) {
  ClusterSpec c = one_device();
  c.gpus_per_node = n;
  return c;
}

// ---- the formulas ------------------------------------------------------------------------------

// GPT, 8 layers of h 64 (49984 parameters each), word table 128 x 64, positions 32 x 64, head
// (final norm) 128: every unit divides by 4, so no piece is padded. dp 4, 2 micro-batches.
config::Recipe formula_gpt(const std::string& precision) {
  return recipe_from(
      "num_layers: 8, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 128",
      "device: cuda, precision: " + precision +
          ", micro_batch_size: 2, global_batch_size: 16, train_iters: 1");
}

TEST(PlannerSharding, ExactFormulasPerStrategy) {
  const double P = 8192 + 2048 + 8 * 49984 + 128, U = 49984;  // U: the largest unit (a layer)
  const double m = 2;                                         // micro-batches per step
  for (const std::string precision : {"bf16", "fp32"}) {
    const bool mixed = precision == "bf16";
    const double w = mixed ? 2 : 4;
    for (const int64_t instances : {1, 2}) {
      const double N = 4.0 / static_cast<double>(instances);
      for (const double offload : {0.0, 1.0, 0.5}) {
        // Everything but the sharded state: the same under every strategy.
        double rest = -1;
        for (const ShardingStrategy s : kStrategies) {
          config::Recipe r = formula_gpt(precision);
          r.parallel.data_parallel_sharding_strategy = s;
          r.parallel.num_distributed_optimizer_instances = instances;
          if (offload > 0) {
            r.optimizer.offload = config::OptimizerOffload::CPU;
            r.optimizer.offload_fraction = offload;
          }
          const std::string what = precision + " " + std::string(config::option_name(s)) +
                                   " instances " + std::to_string(instances) + " offload " +
                                   std::to_string(offload);
          if (s == ShardingStrategy::NoShard && instances > 1) {
            // Hybrid sharding needs a sharded optimizer (recipe validation).
            EXPECT_THROW(planning::plan(r, devices(4), 128), InputError) << what;
            continue;
          }
          const PlanReport p = planning::plan(r, devices(4), 128);
          ASSERT_EQ(p.layout.dp, 4) << what;
          ASSERT_EQ(p.layout.num_microbatches, 2) << what;
          ASSERT_EQ(p.device_stage().trainable_parameters, P) << what;
          EXPECT_EQ(p.layout.sharding, s) << what;
          EXPECT_EQ(p.layout.shard_group(), s == ShardingStrategy::NoShard ? 4 : 4 / instances);
          const auto& mem = p.memory();
          const bool sharded = s != ShardingStrategy::NoShard;
          const bool weights = s == ShardingStrategy::OptimGradsParams;
          const double master = mixed ? (sharded ? 4 * P / N : 4 * P) : 0.0;
          const double moments = sharded ? 8 * P / N : 8 * P;
          EXPECT_DOUBLE_EQ(mem.weights, weights ? w * P / N : w * P) << what;
          EXPECT_DOUBLE_EQ(mem.gradients, s >= ShardingStrategy::OptimGrads ? 4 * P / N : 4 * P)
              << what;
          EXPECT_DOUBLE_EQ(mem.master, master * (1 - offload)) << what;
          EXPECT_DOUBLE_EQ(mem.optimizer, moments * (1 - offload)) << what;
          // The host keeps fp32 masters of its share in fp32 too (a copy of the weights).
          EXPECT_DOUBLE_EQ(mem.host_offloaded, offload * 12 * P / (sharded ? N : 1.0)) << what;
          EXPECT_DOUBLE_EQ(mem.grad_scratch, s == ShardingStrategy::Optim ? 4 * P / N : 0.0)
              << what;
          // ZeRO-2: 5 units' fp32 gradients and their reduce-scatter slices; ZeRO-3: + 3
          // gathered units in the model dtype.
          double transient = 0;
          if (s >= ShardingStrategy::OptimGrads) transient += 5 * 4 * U * (1 + 1 / N);
          if (weights) transient += 3 * w * U;
          EXPECT_DOUBLE_EQ(mem.sharding_transient, transient) << what;
          const double state = mem.weights + mem.gradients + mem.master + mem.optimizer +
                               mem.grad_scratch + mem.sharding_transient;
          if (rest < 0) rest = mem.total - state;
          EXPECT_NEAR(mem.total - state, rest, 1e-6 * mem.total) << what;
          EXPECT_DOUBLE_EQ(mem.total_by_strategy[static_cast<size_t>(s)], mem.total) << what;
          EXPECT_DOUBLE_EQ(mem.optimizer_without_distributed, (mixed ? 4 * P : 0) + 8 * P) << what;
          EXPECT_DOUBLE_EQ(mem.optimizer_with_distributed, ((mixed ? 4 : 0) + 8) * P / N) << what;
          // Data-parallel payload per step.
          const double replicas = instances > 1 ? 4 * P / N : 0.0;
          double bytes = 0;
          switch (s) {
            case ShardingStrategy::NoShard:
              bytes = 4 * P;
              break;
            case ShardingStrategy::Optim:
              bytes = 4 * P + w * P + replicas;
              break;
            case ShardingStrategy::OptimGrads:
              bytes = m * 4 * P + w * P + replicas;
              break;
            case ShardingStrategy::OptimGradsParams:
              bytes = m * (2 * w * P + 4 * P) + replicas;
              break;
          }
          EXPECT_DOUBLE_EQ(p.time.dp_bytes_per_step, bytes) << what;
          EXPECT_EQ(p.time.param_gather > 0, sharded) << what;
          EXPECT_GT(p.time.dp_comm_exposed, 0) << what;
          EXPECT_GT(p.time.optimizer, 0) << what;
        }
      }
    }
  }
}

// Each strategy's total against no_shard's (Megatron's bytes per parameter with bf16, dp 4):
// 18 -> 6 + 12/4 (+ the 4/4 scratch) -> 2 + 16/4 -> 18/4 (+ the transients).
TEST(PlannerSharding, StrategiesOrderAndDescribe) {
  config::Recipe r = formula_gpt("bf16");
  const PlanReport p = planning::plan(r, devices(4), 128);
  const auto& by = p.memory().total_by_strategy;
  EXPECT_GT(by[0], by[1]);
  EXPECT_GT(by[1], by[2]);
  EXPECT_THAT(p.layout.describe(), HasSubstr("sharding=no_shard"));
  r.parallel.data_parallel_sharding_strategy = ShardingStrategy::OptimGradsParams;
  r.parallel.num_distributed_optimizer_instances = 2;
  r.optimizer.offload = config::OptimizerOffload::CPU;
  r.optimizer.offload_fraction = 0.5;
  const PlanReport z3 = planning::plan(r, devices(4), 128);
  EXPECT_EQ(z3.layout.describe(),
            "tp1 pp1 dp4 mb2x2 recompute=none sharding=optim_grads_params instances=2 "
            "offload=0.5");
  EXPECT_THAT(z3.layout.describe(), ::testing::Not(HasSubstr("dist-opt")));
  // The text report names the strategy, the shard group, the host bytes and the traffic.
  const std::string text = z3.to_text();
  EXPECT_THAT(text, HasSubstr("data-parallel sharding: optim_grads_params over 2 rank(s) x 2 "
                              "instances (hybrid)"));
  EXPECT_THAT(text, HasSubstr("host memory (optimizer offload)"));
  EXPECT_THAT(text, HasSubstr("total per strategy: no_shard"));
  EXPECT_THAT(text, HasSubstr("DP traffic"));
  const auto j = z3.to_json();
  EXPECT_EQ(j["layout"]["sharding_strategy"], "optim_grads_params");
  EXPECT_EQ(j["layout"]["instances"], 2);
  EXPECT_EQ(j["layout"]["shard_group"], 2);
  EXPECT_EQ(j["layout"]["offload_fraction"], 0.5);
  EXPECT_DOUBLE_EQ(j["memory"]["host_offloaded"].get<double>(), z3.memory().host_offloaded);
  EXPECT_GT(j["memory"]["host_offloaded"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["memory"]["total_by_strategy"]["optim_grads_params"].get<double>(),
                   z3.memory().total);
  EXPECT_DOUBLE_EQ(j["time"]["dp_bytes_per_step"].get<double>(), z3.time.dp_bytes_per_step);
}

// parallel.grad_compression topk: each rank hands 8 r P bytes of (index, value) pairs to the
// all-gather instead of the 4 P of the all-reduce, and less of the step waits on it.
TEST(PlannerSharding, TopkCompressionSendsItsSparseSets) {
  const double P = 8192 + 2048 + 8 * 49984 + 128;
  config::Recipe r = formula_gpt("fp32");
  r.training.device = config::TrainingDevice::CPU;
  const PlanReport dense = planning::plan(r, devices(4), 128);
  r.parallel.grad_compression = config::GradCompression::Topk;
  r.parallel.topk_ratio = 0.01;
  const PlanReport sparse = planning::plan(r, devices(4), 128);
  EXPECT_DOUBLE_EQ(dense.time.dp_bytes_per_step, 4 * P);
  EXPECT_NEAR(sparse.time.dp_bytes_per_step, 8 * 0.01 * P, 1e-6 * P);
  EXPECT_LT(sparse.time.dp_comm_exposed, dense.time.dp_comm_exposed);
}

// optimizer.type onebit_adam past its freeze: each rank hands its momenta's signs and block
// scales (optimizer/onebit_compression.h) to the all-to-all and its chunk to the gather, ~1/25
// of the all-reduce's bytes at dp 4; the exchange waits at the step (not behind backward).
TEST(PlannerSharding, OnebitAdamSendsSignsAndBlockScales) {
  const double P = 8192 + 2048 + 8 * 49984 + 128;
  config::Recipe r = formula_gpt("fp32");
  r.training.device = config::TrainingDevice::CPU;
  const PlanReport dense = planning::plan(r, devices(4), 128);
  r.optimizer.type = config::OptimizerType::OnebitAdam;
  r.training.train_iters = 100;
  r.optimizer.schedule.warmup_iters = 0;
  r.optimizer.freeze_step = 20;
  const PlanReport onebit = planning::plan(r, devices(4), 128);
  ASSERT_EQ(onebit.layout.dp, 4);
  const double per_element = 1.0 / 8 + 4.0 / static_cast<double>(optim::kOnebitBlock);
  EXPECT_NEAR(onebit.time.dp_bytes_per_step, per_element * P * (1 + 1.0 / 4), 1e-6 * P);
  EXPECT_GT(dense.time.dp_bytes_per_step / onebit.time.dp_bytes_per_step, 20);
  // Memory: two moments plus the worker error (whole) and the server error (a quarter at dp 4).
  EXPECT_DOUBLE_EQ(onebit.stages[0].memory.optimizer,
                   dense.stages[0].memory.optimizer * (8 + 4 * 1.25) / 8);
  // Over a slow link the exchange, though not overlapped, costs less than the all-reduce.
  ClusterSpec slow = devices(4);
  slow.intra_node_gbps = 0.01;
  config::Recipe plain = r;
  plain.optimizer.type = config::OptimizerType::AdamW;
  plain.optimizer.freeze_step = 0;
  EXPECT_LT(planning::plan(r, slow, 128).time.dp_comm_exposed * 10,
            planning::plan(plain, slow, 128).time.dp_comm_exposed);
}

// ZeRO++ under optim_grads_params: unit gathers and gradient reduce-scatters as int8 blocks
// (1 + 4/256 bytes an element instead of fp32's 4): the payload falls by 4 / (1 + 4/256).
TEST(PlannerSharding, ZeroPlusPlusQuantisesGathersAndReduceScatters) {
  config::Recipe r = formula_gpt("fp32");
  r.training.device = config::TrainingDevice::CPU;
  r.parallel.data_parallel_sharding_strategy = ShardingStrategy::OptimGradsParams;
  const PlanReport z3 = planning::plan(r, devices(4), 128);
  r.parallel.zero_quantized_weights = r.parallel.zero_quantized_gradients = true;
  const PlanReport zpp = planning::plan(r, devices(4), 128);
  EXPECT_NEAR(z3.time.dp_bytes_per_step / zpp.time.dp_bytes_per_step, 4.0 / (1 + 4.0 / 256), 1e-9);
  EXPECT_LT(zpp.time.dp_comm_exposed, z3.time.dp_comm_exposed);
}

// Under a schedule with W passes ZeRO-2/3 keep a stage's whole gradient until the step's end and
// reduce-scatter it once then (distributed/fully_sharded.h): every unit's gradient and slice at
// the peak, (m - 1) fewer gradient reduce-scatters per step.
TEST(PlannerSharding, DeferredWeightGradientsReduceOnceAtTheStepsEnd) {
  for (const ShardingStrategy s :
       {ShardingStrategy::OptimGrads, ShardingStrategy::OptimGradsParams}) {
    config::Recipe r = formula_gpt("fp32");
    r.training.device = config::TrainingDevice::CPU;
    r.parallel.pipeline = 2;
    r.parallel.data_parallel_sharding_strategy = s;
    const PlanReport base = planning::plan(r, devices(4), 128);
    r.parallel.pipeline_schedule = config::PipelineSchedule::ZbH1;
    const PlanReport zb = planning::plan(r, devices(4), 128);
    const std::string what(config::option_name(s));
    ASSERT_EQ(zb.layout.dp, 2) << what;
    const double m = static_cast<double>(zb.layout.num_microbatches);
    ASSERT_EQ(m, 4) << what;
    for (size_t st = 0; st < zb.stages.size(); ++st) {
      // Every trainable element's fp32 gradient, and its half-size slice, at once.
      const double P = static_cast<double>(zb.stages[st].trainable_parameters);
      const double gathered = s == ShardingStrategy::OptimGradsParams
                                  ? 3 * 4.0 * 49984  // three gathered layer units (fp32)
                                  : 0.0;
      EXPECT_DOUBLE_EQ(zb.stages[st].memory.sharding_transient, 4 * P * 1.5 + gathered)
          << what << " stage " << st;
      EXPECT_LT(base.stages[st].memory.sharding_transient, zb.stages[st].memory.sharding_transient)
          << what << " stage " << st;
    }
    // The gradients reduce-scattered once a step, as with one micro-batch: ZeRO-2's payload is
    // the one-micro-batch step's; ZeRO-3 still gathers the weights every micro-batch.
    r.parallel.pipeline_schedule.reset();
    r.training.global_batch_size = 4;
    const PlanReport one = planning::plan(r, devices(4), 128);
    ASSERT_EQ(one.layout.num_microbatches, 1) << what;
    if (s == ShardingStrategy::OptimGrads) {
      EXPECT_DOUBLE_EQ(zb.time.dp_bytes_per_step, one.time.dp_bytes_per_step) << what;
    } else {
      EXPECT_GT(zb.time.dp_bytes_per_step, one.time.dp_bytes_per_step) << what;
    }
    EXPECT_LT(zb.time.dp_bytes_per_step, base.time.dp_bytes_per_step) << what;
  }
}

// On a GPU the trainer's memory check (training/memory_check.h) compares the offloaded optimizer
// state with the host's memory: 12 bytes per offloaded parameter.
TEST(PlannerSharding, MemoryCheckCountsOffloadedHostBytes) {
  if (training::host_available_bytes() <= 0) GTEST_SKIP() << "no /proc/meminfo";
  config::Recipe r = formula_gpt("bf16");
  r.optimizer.offload = config::OptimizerOffload::CPU;
  r.parallel.data = 1;
  r.training.global_batch_size = 2;
  EXPECT_NO_THROW(training::check_host_memory_fits(r, 128, Device::CUDA));
  // ~1.4T parameters: 17 TB of host memory for the optimizer.
  r.model.num_layers = 96;
  r.model.hidden_size = 34816;
  r.model.num_attention_heads = 64;
  try {
    training::check_host_memory_fits(r, 128, Device::CUDA);
    ADD_FAILURE() << "offloaded 17 TB to the host";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("optimizer.offload_fraction"));
  }
  r.optimizer.offload = config::OptimizerOffload::None;  // the device reports its own failures
  EXPECT_NO_THROW(training::check_host_memory_fits(r, 128, Device::CUDA));
}

// ---- against the real ParamStore -------------------------------------------------------------

config::Recipe shipped(const std::string& name) {
  config::Recipe r = config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/" + name);
  r.training.global_batch_size = 4 * r.training.micro_batch_size;  // dp 4, one micro-batch
  return r;
}

// The planner's weights, gradients, fp32 masters and optimizer state for shard-group rank
// `rank` of 4 (expert data parallelism 4 / ep) against the buffers ParamStore::finalize
// allocates for the same sharding. Pieces are padded per unit (or region): fewer than N
// elements of slack per unit.
void expect_store_matches(config::Recipe r, const std::string& what) {
  constexpr int64_t kDp = 4, kVocab = 8000;
  const int64_t ep = r.parallel.expert;
  for (const std::string precision : {"fp32", "bf16"}) {
    r.training.precision = precision == "fp32" ? config::Precision::FP32 : config::Precision::BF16;
    for (const ShardingStrategy s : kStrategies) {
      r.parallel.data_parallel_sharding_strategy = s;
      const PlanReport p = planning::plan(r, devices(kDp), kVocab);
      ASSERT_EQ(p.layout.dp, kDp);
      const auto& mem = p.memory();
      for (const int64_t rank : {int64_t{0}, kDp - 1}) {
        const std::string label = what + " " + precision + " " +
                                  std::string(config::option_name(s)) + " rank " +
                                  std::to_string(rank);
        ParamStore store(Device::CPU);
        auto tp = parallel::make_single_process_communicator();
        ShapeOnlyComm ep_comm(0, static_cast<int>(ep));
        const auto chunks = models::build_model_chunks(r, kVocab, store, *tp, 0, 1, {&ep_comm});
        DataParallelSharding sh;
        sh.optimizer = s != ShardingStrategy::NoShard;
        sh.grads = s >= ShardingStrategy::OptimGrads;
        sh.weights = s == ShardingStrategy::OptimGradsParams;
        sh.dense_size = kDp;
        sh.dense_rank = rank;
        sh.expert_size = kDp / ep;
        sh.expert_rank = rank % (kDp / ep);
        store.finalize(models::model_dtype_of(r.training), sh);
        ASSERT_EQ(p.device_stage().parameters, store.numel()) << label;
        int64_t state = 0;
        for (const ParamSegment& seg : store.segments()) state += seg.size();
        const bool mixed = store.mixed_precision();
        const double w = mixed ? 2 : 4;
        // Padding: under N elements per piece (a unit's run of one region), in each buffer.
        const double slack = static_cast<double>(store.num_units() * 2 * kDp);
        auto near = [&](double planned, double real, double bytes, const char* buffer) {
          EXPECT_NEAR(planned, real, slack * bytes) << label << ": " << buffer;
          // Rank 0 owns no padding: the planner's round-up is exact for it.
          if (rank == 0) {
            EXPECT_EQ(planned, real) << label << ": " << buffer;
          }
        };
        near(mem.weights, static_cast<double>(store.weights().nbytes()), w, "weights");
        near(mem.gradients, static_cast<double>(store.grads().nbytes()), 4, "gradients");
        if (mixed) {
          near(mem.master, static_cast<double>(store.masters().nbytes()), 4, "masters");
        } else {
          EXPECT_EQ(mem.master, 0) << label << ": fp32 masters are the weights";
        }
        near(mem.optimizer, 8.0 * static_cast<double>(state), 8, "optimizer state");
      }
    }
  }
}

TEST(PlannerSharding, GptTinyMatchesTheParamStore) {
  expect_store_matches(shipped("gpt_tiny.yaml"), "gpt_tiny");
}

TEST(PlannerSharding, LlamaTinyMatchesTheParamStore) {
  expect_store_matches(shipped("llama_tiny.yaml"), "llama_tiny");
}

// Units of three layers (parallel.fsdp_unit_layers): the padding follows the larger pieces.
TEST(PlannerSharding, ThreeLayerUnitsMatchTheParamStore) {
  config::Recipe r = shipped("llama_tiny.yaml");
  r.parallel.fsdp_unit_layers = 3;
  expect_store_matches(r, "llama_tiny 3-layer units");
}

// LoRA: the frozen base is weights only, sharded with optim_grads_params.
TEST(PlannerSharding, LlamaTinyLoraMatchesTheParamStore) {
  config::Recipe r = shipped("llama_tiny.yaml");
  r.peft.type = "lora";
  r.peft.dim = 8;
  r.validate();
  expect_store_matches(r, "llama_tiny lora");
}

// MoE: routed experts' weights sharded over expert data parallelism (dp / ep = 2), the rest
// over dp.
TEST(PlannerSharding, MixtralTinyMatchesTheParamStore) {
  config::Recipe r = shipped("mixtral_tiny.yaml");
  r.parallel.expert = 2;
  expect_store_matches(r, "mixtral_tiny ep2");
}

// ---- the search --------------------------------------------------------------------------------

// A 4B-parameter model on 4 devices of one per node (tp 1), 7 layers (pp 1 on a world of 4): only
// dp 4 is left, and the memory is set between what ZeRO-3 needs and what anything else needs.
TEST(PlannerSharding, SearchRanksZero3FirstWhenOnlyItFits) {
  config::Recipe r = recipe_from(
      "num_layers: 7, hidden_size: 6144, num_attention_heads: 48, seq_length: 1024, "
      "vocab_size: 32000",
      "device: cuda, precision: bf16, micro_batch_size: 1, global_batch_size: 8, train_iters: 1");
  ClusterSpec c = one_device();
  c.nodes = 4;
  c.gpus_per_node = 1;
  // The smallest layout: micro-batch 1, full recompute.
  r.training.recompute = config::RecomputeGranularity::Full;
  const auto by = planning::plan(r, c, 32000).memory().total_by_strategy;
  const double zero3 = by[3], others = std::min({by[0], by[1], by[2]});
  ASSERT_LT(zero3, others);
  c.gpu_memory_bytes = (zero3 + others) / 2;
  r.training.recompute = config::RecomputeGranularity::None;
  const planning::SearchResult res = planning::search(r, c, 32000);
  ASSERT_FALSE(res.fitting.empty());
  EXPECT_EQ(res.fitting.front().layout.sharding, ShardingStrategy::OptimGradsParams);
  for (const PlanReport& p : res.fitting) {
    EXPECT_EQ(p.layout.sharding, ShardingStrategy::OptimGradsParams) << p.layout.describe();
    EXPECT_LE(p.memory().total, c.gpu_memory_bytes);
  }
  // Every strategy was tried: 4 per (micro-batch, recompute) at dp 4.
  EXPECT_EQ(res.candidates % 4, 0);
  EXPECT_GT(res.too_big, 0);
  const std::string table = planning::search_table(res, 5);
  EXPECT_THAT(table, HasSubstr("sharding"));
  EXPECT_THAT(table, HasSubstr("optim_grads_params"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("dist-opt")));
}

// On a roomy cluster the search lists every strategy among the layouts that fit.
TEST(PlannerSharding, SearchTriesEveryStrategy) {
  config::Recipe r = formula_gpt("bf16");
  const planning::SearchResult res = planning::search(r, devices(4), 128);
  std::set<ShardingStrategy> seen;
  for (const PlanReport& p : res.fitting) {
    seen.insert(p.layout.sharding);
    if (p.layout.dp == 1) {
      EXPECT_EQ(p.layout.sharding, ShardingStrategy::NoShard);
    }
  }
  EXPECT_EQ(seen.size(), 4u);
  const std::string table = planning::search_table(res, 1000);
  for (const ShardingStrategy s : kStrategies)
    EXPECT_THAT(table, HasSubstr(std::string(config::option_name(s))));
}

}  // namespace
}  // namespace megatron
