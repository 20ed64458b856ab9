#pragma once
// Memory and throughput planner: for a recipe and a cluster, the parameter count, the memory per
// device broken down, FLOPs per step and an estimated step time / MFU; and a search over the
// (tp, pp, dp, micro-batch, recompute, distributed optimizer) layouts that fit. `build/bin/plan`
// is the command line (run_plan_cli). Everything here is arithmetic on the recipe: nothing is
// allocated or run.
//
// Notation: L layers, h hidden, H heads, G query groups, d = h/H head dim, F ffn, f1 = F or 2F
// (SwiGLU), V padded vocabulary (Megatron's padding for this tp), s sequence (/cp), b micro-batch,
// t tensor parallel, p pipeline, v virtual stages per rank, m micro-batches per step, a = bytes
// of an activation element (2 for bf16/fp16, 4 for fp32; the CPU path always computes in fp32).
//
// Parameters (exact, the same count and sharding as the model classes register):
//   layer = 2 norms + qkv (H + 2G) d h / t (+ bias) + proj H d h / t (+ replicated bias)
//           + fc1 f1 h / t (+ bias) + fc2 F h / t (+ replicated bias)   [MoE: MLP x E/ep + router]
//   first stage: word embeddings V h / t, learned positions P h, BERT token types 2h and norm;
//   last stage: final norm, untied output layer V h / t, or with tied embeddings and p > 1 a copy
//   of the word embeddings (counted on the device, not in the model total); BERT: LM-head dense
//   + norm + output bias V / t, pooler and binary head (data.bert_binary_head).
//
// Memory per device (the stage with the largest total is reported; bytes per local parameter P):
//   device cuda (Megatron's accounting): weights P x (2 or 4), fp32 grads 4P, fp32 master 4P
//     (mixed precision only), Adam 8P; the distributed optimizer shards master + Adam over dp
//     (bf16: 6 + 12/dp bytes per parameter).
//   device cpu (this implementation's ParamStore): fp32 compute weights 4P (+ 2P 16-bit model
//     weights with bf16/fp16), fp32 grads 4P, fp32 master 4P (mixed only, never sharded), Adam 8P
//     (SGD 4P); the distributed optimizer shards the moments and adds a 4P/dp reduce-scatter
//     scratch.
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
//   per-micro-batch time x (m + (p-1)/v) (the bubble);
//   DP: gradient all-reduce (or reduce-scatter) of fp32 grads, overlapped with the last
//     micro-batch's backward but at least 20% exposed; the distributed optimizer's parameter
//     all-gather is exposed; the optimizer step is bound by device memory bandwidth.
//   Bandwidths: TP inside a node when t <= gpus_per_node; DP inside a node when t cp dp <=
//   gpus_per_node; PP crosses nodes when t cp dp >= gpus_per_node (rank order tp-cp-ep-dp-pp).
//   MFU = model FLOPs / (step time x devices x peak).
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
  int64_t micro_batch = 1, num_microbatches = 1;
  bool sequence_parallel = false;      // effective (tp > 1)
  bool distributed_optimizer = false;  // effective (dp > 1)
  std::string recompute = "none";
  std::string describe() const;  // "tp2 pp4 dp4 mb1x32 sp recompute=none dist-opt"
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
  double weights = 0, master = 0, gradients = 0, optimizer = 0;
  // master + optimizer state (+ scratch) without / with the distributed optimizer
  double optimizer_without_distributed = 0, optimizer_with_distributed = 0;
  // This stage's activations for one micro-batch, for the layout's recompute and for each mode.
  double activations_per_microbatch = 0;
  double activations_none = 0, activations_selective = 0, activations_full = 0;
  double in_flight = 1;  // micro-batches' worth of activations held (pipeline in-flight factor)
  double activations = 0;
  double workspace = 0, reserve = 0;
  double total = 0;
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
  double ep_comm = 0;  // MoE token all-to-alls
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
// m); interleaved min(v m, 2 (p - r - 1) + (v - 1) p + 1).
int64_t live_chunk_activations(int64_t pp, int64_t vpp, int64_t microbatches, int64_t stage);

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
// (powers of two and the recipe's), recompute (none|selective|full), the distributed
// optimizer (dp > 1), the recipe's virtual pipeline size, expert parallelism (MoE: every ep
// dividing dp and num_experts; expert tensor parallelism = tp); sequence parallel whenever
// tp > 1.
SearchResult search(const config::Recipe& recipe, const ClusterSpec& cluster,
                    int64_t tokenizer_vocab);
std::string search_table(const SearchResult& result, size_t top);

// ---- command line ----------------------------------------------------------------------------
struct PlanArgs {
  std::string recipe;
  std::vector<std::string> overrides;  // --set
  std::optional<int64_t> nodes, gpus_per_node, vocab;
  std::optional<double> gpu_memory_bytes, gpu_tflops, intra_node_gbps, inter_node_gbps, efficiency;
  bool flash_attention = true;
  bool search = false, json = false, help = false;
  int64_t top = 10;
};

// "80GB" / "80G" (1e9), "80GiB" (2^30), "512MB", "1.5TB", "80" (GB) -> bytes. Throws InputError.
double parse_memory_size(const std::string& text);
// Throws InputError naming the flag and the bad value.
PlanArgs parse_plan_args(const std::vector<std::string>& args);
std::string plan_usage();
// The whole tool: returns the exit code (0 fits, 1 usage/input error, 3 does not fit / nothing
// fits). Reports go to `out`, errors to `err`.
int run_plan_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace megatron::planning
