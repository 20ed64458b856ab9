#pragma once
// Memory and throughput planner: for a recipe and a cluster, the parameter count, the memory per
// device broken down, FLOPs per step and an estimated step time / MFU; and a search over the
// (tp, pp, dp, micro-batch, recompute, data-parallel sharding strategy) layouts that fit.
// `build/bin/plan` is the command line (tools/plan_cli.h). Everything here is arithmetic on the
// recipe: nothing is allocated or run.
//
// Notation: L layers, h hidden, H heads, G query groups, d head dim (model.kv_channels, default
// h/H), F ffn, f1 = F or 2F (SwiGLU), V padded vocabulary (Megatron's padding for this tp), s
// sequence (/cp), b micro-batch, t tensor parallel, p pipeline, v virtual stages per rank, m
// micro-batches per step, a = bytes of an activation element (2 for bf16/fp16, 4 for fp32; the
// CPU kernels compute in fp32 but store activations in the model dtype).
//
// Parameters (exact, the same count and sharding as the model classes register):
//   layer = 2 norms + qkv (H + 2G) d h / t (+ bias) + proj H d h / t (+ replicated bias)
//           + fc1 f1 h / t (+ bias) + fc2 F h / t (+ replicated bias)   [MoE: MLP x E/ep + router;
//           the experts' MLPs split over etp = t, or whole with expert_tensor 1]
//   first stage: word embeddings V h / t, learned positions P h, BERT token types 2h and norm;
//   last stage: final norm, untied output layer V h / t, or with tied embeddings and p > 1 a copy
//   of the word embeddings (counted on the device, not in the model total); BERT: LM-head dense
//   + norm + output bias V / t, pooler and binary head (data.bert_binary_head).
//
// Memory per device (the stage with the largest total is reported). The trainer allocates the
// same ParamStore on either device (megatron/params/param_layout.cpp): model weights only in the
// model dtype (the CPU kernels widen 16-bit arguments into transient fp32 copies per op, counted
// as workspace, and cache none), fp32 main gradients, fp32 masters under mixed precision only (in
// fp32 the weight buffer is the master), Adam moments 8 bytes per element (SGD 4). With P this
// rank's trainable parameters (LoRA: the adapters), F its frozen ones (LoRA's base), w the model
// dtype's bytes, N the shard group (dp / parallel.num_distributed_optimizer_instances; routed
// experts' weights: dp / ep, or tp dp / ep with whole experts), per
// parallel.data_parallel_sharding_strategy:
//   no_shard            weights w(P + F), grads 4P, masters 4P, moments 8P
//   optim (ZeRO-1)      weights w(P + F), grads 4P, masters 4P/N, moments 8P/N, + a kept fp32
//                       reduce-scatter output 4P/N (grad_scratch)
//   optim_grads         weights w(P + F), grads 4P/N, masters 4P/N, moments 8P/N; transient
//     (ZeRO-2)          (workspace): the gradients of the unit in backward and of up to 4 units
//                       being reduce-scattered, each 4U (1 + 1/N) for a unit of U parameters
//                       (a layer, an embedding table, the head): the 5 largest units
//   optim_grads_params  weights w(P + F)/N, grads 4P/N, masters 4P/N, moments 8P/N; transient:
//     (ZeRO-3 / FSDP)   3 gathered units w U (in use, prefetched, kept) + the ZeRO-2 gradients
// Sharded pieces are padded to a multiple of N (per unit with sharded gradients, per region
// otherwise), as the store pads them. Hybrid sharding (instances k > 1) shards over N = dp / k.
// optimizer.offload: cpu (cuda only) keeps offload_fraction of the fp32 masters and moments in
// host memory instead (host_offloaded, 12 bytes per offloaded element, not in the device total;
// in fp32 the host master is a copy of the device's weights, which stay). The cuda reserve and the
// activation models differ by device (below); the CPU numbers are checked against real allocations
// and peaks in tests/unit/test_planner_memory.cpp and test_planner_sharding.cpp.
//   Activations per micro-batch and layer:
//     cuda (Korthikanti et al. 2022, generalised to GQA/SwiGLU, flash attention by default):
//       replicated part  s b h (4a + 2 dropout masks)        (/t only with sequence parallelism)
//       tensor part      s b a (2 H d + 2 G d + f1 + F) / t  (Q, K, V, proj input, fc1 out, fc2 in)
//       attention core   flash: 4 b H s / t (softmax stats); unfused: b H s S (a + mask + a) / t
//       = 34 s b h / t for GPT with t-way TP+SP and dropout; selective recompute drops the
//       attention core; full recompute keeps only the layer input a s b h (/t with SP) per layer
//       plus one layer rematerialised. First stage: embedding dropout mask; last stage: final
//       norm and output-layer inputs and the fp32 softmax of the cross-entropy 4 s b V / t.
//     cpu (what the Ctx structs of megatron/transformer and models/gpt keep, fp32): per layer
//       rows = s b (/t with SP): norms' input copies and stats, qkv, attention probabilities
//       [b, H/t, s, s], attention output, projection, residuals, fc1/act/fc2 outputs, and the
//       backward scratch each layer context keeps (d_qkv, d_attn, d_fc1, d_act, d_ln, d_mid);
//       plus embeddings, final norm, logits [s b, V/t], losses and the ping-pong gradients.
//       Recompute as TransformerBlock implements it (megatron/transformer/block.h): selective
//       keeps no probabilities per layer (one [b, H/t, s, s] workspace, counted as workspace);
//       full keeps one layer output 4 s b h (/t with SP) per layer plus one whole layer
//       context (forward and backward scratch) as workspace.
//   In flight (1F1B): stage r holds min(p - r, m) micro-batches; interleaved: min(v m,
//     2(p - r - 1) + (v - 1) p + 1) chunk activations, i.e. p (1 + (p-1)/(p v)) on stage 0.
//   Workspace: transient logits / gradient copies, gathered sequence-parallel inputs, p2p
//     buffers, the rematerialised layer; cuda adds a 2 GB runtime reserve (context, NCCL,
//     cuBLAS workspace, fragmentation).
//
// FLOPs per step: megatron_flops_per_step (megatron/planning/flops.h), exactly the trainer's.
// Recompute adds hardware FLOPs: full +1 forward of the layers (~ +1/3), selective + the forward
// of the attention core (4 b s^2 L H d per micro-batch).
//
// Step time (an estimate, not a measurement):
//   compute per micro-batch and stage = hardware FLOPs / (m dp t p cp) / (peak x efficiency),
//     efficiency = gemm_efficiency x bs/(bs + 256) x (h/t)/(h/t + 128) (small GEMMs run slower;
//     fp32 on cuda runs at half the bf16 peak);
//   TP: 4 all-reduces of a s b h bytes per layer and micro-batch (6 with full recompute), ring
//     cost 2 (t-1)/t x bytes / bandwidth, not overlapped;
//   PP: 2 v p2p messages of a s b h (/t with SP) per micro-batch;
//   CP: per layer and micro-batch, context_parallel_model.h (p2p hops partly hidden behind the
//     block attention; all_gather and a2a collectives exposed), inside a node when t cp fits;
//   per-micro-batch time x (m + (p-1)/v) (the bubble);
//   DP (payload per step: dp_bytes_per_step): no_shard all-reduces the fp32 grads 4P during the
//     last micro-batch's backward (overlapped, at least 20% exposed; with top-k compression
//     each rank's 8 r P bytes of index/value pairs are all-gathered instead; with onebit_adam past
//     its freeze 0.14 P of signs and scales go all-to-all and 0.14 P / dp are gathered back, at
//     the step, exposed); optim reduce-scatters
//     4P the same way and all-gathers the weights wP after the step (exposed); optim_grads
//     reduce-scatters 4P every micro-batch (the excess over a micro-batch's compute exposed) and
//     gathers wP after the step; optim_grads_params gathers every unit for forward and backward
//     (2 w(P + F)) and reduce-scatters 4P per micro-batch, prefetched behind that micro-batch's
//     compute (at least 20% exposed); hybrid sharding adds an exposed all-reduce of the 4P/N
//     shards over the k replicas. The optimizer step is bound by device memory bandwidth; its
//     offloaded share by the slower of PCIe (grads down, weights up, 25 GB/s) and the host
//     AdamW (28 bytes per element at 50 GB/s), which the trainer pipelines.
//   Bandwidths: TP inside a node when t <= gpus_per_node; a DP group inside a node when t cp x
//   (its size) <= gpus_per_node (the shard group N, the replicas dp); PP crosses nodes when
//   t cp dp >= gpus_per_node (rank order tp-cp-ep-dp-pp).
//   MFU = model FLOPs / (step time x devices x peak).
#include <array>
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"

