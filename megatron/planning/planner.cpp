#include "megatron/planning/planner.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "kernels/cpu/gemm.h"
#include "megatron/core/error.h"
#include "megatron/planning/flops.h"
#include "megatron/planning/sharding_memory.h"
#include "models/registry.h"

namespace megatron::planning {
namespace {

constexpr double kCudaRuntimeReserve = 2e9;  // context, NCCL, cuBLAS workspace, fragmentation

// Sizes derived from the model config.
struct Dims {
  int64_t L, D, H, G, Dh, F, fc1, S, P, E, topk;
  int64_t moe_ffn, moe_fc1, shared_ffn, shared_fc1;  // MoE layers' experts and shared expert
  std::vector<bool> moe_layer;                       // per layer (MoE models)
  double imbalance = 1;  // tokens of the busiest expert-parallel rank / mean (see moe_imbalance)
  bool layernorm, swiglu, bias, qkv_bias, rope, tied, bert, binary_head;
  double hidden_dropout, attention_dropout;
  // peft: lora (rank 0: none): adapters on these projections; everything else frozen.
  int64_t lora_rank = 0;
  bool lora_qkv = false, lora_proj = false, lora_fc1 = false, lora_fc2 = false;
  int64_t norm() const { return layernorm ? 2 * D : D; }
  bool is_moe(int64_t layer) const { return E > 0 && moe_layer[static_cast<size_t>(layer)]; }
  int64_t moe_layers(int64_t first, int64_t count) const {
    int64_t n = 0;
    for (int64_t l = first; l < first + count; ++l) n += is_moe(l) ? 1 : 0;
    return n;
  }
};

// Dropless routing sizes expert activations and all-to-alls for the busiest rank at this
// multiple of the mean (a planning assumption; the trainer logs the real imbalance); with a
// capacity factor, for the capacity.
constexpr double kDroplessImbalance = 1.5;

Dims dims_of(const config::ModelConfig& m, bool bert_binary_head = true);

// The whole recipe's model: the model section, BERT's head and the LoRA adapters.
Dims dims_of(const config::Recipe& r) {
  Dims d = dims_of(r.model, r.data.bert_binary_head);
  if (r.peft.lora()) {
    d.lora_rank = r.peft.dim;
    d.lora_qkv = r.peft.targets("linear_qkv");
    d.lora_proj = r.peft.targets("linear_proj");
    d.lora_fc1 = r.peft.targets("linear_fc1");
    d.lora_fc2 = r.peft.targets("linear_fc2");
  }
  return d;
}

// The model the trainer builds (models/registry.h), in the planner's terms.
Dims dims_of(const config::ModelConfig& m, bool bert_binary_head) {
  const TransformerSpec t = models::transformer_spec_from_model(m);
  Dims d{};
  d.binary_head = bert_binary_head;
  d.L = t.num_layers;
  d.D = t.hidden;
  d.H = t.heads;
  d.G = t.query_groups;
  d.Dh = t.head_dim();
  d.F = t.ffn;
  d.swiglu = t.swiglu;
  d.fc1 = d.swiglu ? 2 * d.F : d.F;
  d.S = t.seq_length;
  d.P = m.max_positions();
  d.E = m.moe.num_experts;
  d.topk = m.moe.moe_router_topk;
  d.moe_ffn = m.moe.expert_ffn(d.F);
  d.moe_fc1 = d.swiglu ? 2 * d.moe_ffn : d.moe_ffn;
  d.shared_ffn = m.moe.moe_shared_expert_intermediate_size;
  d.shared_fc1 = d.swiglu ? 2 * d.shared_ffn : d.shared_ffn;
  for (int64_t l = 0; l < d.L; ++l) d.moe_layer.push_back(m.moe.moe_layer_freq.is_moe(l));
  d.imbalance = m.moe.moe_expert_capacity_factor.value_or(kDroplessImbalance);
  d.bert = m.arch == config::Arch::BERT;  // post-LN blocks, a decoder tied to the embeddings
  d.layernorm = t.norm == Norm::Kind::LayerNorm;
  d.bias = t.bias;
  d.qkv_bias = t.bias || t.qkv_bias;
  d.rope = t.rope;
  d.tied = d.bert || m.tie_embeddings;
  d.hidden_dropout = t.hidden_dropout;
  d.attention_dropout = t.attention_dropout;
  return d;
}

// A routed expert's weights on one tensor-parallel rank (no biases).
int64_t expert_params(const Dims& d, int64_t tp) { return (d.moe_fc1 + d.moe_ffn) * d.D / tp; }

// One layer's LoRA adapters per tp rank (megatron/transformer/lora.h): a column-parallel base
// has A [r, in] whole and B [out / tp, r]; a row-parallel one A [r, in / tp] and B [out, r] whole.
int64_t lora_layer_params(const Dims& d, int64_t tp) {
  const int64_t r = d.lora_rank, qkv = (d.H + 2 * d.G) * d.Dh;
  if (r == 0) return 0;
  int64_t n = 0;
  if (d.lora_qkv) n += r * d.D + qkv / tp * r;
  if (d.lora_proj) n += r * d.H * d.Dh / tp + d.D * r;
  if (d.lora_fc1) n += r * d.D + d.fc1 / tp * r;
  if (d.lora_fc2) n += r * d.F / tp + d.D * r;
  return n;
}

int64_t layer_params(const Dims& d, int64_t tp, int64_t ep, int64_t etp, bool moe) {
  const int64_t qkv = (d.H + 2 * d.G) * d.Dh;
  int64_t n = 2 * d.norm();
  n += qkv * d.D / tp + (d.qkv_bias ? qkv / tp : 0);
  n += d.H * d.Dh * d.D / tp + (d.bias ? d.D : 0);
  auto dense_mlp = [&](int64_t fc1, int64_t F) {
    return fc1 * d.D / tp + (d.bias ? fc1 / tp : 0) + F * d.D / tp + (d.bias ? d.D : 0);
  };
  if (!moe) return n + dense_mlp(d.fc1, d.F) + lora_layer_params(d, tp);
  // The router, this rank's experts, the shared expert.
  n += d.E * d.D + (d.E / ep) * expert_params(d, etp);
  if (d.shared_ffn > 0) n += dense_mlp(d.shared_fc1, d.shared_ffn);
  return n;
}

// Word (+ position, token type) embeddings, and BERT's embedding norm (post-LN), per tp rank.
int64_t embedding_params(const Dims& d, int64_t V, int64_t tp) {
  int64_t n = V * d.D / tp;
  if (!d.rope) n += d.P * d.D;
  if (d.bert) n += 2 * d.D + d.norm();
  return n;
}

// What the last stage adds (not counting a tied copy of the word embeddings), per tp rank.
int64_t head_params(const Dims& d, int64_t V, int64_t tp) {
  int64_t n = d.tied ? 0 : V * d.D / tp;
  if (d.bert)  // LM-head dense + norm + vocab-parallel output bias, pooler, binary head
    n += d.D * d.D + d.D + d.norm() + V / tp + (d.binary_head ? d.D * d.D + d.D + 2 * d.D + 2 : 0);
  else
    n += d.norm();  // final norm
  return n;
}

bool is_mixed(config::Precision precision) { return precision != config::Precision::FP32; }

// The fp32 copies 16-bit CPU ops make for one call (bytes; the largest call counts): attention
// widens q/k/v, the output and their gradients whole (backward: qkv, out, d(out), d(qkv)); a
// linear layer without native 16-bit GEMMs (fp16, or bf16 on a CPU without bf16 instructions)
// widens its weight and one block of input and output rows (kernels::cpu::widened_gemm_block_rows).
// The cross entropy widens fp16 logits (measured: the forward's copy is the one at the peak).
// The elementwise ops, norms and embeddings read 16-bit tensors as stored, and so does the cross
// entropy bf16 logits.
double cpu_widening_workspace(const Dims& d, config::Precision precision, int64_t V, double t,
                              double tokens, bool last_stage) {
  const double qkv = static_cast<double>((d.H + 2 * d.G) * d.Dh) / t;
  const double attn = static_cast<double>(d.H * d.Dh) / t;
  double most = tokens * 2 * (qkv + attn);
  const bool native = precision == config::Precision::BF16 && kernels::cpu::native_bf16_gemm();
  if (!native) {
    const auto rows = static_cast<int64_t>(tokens);
    auto linear = [&](double in, double out) {
      const auto b = kernels::cpu::widened_gemm_block_rows(rows, static_cast<int64_t>(in),
                                                           static_cast<int64_t>(out));
      return in * out + static_cast<double>(b) * (in + out);
    };
    const double D = static_cast<double>(d.D);
    most = std::max(most, linear(D, static_cast<double>(d.fc1) / t));
    most = std::max(most, linear(static_cast<double>(d.F) / t, D));
    most = std::max(most, linear(D, qkv));
    if (last_stage) most = std::max(most, linear(D, static_cast<double>(V) / t));
  }
  if (precision == config::Precision::FP16 && last_stage)
    most = std::max(most, tokens * static_cast<double>(V) / t);
  return 4 * most;
}

using detail::ring_all_reduce;

// Activation bytes of one micro-batch for the pieces of a model chunk.
struct Activations {
  const Dims& d;
  const Layout& lay;
  bool cuda;
  bool flash;
  double a;    // bytes per activation element
  double V;    // padded vocab
  double s;    // sequence per context-parallel rank
  double b;    // micro-batch
  double t;    // tensor parallel
  double spd;  // sequence-parallel divisor (t or 1)

