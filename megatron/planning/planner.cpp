#include "megatron/planning/planner.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/planning/activation_memory.h"
#include "megatron/planning/context_parallel_model.h"
#include "megatron/planning/flops.h"
#include "megatron/planning/model_dims.h"
#include "megatron/planning/sharding_memory.h"

namespace megatron::planning {
namespace {

constexpr double kCudaRuntimeReserve = 2e9;  // context, NCCL, cuBLAS workspace, fragmentation

bool is_mixed(config::Precision precision) { return precision != config::Precision::FP32; }

using detail::Activations;
using detail::cpu_widening_workspace;
using detail::Dims;
using detail::dims_of;
using detail::embedding_params;
using detail::expert_params;
using detail::head_params;
using detail::layer_params;
using detail::lora_layer_params;
using detail::ring_all_reduce;

struct ChunkShape {
  int64_t layers;
  bool pre, post;
  int64_t first = 0;          // its first layer
  bool shares_table = false;  // a tied head using its stage's own table (ZB-V's stage 0)
};

}  // namespace

ClusterSpec cluster_from_recipe(const config::Recipe& r) {
  ClusterSpec c;
  const auto& cl = r.cluster;
  if (cl.specified()) {
    c.nodes = cl.nodes;
    c.gpus_per_node = cl.gpus_per_node;
  } else {
    c.nodes = 1;
    c.gpus_per_node = r.parallel.tensor * r.parallel.pipeline * r.parallel.context *
                      std::max<int64_t>(r.parallel.data, 1);
  }
  if (cl.gpu_memory_gb > 0) c.gpu_memory_bytes = cl.gpu_memory_gb * 1e9;
  if (cl.gpu_tflops > 0)
    c.gpu_tflops = cl.gpu_tflops;
  else if (r.training.peak_tflops > 0)
    c.gpu_tflops = r.training.peak_tflops;
  c.intra_node_gbps = cl.intra_node_gbps;
  c.inter_node_gbps = cl.inter_node_gbps;
  return c;
}

ParamCounts count_parameters(const config::ModelConfig& model, int64_t padded_vocab,
                             bool bert_binary_head) {
  const Dims d = dims_of(model, bert_binary_head);
  ParamCounts c;
  c.embedding = embedding_params(d, padded_vocab, 1);
  c.head = head_params(d, padded_vocab, 1);
  c.total = c.embedding + c.head;
  for (int64_t l = 0; l < d.L; ++l) c.total += layer_params(d, 1, 1, 1, d.is_moe(l));
  // An MoE model's layer: an MoE one (the first).
  int64_t shown = 0;
  while (shown + 1 < d.L && d.E > 0 && !d.is_moe(shown)) ++shown;
  c.per_layer = layer_params(d, 1, 1, 1, d.is_moe(shown));
  c.active = c.total;
  if (d.E > 0) {
    const int64_t moe_layers = d.moe_layers(0, d.L);
    c.experts = moe_layers * d.E * expert_params(d, 1);
    c.active -= moe_layers * (d.E - d.topk) * expert_params(d, 1);
  }
  return c;
}

std::vector<int64_t> virtual_stage_layers(const config::Recipe& r, int64_t pp, int64_t vpp) {
  const int64_t stages = pp * vpp, L = r.model.num_layers;
  const auto& given = r.parallel.pipeline_layers;
  if (!given.empty() && static_cast<int64_t>(given.size()) == stages) return given;
  MT_INPUT_CHECK(L % stages == 0, r.source_path, ": model.num_layers ", L,
                 " does not split evenly over ", stages,
                 " pipeline stages (set parallel.pipeline_layers)");
  return std::vector<int64_t>(static_cast<size_t>(stages), L / stages);
}

namespace {

// The chunks of `stage` (interleaved, or ZB-V's V: chunk 1 is virtual stage 2 pp - 1 - stage).
std::vector<ChunkShape> stage_chunks(const std::vector<int64_t>& counts, int64_t pp, int64_t vpp,
                                     int64_t stage, bool v_shape) {
  std::vector<ChunkShape> out;
  const int64_t stages = pp * vpp;
  for (int64_t c = 0; c < vpp; ++c) {
    const int64_t v = v_shape ? (c == 0 ? stage : 2 * pp - 1 - stage) : c * pp + stage;
    int64_t first = 0;
    for (int64_t i = 0; i < v; ++i) first += counts[static_cast<size_t>(i)];
    out.push_back({counts[static_cast<size_t>(v)], v == 0, v == stages - 1, first});
  }
  for (ChunkShape& c : out)
    c.shares_table = c.post && !c.pre &&
                     std::any_of(out.begin(), out.end(), [](const auto& o) { return o.pre; });
  return out;
}

int64_t chunk_params(const Dims& d, int64_t V, const Layout& lay, const ChunkShape& c) {
  int64_t n = 0;
  for (int64_t l = c.first; l < c.first + c.layers; ++l)
    n += layer_params(d, lay.tp, lay.ep, lay.expert_tp(), d.is_moe(l));
  if (c.pre) n += embedding_params(d, V, lay.tp);
  if (c.post) {
    n += head_params(d, V, lay.tp);
    // The last stage's copy of the tied word embeddings (when another stage holds the table).
    if (d.tied && !c.pre && !c.shares_table) n += V * d.D / lay.tp;
  }
  return n;
}

// The stage's parameter units as the models begin them (ParamStore::begin_unit): the word
// embeddings (or the tied copy), the other embeddings, each run of unit_layers layers
// (parallel.fsdp_unit_layers, counted from the chunk's first layer), the head; by buffer region.
std::vector<detail::UnitParams> stage_units(const Dims& d, int64_t V, const Layout& lay,
                                            const std::vector<ChunkShape>& chunks,
                                            int64_t unit_layers) {
  std::vector<detail::UnitParams> units;
  const bool lora = d.lora_rank > 0;  // LoRA: only the layers' adapters train
  auto add = [&](int64_t n) {
    if (n > 0) units.push_back(lora ? detail::UnitParams{0, 0, n} : detail::UnitParams{n, 0, 0});
  };
  for (const ChunkShape& c : chunks) {
    const int64_t word = V * d.D / lay.tp;
    if (c.pre || (c.post && d.tied && !c.shares_table)) add(word);
    if (c.pre) add(embedding_params(d, V, lay.tp) - word);
    for (int64_t l = c.first; l < c.first + c.layers; ++l) {
      const bool moe = d.is_moe(l);
      const int64_t all = layer_params(d, lay.tp, lay.ep, lay.expert_tp(), moe);
      const int64_t experts = moe ? (d.E / lay.ep) * expert_params(d, lay.expert_tp()) : 0;
      const int64_t adapters = lora_layer_params(d, lay.tp);
      const detail::UnitParams layer = lora ? detail::UnitParams{adapters, 0, all - adapters}
                                            : detail::UnitParams{all - experts, experts, 0};
      if ((l - c.first) % std::max<int64_t>(unit_layers, 1) == 0) {
        units.push_back(layer);
      } else {
        units.back().dense += layer.dense;
        units.back().expert += layer.expert;
        units.back().frozen += layer.frozen;
      }
    }
    if (c.post) add(head_params(d, V, lay.tp));
  }
  return units;
}

}  // namespace

int64_t stage_parameters(const config::Recipe& r, int64_t padded_vocab, const Layout& lay,
                         int64_t stage) {
  const Dims d = dims_of(r);
  const auto counts = virtual_stage_layers(r, lay.pp, lay.vpp);
  int64_t n = 0;
  for (const ChunkShape& c :
       stage_chunks(counts, lay.pp, lay.vpp, stage, config::v_placement(lay.schedule)))
    n += chunk_params(d, padded_vocab, lay, c);
  return n;
}

int64_t live_chunk_activations(int64_t pp, int64_t vpp, int64_t m, int64_t stage,
                               config::PipelineSchedule schedule) {
  if (schedule == config::PipelineSchedule::ZbH1) return std::min(pp, m);
  if (schedule == config::PipelineSchedule::ZbV) return 2 * std::min(pp, m);
  // DualPipeV: stage 0 runs a new forward before its first whole backward (dualpipe_v.h).
  if (schedule == config::PipelineSchedule::DualPipeV) return 2 * std::min(pp, m) + 1;
  if (vpp <= 1) return std::min(pp - stage, m);
  return std::min(vpp * m, 2 * (pp - stage - 1) + (vpp - 1) * pp + 1);
}

double bubble_microbatches(const Layout& lay) {
  const double p1 = static_cast<double>(lay.pp - 1);
  const double f = 1, w = 1, b = lay.recompute == config::RecomputeGranularity::Full ? 2 : 1;
  switch (lay.schedule) {
    case config::PipelineSchedule::ZbH1:
      return p1 * (f + b - w) / (f + b + w);
    case config::PipelineSchedule::ZbV:        // each stage waits (p - 1) half forwards to start
    case config::PipelineSchedule::DualPipeV:  // the same with equal passes (simulated)
      return p1 * (f / 2) / (f + b + w);
    default:
      return p1 / static_cast<double>(lay.vpp);
  }
}

namespace {

// What every part of a plan reads: the recipe, the cluster, the model's dims and the layout.
struct PlanInputs {
  const config::Recipe& r;
  const ClusterSpec& cluster;
  const Dims& d;
  const Layout& lay;
  int64_t V;  // padded vocabulary
  bool cuda, mixed, flash;
  double wbytes, moment_bytes;
  const Activations& act;
  double cp_kept;  // context parallelism: what each layer keeps beyond the local attention
};

// The recipe's layout on a world of `world` devices (validates the recipe against it).
Layout layout_of(const config::Recipe& r, int64_t world) {
  const auto& tr = r.training;
  Layout lay;
  lay.tp = r.parallel.tensor;
  lay.pp = r.parallel.pipeline;
  lay.cp = r.parallel.context;
  lay.cp_comm = r.parallel.cp_comm_type;
  lay.ep = r.parallel.expert;
  lay.etp = r.parallel.expert_tensor;
  lay.vpp = r.parallel.virtual_stages();
  lay.schedule = r.parallel.pipeline_schedule_kind();
  lay.dp = r.data_parallel_size(world);  // validates the recipe against the world size
  lay.micro_batch = tr.micro_batch_size;
  lay.num_microbatches = tr.global_batch_size / (tr.micro_batch_size * lay.dp);
  lay.sequence_parallel = r.parallel.sequence_parallel && lay.tp > 1;
  lay.sharding = r.sharding_strategy();
  lay.instances = r.parallel.num_distributed_optimizer_instances;
  lay.offload = tr.device == config::TrainingDevice::CUDA &&
                        r.optimizer.offload == config::OptimizerOffload::CPU
                    ? r.optimizer.offload_fraction
                    : 0.0;
  lay.recompute = tr.recompute;
  MT_INPUT_CHECK(lay.vpp == 1 || lay.num_microbatches % lay.pp == 0, r.source_path,
                 ": parallel.virtual_pipeline: the interleaved schedule needs the number of "
                 "micro-batches per step to be a multiple of parallel.pipeline (got ",
                 lay.num_microbatches, " micro-batches, pipeline ", lay.pp, ")");

  return lay;
}

// The report's notes on what the estimate assumes.
void add_notes(PlanReport& rep, const PlanInputs& in) {
  const Dims& d = in.d;
  const Layout& lay = in.lay;
  const config::Recipe& r = in.r;
  const bool cuda = in.cuda, flash = in.flash;
  if (cuda && !flash)
    rep.notes.push_back("unfused attention: the [b, H/t, s, s] softmax is stored per layer");
  if (d.E > 0)
    rep.notes.push_back(
        r.model.moe.moe_expert_capacity_factor
            ? "MoE: expert activations and all-to-alls sized for the capacity factor"
            : "MoE: dropless routing; expert activations and all-to-alls sized for the busiest "
              "rank at 1.5x the mean tokens per expert (the trainer logs the real imbalance); "
              "expert compute counted balanced");
  if (lay.cp > 1)
    rep.notes.push_back(concat("context parallelism ", lay.cp, " (",
                               config::option_name(lay.cp_comm),
                               "): activations of S / cp rows; key/value traffic per layer as "
                               "context_parallel_model.h models it"));
  if (d.lora_rank > 0)
    rep.notes.push_back(concat("LoRA rank ", d.lora_rank,
                               ": gradients, fp32 masters and optimizer state for the adapters "
                               "only; the frozen base is weights only (its dW GEMMs are skipped "
                               "but counted in the FLOPs estimate)"));
}

// The activations of `stage`: one micro-batch through every chunk of it per recompute mode, the
// micro-batches in flight under the schedule (and, zero-bubble, the W's input copies).
void stage_activations(const PlanInputs& pin, const std::vector<ChunkShape>& chunks, int64_t stage,
                       StagePlan& sp) {
  const auto& tr = pin.r.training;
  const Dims& d = pin.d;
  const Layout& lay = pin.lay;
  const Activations& act = pin.act;
  const bool cuda = pin.cuda, flash = pin.flash;
  const double cp_kept = pin.cp_kept;
  MemoryBreakdown& m = sp.memory;
  const auto [layer_rest, layer_core] = act.layer();
  double extras = 0, none = 0, selective = 0, full = 0;
  for (const ChunkShape& c : chunks) {
    const double n = static_cast<double>(c.layers);
    const double moe = d.E > 0 ? static_cast<double>(d.moe_layers(c.first, c.layers)) : 0.0;
    const double moe_extra = moe > 0 ? moe * act.moe_delta() : 0.0;
    extras += (c.pre ? act.pre() : 0) + (c.post ? act.post() : 0) + act.common(c.pre, c.post);
    none += n * (layer_rest + layer_core + cp_kept) + moe_extra;
    // CPU flash attention keeps no probabilities to drop: selective keeps what none does (the
    // cuda model follows Megatron, where selective drops the softmax stats too).
    selective +=
        n * (flash && !cuda ? layer_rest + layer_core : layer_rest) + n * cp_kept + moe_extra;
    full += n * act.layer_input();
  }
  m.activations_none = none + extras;
  m.activations_selective = selective + extras;
  m.activations_full = full + extras;
  m.activations_per_microbatch =
      tr.recompute == config::RecomputeGranularity::Full        ? m.activations_full
      : tr.recompute == config::RecomputeGranularity::Selective ? m.activations_selective
                                                                : m.activations_none;
  const int64_t live =
      live_chunk_activations(lay.pp, lay.vpp, lay.num_microbatches, stage, lay.schedule);
  m.in_flight = static_cast<double>(live) / static_cast<double>(lay.vpp);
  m.activations = m.activations_per_microbatch * m.in_flight;
  // Zero-bubble: the W's input copies, for up to every micro-batch in flight.
  if (config::splits_backward(lay.schedule))
    m.activations += m.in_flight * static_cast<double>(sp.layers) * act.layer_weight_grad_copies();
}

// One pipeline stage: its parameters, what the store keeps, its activations and workspace; `in`
// and `st` receive what the time model needs of it.
StagePlan plan_stage(const PlanInputs& pin, const std::vector<int64_t>& counts, int64_t stage,
                     detail::ShardingInputs& in, detail::ShardedState& st) {
  const config::Recipe& r = pin.r;
  const auto& tr = r.training;
  const Dims& d = pin.d;
  const Layout& lay = pin.lay;
  const Activations& act = pin.act;
  const int64_t V = pin.V;
  const bool cuda = pin.cuda, mixed = pin.mixed, flash = pin.flash;
  const double wbytes = pin.wbytes, moment_bytes = pin.moment_bytes;
  StagePlan sp;
  sp.stage = stage;
  const auto chunks =
      stage_chunks(counts, lay.pp, lay.vpp, stage, config::v_placement(lay.schedule));
  for (const ChunkShape& c : chunks) {
    sp.layers += c.layers;
    sp.parameters += chunk_params(d, V, lay, c);
    if (d.E > 0)
      sp.expert_parameters +=
          d.moe_layers(c.first, c.layers) * (d.E / lay.ep) * expert_params(d, lay.expert_tp());
    sp.first = sp.first || c.pre;
    sp.last = sp.last || c.post;
  }
  // What the store keeps of the weights, gradients, masters and optimizer state (LoRA: the
  // frozen base is weights only), under this layout's strategy and each other one.
  in = detail::ShardingInputs{};
  in.strategy = lay.sharding;
  in.dp = lay.dp * lay.cp;  // gradients and shards over dp x cp
  in.instances = lay.instances;
  in.expert_dp = lay.expert_dp();
  in.microbatches = lay.num_microbatches;
  in.deferred_weight_grads = config::splits_backward(lay.schedule);
  in.wbytes = wbytes;
  in.moment_bytes = moment_bytes;
  in.mixed = mixed;
  in.offload = lay.offload;
  if (r.parallel.grad_compression == config::GradCompression::Topk)
    in.topk_ratio = r.parallel.topk_ratio;
  in.onebit_adam = r.optimizer.type == config::OptimizerType::OnebitAdam;
  in.quantized_weights = r.parallel.zero_quantized_weights;
  in.quantized_grads = r.parallel.zero_quantized_gradients;
  in.units = stage_units(d, V, lay, chunks, r.parallel.fsdp_unit_layers);
  for (const detail::UnitParams& u : in.units) sp.trainable_parameters += u.dense + u.expert;
  MemoryBreakdown& m = sp.memory;
  st = detail::fill_state(in, m);

  stage_activations(pin, chunks, stage, sp);
  const auto [layer_rest, layer_core] = act.layer();

  // Workspace: transient buffers, held once.
  const double D = static_cast<double>(d.D), full_tokens = act.s * act.b;
  double ws = 0;
  if (tr.recompute == config::RecomputeGranularity::Full)
    ws += layer_rest + layer_core;  // the rematerialised layer
  if (tr.recompute == config::RecomputeGranularity::Selective && !(flash && !cuda))
    ws += layer_core;
  if (cuda) {
    if (sp.last) ws += 2 * act.a * full_tokens * static_cast<double>(V) / act.t;
    if (lay.sequence_parallel) ws += 2 * act.a * full_tokens * D;
    if (lay.pp > 1) ws += 2 * act.a * full_tokens * D / act.spd;
    m.reserve = kCudaRuntimeReserve;
  } else {
    if (lay.sequence_parallel) ws += act.a * full_tokens * D * (sp.first ? 3 : 2);
    if (lay.tp > 1 && sp.last) ws += 3 * 4 * full_tokens;
    if (mixed) ws += cpu_widening_workspace(d, tr.precision, V, act.t, full_tokens, sp.last);
  }
  m.workspace = ws + st.transient;
  detail::fill_totals(in, m.activations + ws + m.reserve, m);
  return sp;
}

// FLOPs per step: the trainer's formula, then what recomputation adds.
void add_flops(PlanReport& rep, const PlanInputs& in) {
  const auto& tr = in.r.training;
  const Dims& d = in.d;
  const int64_t V = in.V;
  const bool flash = in.flash;
  const planning::FlopsModel fm = with_moe(
      planning::FlopsModel{d.L, d.D, d.H, d.G, d.Dh, d.F, d.S, V, d.swiglu}, in.r.model.moe);
  const double gb_size = static_cast<double>(tr.global_batch_size);
  rep.flops_per_step = planning::megatron_flops_per_step(fm, tr.global_batch_size);
  const double logits_flops = 6.0 * gb_size * static_cast<double>(d.S * d.D) * V;
  rep.hardware_flops_per_step = rep.flops_per_step;
  if (tr.recompute == config::RecomputeGranularity::Full)
    rep.hardware_flops_per_step += (rep.flops_per_step - logits_flops) / 3;
  if (tr.recompute == config::RecomputeGranularity::Selective &&
      !(flash && tr.device != config::TrainingDevice::CUDA))
    rep.hardware_flops_per_step += 4.0 * gb_size * static_cast<double>(d.S) *
                                   static_cast<double>(d.S) * static_cast<double>(d.L * d.H * d.Dh);
}

// The step time estimate of the device stage (its sharding inputs and state).
void estimate_time(PlanReport& rep, const PlanInputs& pin, const detail::ShardingInputs& in,
                   const detail::ShardedState& state) {
  const auto& tr = pin.r.training;
  const ClusterSpec& cluster = pin.cluster;
  const Dims& d = pin.d;
  const Layout& lay = pin.lay;
  const Activations& act = pin.act;
  const bool cuda = pin.cuda, mixed = pin.mixed;
  const double gb_size = static_cast<double>(tr.global_batch_size);
  // Step time estimate.
  TimeEstimate& t = rep.time;
  const double devices = static_cast<double>(lay.tp * lay.pp * lay.dp * lay.cp);
  const double peak = cluster.gpu_tflops * 1e12;
  const double compute_peak = cuda && !mixed ? peak / 2 : peak;  // fp32: TF32 at half rate
  const double rows = act.s * act.b, width = static_cast<double>(d.D) / act.t;
  t.efficiency = cluster.gemm_efficiency * rows / (rows + 256) * width / (width + 128);
  const double m_count = static_cast<double>(lay.num_microbatches);
  const double compute_mb =
      rep.hardware_flops_per_step / (m_count * devices) / (compute_peak * t.efficiency);
  const double intra = cluster.intra_node_gbps * 1e9, inter = cluster.inter_node_gbps * 1e9;
  const double bw_tp = lay.tp <= cluster.gpus_per_node ? intra : inter;
  const double bw_dp = lay.tp * lay.cp * lay.dp <= cluster.gpus_per_node ? intra : inter;
  const double bw_pp =
      cluster.nodes > 1 && lay.tp * lay.cp * lay.dp >= cluster.gpus_per_node ? inter : intra;
  const double hidden_bytes = act.a * rows * static_cast<double>(d.D);
  const double layers_per_stage = static_cast<double>(d.L) / static_cast<double>(lay.pp);
  const double passes = tr.recompute == config::RecomputeGranularity::Full ? 6 : 4;
  const double tp_mb = layers_per_stage * passes * ring_all_reduce(hidden_bytes, lay.tp, bw_tp);
  // MoE: per MoE layer, dispatch and combine forward, both again backward (and in the
  // recomputed forward): each an all-to-all of the routed rows, (ep - 1) / ep of them leaving.
  // Whole experts (folded) send only this rank's sequence slice; their ep group is ep
  // consecutive ranks, split experts' spans tp x ep.
  const double moe_layers_per_stage =
      static_cast<double>(d.E > 0 ? d.moe_layers(0, d.L) : 0) / static_cast<double>(lay.pp);
  const double bw_ep =
      (lay.experts_fold_tp() ? lay.ep : lay.tp * lay.ep) <= cluster.gpus_per_node ? intra : inter;
  const double routed_bytes = lay.experts_fold_tp() ? hidden_bytes / act.spd : hidden_bytes;
  rep.moe.all_to_all_bytes_per_step =
      moe_layers_per_stage * (passes - 2) * routed_bytes * static_cast<double>(d.topk) *
      d.imbalance * static_cast<double>(lay.ep - 1) / static_cast<double>(lay.ep) * m_count;
  const double ep_mb = rep.moe.all_to_all_bytes_per_step / m_count / bw_ep;
  const double pp_mb =
      lay.pp > 1 ? 2.0 * static_cast<double>(lay.vpp) * hidden_bytes / act.spd / bw_pp : 0.0;
  // Context parallelism: the causal attention core of this rank's rows over the whole sequence.
  const double attention_fwd_s = 2.0 * act.b * act.s * static_cast<double>(d.S * d.H * d.Dh) /
                                 act.t / (compute_peak * t.efficiency);
  const double bw_cp = lay.tp * lay.cp <= cluster.gpus_per_node ? intra : inter;
  const detail::ContextParallelCost cpc = detail::context_parallel_cost(
      d, lay.cp, lay.cp_comm, act.s, act.b, act.t, cuda ? act.a : 4.0, attention_fwd_s, bw_cp);
  const double cp_mb = layers_per_stage * cpc.exposed_s * (passes == 6 ? 1.5 : 1.0);
  t.cp_bytes_per_step = layers_per_stage * cpc.bytes * m_count;
  const double per_mb = compute_mb + tp_mb + pp_mb + ep_mb + cp_mb;
  t.cp_comm = cp_mb * m_count;
  t.compute = compute_mb * m_count;
  t.tp_comm = tp_mb * m_count;
  t.ep_comm = ep_mb * m_count;
  t.pp_comm = pp_mb * m_count;
  t.bubble = per_mb * bubble_microbatches(lay);
  // Data-parallel traffic and the optimizer step of the device stage's trainable parameters
  // (LoRA: the adapters; experts over expert data parallelism).
  const auto group_bw = [&](int64_t ranks) {
    return lay.tp * lay.cp * ranks <= cluster.gpus_per_node ? intra : inter;
  };
  const detail::DataParallelComm dpc =
      detail::data_parallel_comm(in, {group_bw(lay.shard_group()), bw_dp, bw_dp}, compute_mb);
  t.dp_bytes_per_step = dpc.bytes;
  t.dp_comm_exposed = dpc.grads_exposed;
  t.param_gather = dpc.gather_exposed;
  t.optimizer = detail::optimizer_step_seconds(in, state, cluster.memory_bandwidth_gbps * 1e9);
  t.step = t.compute + t.tp_comm + t.pp_comm + t.ep_comm + t.cp_comm + t.bubble +
           t.dp_comm_exposed + t.param_gather + t.optimizer;
  t.tokens_per_second = gb_size * static_cast<double>(d.S) / t.step;
  t.tflops_per_device = rep.flops_per_step / t.step / devices / 1e12;
  t.mfu = rep.flops_per_step / (t.step * devices * peak);
}

}  // namespace

PlanReport plan(const config::Recipe& recipe, const ClusterSpec& cluster, int64_t tokenizer_vocab) {
  const config::Recipe& r = recipe;
  const auto& tr = r.training;
  const int64_t world = cluster.world();
  MT_INPUT_CHECK(world >= 1, "cluster: nodes x gpus_per_node must be >= 1 (got ", cluster.nodes,
                 " x ", cluster.gpus_per_node, ")");
  PlanReport rep;
  rep.recipe = r.source_path;
  rep.arch = config::option_name(r.model.arch);
  rep.device = config::option_name(tr.device);
  rep.precision = config::option_name(tr.precision);
  rep.cluster = cluster;
  rep.layout = layout_of(r, world);
  const Layout& lay = rep.layout;

  const Dims d = dims_of(r);
  rep.vocab = r.model.vocab_size > 0 ? r.model.vocab_size : tokenizer_vocab;
  MT_INPUT_CHECK(rep.vocab > 0, "the vocabulary size must be > 0 (got ", rep.vocab, ")");
  rep.padded_vocab = r.model.padded_vocab_size(tokenizer_vocab, lay.tp);
  const int64_t V = rep.padded_vocab;
  rep.params = count_parameters(r.model, V, r.data.bert_binary_head);

  const bool cuda = tr.device == config::TrainingDevice::CUDA;
  const bool mixed = is_mixed(tr.precision);
  const double wbytes = mixed ? 2.0 : 4.0;  // model weights / activations on cuda
  const bool adam = r.optimizer.type != config::OptimizerType::SGD;  // two moments
  // The recipe's model.attention_backend (auto: flash on cuda); --no-flash-attention forces the
  // unfused model.
  const bool flash = cluster.flash_attention && r.model.flash_attention(tr.device);
  const Activations act{d,
                        lay,
                        cuda,
                        flash,
                        wbytes,
                        static_cast<double>(V),
                        static_cast<double>(d.S / lay.cp),
                        static_cast<double>(lay.micro_batch),
                        static_cast<double>(lay.tp),
                        lay.sequence_parallel ? static_cast<double>(lay.tp) : 1.0};
  const double cp_kept = detail::context_parallel_cost(d, lay.cp, lay.cp_comm, act.s, act.b, act.t,
                                                       cuda ? act.a : 4.0, 0.0, 1.0)
                             .kept_bytes;
  // 1-bit Adam keeps its error feedback too: the worker's (whole) and the server's (1/dp).
  const double onebit_errors =
      r.optimizer.type == config::OptimizerType::OnebitAdam
          ? 4.0 * (1.0 + 1.0 / static_cast<double>(std::max<int64_t>(lay.dp * lay.cp, 1)))
          : 0.0;
  const PlanInputs in{r,      cluster, d,   lay, V, cuda, mixed, flash, wbytes,
                      (adam ? 8.0 : 4.0) + onebit_errors, act, cp_kept};
  add_notes(rep, in);

  const auto counts = virtual_stage_layers(r, lay.pp, lay.vpp);
  // Per stage: what the time model needs of the device stage.
  std::vector<detail::ShardingInputs> sharding_inputs(static_cast<size_t>(lay.pp));
  std::vector<detail::ShardedState> sharded(static_cast<size_t>(lay.pp));
  for (int64_t stage = 0; stage < lay.pp; ++stage)
    rep.stages.push_back(plan_stage(in, counts, stage, sharding_inputs[static_cast<size_t>(stage)],
                                    sharded[static_cast<size_t>(stage)]));
  for (size_t i = 1; i < rep.stages.size(); ++i)
    if (rep.stages[i].memory.total > rep.stages[rep.worst_stage].memory.total) rep.worst_stage = i;
  rep.fits = rep.memory().total <= cluster.gpu_memory_bytes;
  if (d.E > 0) {
    rep.moe.experts_per_device = d.E / lay.ep;
    rep.moe.expert_params_per_device = static_cast<double>(rep.device_stage().expert_parameters);
    rep.moe.imbalance = d.imbalance;
  }
  add_flops(rep, in);
  estimate_time(rep, in, sharding_inputs.at(rep.worst_stage), sharded.at(rep.worst_stage));
  return rep;
}

}  // namespace megatron::planning