namespace megatron::planning {

struct ClusterSpec {
  int64_t nodes = 1;
  int64_t gpus_per_node = 8;
  double gpu_memory_bytes = 80e9;
  double gpu_tflops = 989;  // peak dense bf16 TFLOP/s per device
  double intra_node_gbps = 450, inter_node_gbps = 50;
  double memory_bandwidth_gbps = 2000;  // device memory (optimizer step)
  double gemm_efficiency = 0.6;         // fraction of peak large bf16 GEMMs reach
  bool flash_attention = true;          // cuda activation model: fused attention, no s^2 term
  int64_t world() const { return nodes * gpus_per_node; }
};

// The recipe's `cluster:` section, with defaults for what it leaves out: one node of as many
// devices as the recipe's layout needs (tensor x pipeline x context x max(data, 1)), 80 GB and
// 989 TFLOP/s per device.
ClusterSpec cluster_from_recipe(const config::Recipe& recipe);

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  int64_t etp = 0;  // parallel.expert_tensor: 0 = tp, or 1 (whole experts)
  config::CpCommType cp_comm = config::CpCommType::P2P;  // parallel.cp_comm_type (cp > 1)
  int64_t micro_batch = 1, num_microbatches = 1;
  // parallel.pipeline_schedule as the trainer runs it (pipeline_schedule_kind()).
  config::PipelineSchedule schedule = config::PipelineSchedule::OneFOneB;
  bool sequence_parallel = false;  // effective (tp > 1)
  config::RecomputeGranularity recompute = config::RecomputeGranularity::None;
  // Recipe::sharding_strategy(), as the trainer runs it (at dp 1 too).
  config::ShardingStrategy sharding = config::ShardingStrategy::NoShard;
  int64_t instances = 1;  // parallel.num_distributed_optimizer_instances (hybrid sharding)
  double offload = 0;     // optimizer.offload_fraction with optimizer.offload: cpu on cuda, else 0
  // The dense weights' shard group: dp cp / instances (dp cp for no_shard): the cp ranks hold
  // the same weights, so gradients and shards span dp x cp as in the trainer.
  int64_t shard_group() const;
  // Whole experts under tp (expert_tensor 1): ep is carved out of tp x dp, each rank routes and
  // dispatches its own sequence slice.
  bool experts_fold_tp() const { return expert_tp() != tp; }
  int64_t expert_tp() const { return etp == 0 ? tp : etp; }
  // The ranks one expert's weights are reduced over: (tp x dp or cp x dp) / ep.
  int64_t expert_dp() const {
    return (experts_fold_tp() ? tp : cp) * dp / std::max<int64_t>(ep, 1);
  }
  // "tp2 pp4 dp4 mb1x32 sp recompute=none sharding=optim" (+ " instances=2", " offload=0.5")
  std::string describe() const;
};