  // One layer with every activation kept (no recompute), split as (rest, attention core).
  std::pair<double, double> layer() const {
    const double D = static_cast<double>(d.D), H = static_cast<double>(d.H),
                 G = static_cast<double>(d.G), Dh = static_cast<double>(d.Dh),
                 F = static_cast<double>(d.F), fc1 = static_cast<double>(d.fc1),
                 S = static_cast<double>(d.S);
    const bool drop = d.hidden_dropout > 0;
    if (cuda) {
      const double rep = s * b * D * (4 * a + (drop ? 2 : 0)) / spd;
      const double tensor = s * b * a * (2 * H * Dh + 2 * G * Dh + (fc1 + F)) / t;
      const double core = flash ? 4 * b * H * s / t
                                : b * H * s * S * (a + (d.attention_dropout > 0 ? 1 + a : 0)) / t;
      return {rep + tensor, core};
    }
    // CPU: the TransformerBlock::Ctx tensors (activations in the model dtype, norm statistics
    // fp32), forward and the backward scratch.
    const double rows = s * b / spd, full = s * b;
    const double nst = d.layernorm ? 2 : 1;
    const double qkvw = (H + 2 * G) * Dh / t, attnw = H * Dh / t, fc1w = fc1 / t, Fl = F / t;
    const double fwd = rows * 6 * D + full * (qkvw + attnw + fc1w + Fl);
    const double stats = rows * 2 * nst;
    const double bwd = rows * D * (2 + (drop ? 1 : 0)) + full * (Fl + fc1w + attnw + qkvw);
    // probs [b, H/t, s, s] (fp32); flash attention keeps only lse [b, H/t, s]
    const double core = flash ? b * H / t * s : b * H / t * s * S;
    return {a * (fwd + bwd) + 4 * stats, 4 * core};
  }
  double layer_input() const { return a * s * b * static_cast<double>(d.D) / spd; }
  // What an MoE layer holds beyond layer()'s with a dense MLP replaced: the experts' rows for
  // the busiest rank (topk x imbalance per token) in place of the dense MLP, the shared expert,
  // the dispatch and combine buffers, the fp32 router statistics. Split experts see the whole
  // micro-batch's rows with 1/t of each expert; whole experts (folded) this rank's slice.
  double moe_delta() const {
    const double D = static_cast<double>(d.D), full = s * b, rows = s * b / spd;
    const double k = static_cast<double>(d.topk), f = d.imbalance;
    const double routed = lay.experts_fold_tp() ? rows : full;
    const double et = static_cast<double>(lay.expert_tp());
    const double dense_mlp = a * full * (d.fc1 + d.F) / t * (cuda ? 1 : 2);
    const double experts = a * routed * k * f * (d.moe_fc1 + d.moe_ffn) / et * (cuda ? 1 : 2);
    const double shared =
        a * full * static_cast<double>(d.shared_fc1 + d.shared_ffn) / t * (cuda ? 1 : 2);
    // rows in and out (x2 for backward) at the experts, the returned rows, fp32 combine rows.
    const double buffers = a * routed * k * D * (4 * f + 2) + 4 * rows * k * D * 2;
    const double router = 4 * rows * (D + 2 * static_cast<double>(d.E));
    return experts + shared + buffers + router - dense_mlp;
  }

  // Per-micro-batch bytes outside the layers (embeddings; final norm, logits, loss).
  double pre() const {
    const double D = static_cast<double>(d.D), rows = s * b / spd;
    if (cuda) return d.hidden_dropout > 0 ? rows * D : 0;         // embedding dropout mask
    double n = a * rows * D;                                      // embedded
    if (!d.rope) n += 4 * rows;                                   // int32 positions
    if (d.hidden_dropout > 0) n += a * rows * D;                  // embedding dropout output
    if (d.bert) n += a * 2 * rows * D + 4 * 2 * rows + 4 * rows;  // sum scratch, norm, types
    return n;
  }
  double post() const {
    const double D = static_cast<double>(d.D), rows = s * b / spd, full = s * b;
    if (cuda) {
      double n = 2 * a * rows * D + 4 * full * V / t;  // final norm + output inputs, fp32 softmax
      if (d.bert) n += a * rows * D;                   // the MLM transform's activation input
      return n;
    }
    const double nst = d.layernorm ? 2 : 1;
    double n = a * full * V / t + 4 * 3 * full;  // logits; fp32 losses, lse, d(losses)
    if (lay.sequence_parallel && d.tied) n += a * 2 * full * D;  // gathered head input + grad
    if (d.bert)  // MLM transform / GELU / norm outputs and their grads, pooler + NSP head
      n += a * (5 * rows * D + (d.binary_head ? 5 * b * D : 0)) + 4 * 2 * rows;
    else
      n += 4 * nst * rows + a * rows * D;  // final norm
    return n;
  }
  // Per activation set regardless of the chunk: ping-pong gradients (CPU), micro-batch ids,
  // pipeline receive buffers.
  double common(bool has_pre, bool has_post) const {
    const double D = static_cast<double>(d.D), rows = s * b / spd, full = s * b;
    if (cuda) return 0;
    double n = 2 * a * rows * D;
    if (has_pre || has_post) n += (d.bert ? 13 : 8) * full;  // int32 tokens, labels (+ types, mask)
    if (lay.pp > 1 && !has_pre) n += 2 * a * rows * D;
    return n;
  }
};

struct ChunkShape {
  int64_t layers;
  bool pre, post;
  int64_t first = 0;  // its first layer
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

std::vector<ChunkShape> stage_chunks(const std::vector<int64_t>& counts, int64_t pp, int64_t vpp,
                                     int64_t stage) {
  std::vector<ChunkShape> out;
  const int64_t stages = pp * vpp;
  for (int64_t c = 0; c < vpp; ++c) {
    const int64_t v = c * pp + stage;
    int64_t first = 0;
    for (int64_t i = 0; i < v; ++i) first += counts[static_cast<size_t>(i)];
    out.push_back({counts[static_cast<size_t>(v)], v == 0, v == stages - 1, first});
  }
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
    if (d.tied && !c.pre) n += V * d.D / lay.tp;
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
    if (c.pre || (c.post && d.tied)) add(word);
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
  for (const ChunkShape& c : stage_chunks(counts, lay.pp, lay.vpp, stage))
    n += chunk_params(d, padded_vocab, lay, c);
  return n;
}

int64_t live_chunk_activations(int64_t pp, int64_t vpp, int64_t m, int64_t stage) {
  if (vpp <= 1) return std::min(pp - stage, m);
  return std::min(vpp * m, 2 * (pp - stage - 1) + (vpp - 1) * pp + 1);
}

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