struct ParamCounts {
  int64_t total = 0;      // unique parameters of the model (a tied LM head counted once)
  int64_t embedding = 0;  // word + position (+ token type) embeddings
  int64_t per_layer = 0;  // one transformer layer (MoE models: an MoE layer)
  int64_t head = 0;       // final norm, untied output layer, BERT heads
  int64_t experts = 0;    // MoE: every routed expert's weights
  int64_t active = 0;     // what one token uses: total less the experts it is not routed to
};

// Bytes per device.
struct MemoryBreakdown {
  // On the device (master and optimizer: what offload leaves there).
  double weights = 0, master = 0, gradients = 0, optimizer = 0;
  double grad_scratch = 0;  // optim: the kept fp32 reduce-scatter outputs
  // Masters + moments (device and host) with no_shard / with optim (the distributed optimizer).
  double optimizer_without_distributed = 0, optimizer_with_distributed = 0;
  double host_offloaded = 0;  // fp32 masters + moments in host memory (offload), not in total
  // This stage's activations for one micro-batch, for the layout's recompute and for each mode.
  double activations_per_microbatch = 0;
  double activations_none = 0, activations_selective = 0, activations_full = 0;
  double in_flight = 1;  // micro-batches' worth of activations held (pipeline in-flight factor)
  double activations = 0;
  double workspace = 0, reserve = 0;
  double sharding_transient = 0;  // of workspace: ZeRO-2/3 gathered units, in-flight gradients
  double total = 0;               // on the device
  // total under each strategy (config::ShardingStrategy order), everything else the same.
  std::array<double, 4> total_by_strategy{};
};

struct StagePlan {
  int64_t stage = 0;
  int64_t layers = 0;
  int64_t parameters = 0;            // on one device of this stage (tp shard, incl. tied copies)
  int64_t expert_parameters = 0;     // of which routed experts' (this rank's E / ep of them)
  int64_t trainable_parameters = 0;  // with gradients and optimizer state (LoRA: the adapters)
  bool first = false, last = false;
  MemoryBreakdown memory;
};