  Layout& lay = rep.layout;
  lay.tp = r.parallel.tensor;
  lay.pp = r.parallel.pipeline;
  lay.cp = r.parallel.context;
  lay.ep = r.parallel.expert;
  lay.etp = r.parallel.expert_tensor;
  lay.vpp = r.parallel.virtual_stages();
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
  lay.recompute = config::option_name(tr.recompute);
  MT_INPUT_CHECK(lay.vpp == 1 || lay.num_microbatches % lay.pp == 0, r.source_path,
                 ": parallel.virtual_pipeline: the interleaved schedule needs the number of "
                 "micro-batches per step to be a multiple of parallel.pipeline (got ",
                 lay.num_microbatches, " micro-batches, pipeline ", lay.pp, ")");

  const Dims d = dims_of(r);
  rep.vocab = r.model.vocab_size > 0 ? r.model.vocab_size : tokenizer_vocab;
  MT_INPUT_CHECK(rep.vocab > 0, "the vocabulary size must be > 0 (got ", rep.vocab, ")");
  rep.padded_vocab = r.model.padded_vocab_size(tokenizer_vocab, lay.tp);
  const int64_t V = rep.padded_vocab;
  rep.params = count_parameters(r.model, V, r.data.bert_binary_head);

  const bool cuda = tr.device == config::TrainingDevice::CUDA;
  const bool mixed = is_mixed(tr.precision);
  const double wbytes = mixed ? 2.0 : 4.0;  // model weights / activations on cuda
  const bool adam = r.optimizer.type == config::OptimizerType::AdamW;
  const double moment_bytes = adam ? 8.0 : 4.0;
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
  if (cuda && !flash)
    rep.notes.push_back("unfused attention: the [b, H/t, s, s] softmax is stored per layer");
  if (d.E > 0)
    rep.notes.push_back(
        r.model.moe.moe_expert_capacity_factor
            ? "MoE: expert activations and all-to-alls sized for the capacity factor"
            : "MoE: dropless routing; expert activations and all-to-alls sized for the busiest "
              "rank at 1.5x the mean tokens per expert (the trainer logs the real imbalance); "
              "expert compute counted balanced");
  if (lay.cp > 1) rep.notes.push_back("context parallelism: its communication is not modelled");
  if (d.lora_rank > 0)
    rep.notes.push_back(concat("LoRA rank ", d.lora_rank,
                               ": gradients, fp32 masters and optimizer state for the adapters "
                               "only; the frozen base is weights only (its dW GEMMs are skipped "
                               "but counted in the FLOPs estimate)"));

  const auto counts = virtual_stage_layers(r, lay.pp, lay.vpp);
  std::vector<detail::ShardingInputs> sharding_inputs;  // per stage (the time model's too)
  std::vector<detail::ShardedState> sharded;
  for (int64_t stage = 0; stage < lay.pp; ++stage) {
    StagePlan sp;
    sp.stage = stage;
    const auto chunks = stage_chunks(counts, lay.pp, lay.vpp, stage);
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
    detail::ShardingInputs in;
    in.strategy = lay.sharding;
    in.dp = lay.dp;
    in.instances = lay.instances;
    in.expert_dp = lay.expert_dp();
    in.microbatches = lay.num_microbatches;
    in.wbytes = wbytes;
    in.moment_bytes = moment_bytes;
    in.mixed = mixed;
    in.offload = lay.offload;
    in.units = stage_units(d, V, lay, chunks, r.parallel.fsdp_unit_layers);
    for (const detail::UnitParams& u : in.units) sp.trainable_parameters += u.dense + u.expert;
    MemoryBreakdown& m = sp.memory;
    const detail::ShardedState st = detail::fill_state(in, m);
    sharding_inputs.push_back(in);
    sharded.push_back(st);

    // Activations of one micro-batch through every chunk of this stage, per recompute mode.
    const auto [layer_rest, layer_core] = act.layer();
    double extras = 0, none = 0, selective = 0, full = 0;
    for (const ChunkShape& c : chunks) {
      const double n = static_cast<double>(c.layers);
      const double moe = d.E > 0 ? static_cast<double>(d.moe_layers(c.first, c.layers)) : 0.0;
      const double moe_extra = moe > 0 ? moe * act.moe_delta() : 0.0;
      extras += (c.pre ? act.pre() : 0) + (c.post ? act.post() : 0) + act.common(c.pre, c.post);
      none += n * (layer_rest + layer_core) + moe_extra;
      // CPU flash attention keeps no probabilities to drop: selective keeps what none does (the
      // cuda model follows Megatron, where selective drops the softmax stats too).
      selective += n * (flash && !cuda ? layer_rest + layer_core : layer_rest) + moe_extra;
      full += n * act.layer_input();
    }
    m.activations_none = none + extras;
    m.activations_selective = selective + extras;
    m.activations_full = full + extras;
    m.activations_per_microbatch =
        tr.recompute == config::RecomputeGranularity::Full        ? m.activations_full
        : tr.recompute == config::RecomputeGranularity::Selective ? m.activations_selective
                                                                  : m.activations_none;
    const int64_t live = live_chunk_activations(lay.pp, lay.vpp, lay.num_microbatches, stage);
    m.in_flight = static_cast<double>(live) / static_cast<double>(lay.vpp);
    m.activations = m.activations_per_microbatch * m.in_flight;

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
    rep.stages.push_back(sp);
  }
  for (size_t i = 1; i < rep.stages.size(); ++i)
    if (rep.stages[i].memory.total > rep.stages[rep.worst_stage].memory.total) rep.worst_stage = i;
  rep.fits = rep.memory().total <= cluster.gpu_memory_bytes;
  if (d.E > 0) {
    rep.moe.experts_per_device = d.E / lay.ep;
    rep.moe.expert_params_per_device = static_cast<double>(rep.device_stage().expert_parameters);
    rep.moe.imbalance = d.imbalance;
  }