struct TimeEstimate {     // seconds per step unless noted
  double efficiency = 0;  // GEMM efficiency used
  double compute = 0, bubble = 0, tp_comm = 0, pp_comm = 0, dp_comm_exposed = 0, param_gather = 0,
         optimizer = 0;
  double ep_comm = 0;            // MoE token all-to-alls
  double cp_comm = 0;            // context parallelism's exposed key/value traffic
  double cp_bytes_per_step = 0;  // what it moves per device
  double dp_bytes_per_step = 0;  // data-parallel payload this rank hands to collectives
  double step = 0;
  double tokens_per_second = 0, tflops_per_device = 0, mfu = 0;
};

// Mixture of experts on one device of the worst stage.
struct MoePlan {
  int64_t experts_per_device = 0;        // routed experts per layer (num_experts / ep)
  double expert_params_per_device = 0;   // their weights (tp shard)
  double all_to_all_bytes_per_step = 0;  // token rows leaving this device
  double imbalance = 1;                  // busiest rank / mean assumed for activations and a2a
};

struct PlanReport {
  std::string recipe, arch, device, precision;
  ClusterSpec cluster;
  Layout layout;
  int64_t vocab = 0, padded_vocab = 0;
  ParamCounts params;
  std::vector<StagePlan> stages;
  size_t worst_stage = 0;     // the stage with the largest total memory (the device requirement)
  double flops_per_step = 0;  // model FLOPs (Megatron's formula, as the trainer)
  double hardware_flops_per_step = 0;  // with recomputation
  TimeEstimate time;
  MoePlan moe;  // zeros for dense models
  bool fits = false;
  std::vector<std::string> notes;

  const StagePlan& device_stage() const { return stages.at(worst_stage); }
  const MemoryBreakdown& memory() const { return device_stage().memory; }
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Parameters of the whole model and of one device of pipeline stage `stage` (all tensor-parallel
// ranks hold the same count). `padded_vocab` as ModelConfig::padded_vocab_size for this tp.
ParamCounts count_parameters(const config::ModelConfig& model, int64_t padded_vocab,
                             bool bert_binary_head = true);
int64_t stage_parameters(const config::Recipe& recipe, int64_t padded_vocab, const Layout& layout,
                         int64_t stage);

// Layers of each virtual stage (parallel.pipeline_layers or the even split), in layer order.
std::vector<int64_t> virtual_stage_layers(const config::Recipe& recipe, int64_t pp, int64_t vpp);

// Activation sets (model chunks' worth) live at once on pipeline stage `stage`: 1F1B min(p - r,
// m); interleaved min(v m, 2 (p - r - 1) + (v - 1) p + 1); ZB-H1 min(p, m) on every stage (a
// micro-batch's activations stay until its W), ZB-V 2 min(p, m) chunks.
int64_t live_chunk_activations(
    int64_t pp, int64_t vpp, int64_t microbatches, int64_t stage,
    config::PipelineSchedule schedule = config::PipelineSchedule::OneFOneB);
// The pipeline bubble of one step in units of one micro-batch's pass through a stage: 1F1B
// (p - 1), interleaved (p - 1) / v, ZB-H1 (p - 1)(F + B - W)/(F + B + W), ZB-V
// (p - 1)(F / 2)/(F + B + W), with the pass times in GEMM work (F = B = W; full recompute adds a
// forward to B).
double bubble_microbatches(const Layout& layout);

// The recipe's layout on `cluster` (dp = world / (tp pp cp)). Throws InputError when the recipe
// does not fit the world size (parallel sizes, global batch).
PlanReport plan(const config::Recipe& recipe, const ClusterSpec& cluster, int64_t tokenizer_vocab);

struct SearchResult {
  std::vector<PlanReport> fitting;  // sorted by estimated step time, fastest first
  int64_t candidates = 0;           // layouts valid for the world size and batch
  int64_t too_big = 0;              // of those, layouts that do not fit in memory
};
// Enumerates tp (divisors of gpus_per_node dividing heads, query groups and ffn), pp (dividing
// num_layers, even split), dp = world / (tp pp cp) with global % (micro dp) == 0, micro-batch
// (powers of two and the recipe's), recompute (none|selective|full), the data-parallel sharding
// strategy (no_shard; with dp > 1 also optim, optim_grads, optim_grads_params; the recipe's
// instances and offload kept), the recipe's virtual pipeline size, expert parallelism (MoE: every
// ep dividing dp and num_experts with expert tensor parallelism = tp, and with tp > 1 every ep
// dividing tp x dp and num_experts with whole experts, etp 1); sequence parallel whenever
// tp > 1.
SearchResult search(const config::Recipe& recipe, const ClusterSpec& cluster,
                    int64_t tokenizer_vocab);
std::string search_table(const SearchResult& result, size_t top);

}  // namespace megatron::planning