  // FLOPs: the trainer's formula, then what recomputation adds.
  const planning::FlopsModel fm =
      with_moe(planning::FlopsModel{d.L, d.D, d.H, d.G, d.Dh, d.F, d.S, V, d.swiglu}, r.model.moe);
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
  const double per_mb = compute_mb + tp_mb + pp_mb + ep_mb;
  t.compute = compute_mb * m_count;
  t.tp_comm = tp_mb * m_count;
  t.ep_comm = ep_mb * m_count;
  t.pp_comm = pp_mb * m_count;
  t.bubble = per_mb * static_cast<double>(lay.pp - 1) / static_cast<double>(lay.vpp);
  // Data-parallel traffic and the optimizer step of the device stage's trainable parameters
  // (LoRA: the adapters; experts over expert data parallelism).
  const detail::ShardingInputs& in = sharding_inputs.at(rep.worst_stage);
  const auto group_bw = [&](int64_t ranks) {
    return lay.tp * lay.cp * ranks <= cluster.gpus_per_node ? intra : inter;
  };
  const detail::DataParallelComm dpc =
      detail::data_parallel_comm(in, {group_bw(lay.shard_group()), bw_dp, bw_dp}, compute_mb);
  t.dp_bytes_per_step = dpc.bytes;
  t.dp_comm_exposed = dpc.grads_exposed;
  t.param_gather = dpc.gather_exposed;
  t.optimizer = detail::optimizer_step_seconds(in, sharded.at(rep.worst_stage),
                                               cluster.memory_bandwidth_gbps * 1e9);
  t.step = t.compute + t.tp_comm + t.pp_comm + t.ep_comm + t.bubble + t.dp_comm_exposed +
           t.param_gather + t.optimizer;
  t.tokens_per_second = gb_size * static_cast<double>(d.S) / t.step;
  t.tflops_per_device = rep.flops_per_step / t.step / devices / 1e12;
  t.mfu = rep.flops_per_step / (t.step * devices * peak);
  return rep;
}

}  // namespace megatron::planning
