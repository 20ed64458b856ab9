#pragma once
// Shared by the trainer-level equivalence programs (test_{tp,pp,dp,llama,bert}_equivalence.cpp,
// test_checkpoint_reshard.cpp): deterministic synthetic data for the decoders (token windows)
// and for BERT (masked-LM batches with padding, two segments and the sentence-pair label), a
// recipe builder for tiny models in any layout, and the train / compare helpers.
//
// The data, the initialisation and the dropout masks are functions of the seed and of global
// indices only, so every rank computes the single-process reference itself (on a group of one)
// and compares its layout's run with it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "megatron/parallel/mesh.h"
#include "megatron/training/trainer.h"
#include "parallel_test.h"

namespace megatron::equivalence {

namespace mp = megatron::parallel;

// The synthetic tokenizer's vocabulary (the trainer pads it per recipe).
constexpr int32_t kVocab = 37;

// How SyntheticTokens draws sample i: from mt19937(i * seed_mul + seed_add), a random first token
// then token[t] = (mul * token[t - 1] + step) mod vocab, one in four replaced by a random token
// (a learnable bigram structure); with `uniform`, every token random.
struct TokenRule {
  int64_t seed_mul = 7919, seed_add = 3;
  int32_t mul = 5, step = 2;
  bool uniform = false;
};

// GPT/LLaMA training data: token windows of seq_length + 1 ids.
class SyntheticTokens final : public training::SampleSource {
 public:
  explicit SyntheticTokens(TokenRule rule = {}, int64_t seq_length = 16, int32_t vocab = kVocab)
      : rule_(rule), seq_(seq_length), vocab_(vocab) {}
  int64_t seq_length() const override { return seq_; }
  int64_t samples_per_epoch() const override { return 1 << 20; }
  void get(int64_t index, int32_t* tokens) const override {
    std::mt19937 rng(static_cast<uint32_t>(index * rule_.seed_mul + rule_.seed_add));
    if (rule_.uniform) {
      for (int64_t t = 0; t <= seq_; ++t) tokens[t] = static_cast<int32_t>(rng() % vocab_);
      return;
    }
    tokens[0] = static_cast<int32_t>(rng() % vocab_);
    for (int64_t t = 1; t <= seq_; ++t)
      tokens[t] = static_cast<int32_t>(
          (rule_.mul * tokens[t - 1] + (rng() % 4 == 0 ? rng() % vocab_ : rule_.step)) % vocab_);
  }

 private:
  TokenRule rule_;
  int64_t seq_;
  int32_t vocab_;
};

// BERT training data in the layout of BertBatchSource: "[CLS] A [SEP] B [SEP]" then padding,
// with a different real length per sample (seq_length / 2 .. seq_length), token types 0 for the
// first segment and 1 for the second, ~15% of the words (at least one) masked Megatron-style
// (80% [MASK], 10% a random word, 10% kept; labels -100 elsewhere) and the sentence-pair label.
// Learnable structure: words follow a chain (word + 1, one in five replaced by a random word
// skewed towards the first words); B continues A's chain (label 0) or starts at a random word
// (label 1).
class SyntheticBert final : public training::BatchSource {
 public:
  static constexpr int32_t kPad = 0, kCls = 1, kSep = 2, kMask = 3, kFirstWord = 4;

  explicit SyntheticBert(int64_t seq_length = 16, bool binary_head = true, int64_t seed = 29,
                         int32_t vocab = kVocab)
      : seq_(seq_length), binary_head_(binary_head), seed_(seed), vocab_(vocab) {
    MT_CHECK(seq_length >= 10 && vocab > kFirstWord, "SyntheticBert: seq_length ", seq_length,
             " < 10 or vocabulary ", vocab, " without words");
  }
  int64_t seq_length() const override { return seq_; }
  int64_t samples_per_epoch() const override { return 1 << 20; }

  void fill(int64_t first_sample, int64_t micro_batch_size, models::MicroBatch& mb) const override {
    const int64_t S = seq_, B = micro_batch_size;
    int32_t* tokens = ensure(mb.tokens, {S, B}, DType::I32, Device::CPU).data<int32_t>();
    int32_t* types = ensure(mb.token_types, {S, B}, DType::I32, Device::CPU).data<int32_t>();
    int32_t* labels = ensure(mb.labels, {S, B}, DType::I32, Device::CPU).data<int32_t>();
    uint8_t* padding = ensure(mb.padding_mask, {B, S}, DType::U8, Device::CPU).data<uint8_t>();
    int32_t* nsp = binary_head_
                       ? ensure(mb.nsp_labels, {B}, DType::I32, Device::CPU).data<int32_t>()
                       : nullptr;
    if (!binary_head_) mb.nsp_labels = Tensor();
    std::vector<int32_t> tok(static_cast<size_t>(S)), type(static_cast<size_t>(S)),
        label(static_cast<size_t>(S));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = sample(first_sample + b, tok, type, label);
      for (int64_t s = 0; s < S; ++s) {
        const auto i = static_cast<size_t>(s);
        tokens[s * B + b] = tok[i];
        types[s * B + b] = type[i];
        labels[s * B + b] = label[i];
        padding[b * S + s] = s < len ? 1 : 0;
      }
      if (nsp) nsp[b] = is_random(first_sample + b);
    }
  }

 private:
  int32_t words() const { return vocab_ - kFirstWord; }
  int32_t next_word(int32_t w, std::mt19937& rng) const {
    if (rng() % 5 == 0) return random_word(rng);
    return kFirstWord + (w - kFirstWord + 1) % words();
  }
  // Skewed towards the first words (the minimum of three uniform draws).
  int32_t random_word(std::mt19937& rng) const {
    const auto a = rng() % words(), b = rng() % words(), c = rng() % words();
    return kFirstWord + static_cast<int32_t>(std::min({a, b, c}));
  }
  int32_t is_random(int64_t index) const {
    std::mt19937 rng(static_cast<uint32_t>(index * 6007 + seed_ + 1));
    return static_cast<int32_t>(rng() % 2);
  }
  // Writes sample `index` (padded to seq_length); returns its real length.
  int64_t sample(int64_t index, std::vector<int32_t>& tok, std::vector<int32_t>& type,
                 std::vector<int32_t>& label) const {
    std::mt19937 rng(static_cast<uint32_t>(index * 7877 + seed_));
    const int64_t S = seq_, len = S / 2 + static_cast<int64_t>(rng() % (S / 2 + 1));
    const int64_t n_words = len - 3, a_len = 1 + static_cast<int64_t>(rng() % (n_words - 1));
    std::fill(tok.begin(), tok.end(), kPad);
    std::fill(type.begin(), type.end(), 0);
    std::fill(label.begin(), label.end(), models::kIgnoreIndex);
    std::vector<int64_t> word_positions;
    int32_t w = random_word(rng);
    int64_t s = 0;
    tok[static_cast<size_t>(s++)] = kCls;
    for (int64_t i = 0; i < a_len; ++i, w = next_word(w, rng)) {
      word_positions.push_back(s);
      tok[static_cast<size_t>(s++)] = w;
    }
    tok[static_cast<size_t>(s++)] = kSep;
    if (is_random(index)) w = random_word(rng);
    for (int64_t i = a_len; i < n_words; ++i, w = next_word(w, rng)) {
      word_positions.push_back(s);
      type[static_cast<size_t>(s)] = 1;
      tok[static_cast<size_t>(s++)] = w;
    }
    type[static_cast<size_t>(s)] = 1;
    tok[static_cast<size_t>(s++)] = kSep;
    // Mask max(1, 15%) distinct words.
    const int64_t n_mask = std::max<int64_t>(1, (15 * n_words + 50) / 100);
    for (int64_t m = 0; m < n_mask; ++m) {
      const auto pick = static_cast<size_t>(rng() % word_positions.size());
      const auto p = static_cast<size_t>(word_positions[pick]);
      word_positions.erase(word_positions.begin() + static_cast<std::ptrdiff_t>(pick));
      label[p] = tok[p];
      const auto r = rng() % 10;
      if (r < 8)
        tok[p] = kMask;
      else if (r == 8)
        tok[p] = random_word(rng);
    }
    return len;
  }

  int64_t seq_;
  bool binary_head_;
  int64_t seed_;
  int32_t vocab_;
};

// A tiny model and its training setup, written out as a recipe (parsed and validated like a
// recipe file). arch: gpt (LayerNorm, GELU, learned positions, tied), llama (RMSNorm, SwiGLU,
// RoPE, no biases, untied) or bert (post-LN encoder, masked-LM + sentence-pair heads).
struct RecipeSpec {
  std::string arch = "gpt";
  int64_t layers = 2, hidden = 32, heads = 4;
  int64_t groups = 0, ffn = 0;  // 0: the model's default (heads; 4 * hidden)
  int64_t seq = 16;
  double dropout = 0;            // hidden and attention
  bool binary_head = true;       // bert
  std::string model_extra = {};  // more model keys, e.g. "num_experts: 4, moe_router_topk: 2"
  // layout
  int64_t tp = 1, pp = 1, vpp = 1;
  int64_t dp = 0;   // 0: auto (world / tp / pp)
  int64_t ep = 1;   // expert parallel (MoE), carved out of dp
  int64_t etp = 0;  // parallel.expert_tensor (0: auto = tp; 1: experts whole, ep folds tp)
  bool sp = false, distributed = false;
  std::vector<int64_t> stage_layers = {};  // explicit (uneven) pipeline split
  // parallel.data_parallel_sharding_strategy (empty: unset) and hybrid sharding's instances
  std::string sharding = {};
  int64_t dp_instances = 1;
  int64_t fsdp_unit_layers = 1;
  int64_t cp = 1;                   // parallel.context
  std::string cp_comm = {};         // parallel.cp_comm_type (empty: unset)
  std::string parallel_extra = {};  // more parallel keys, e.g. "grad_compression: topk"
  std::string schedule = {};        // parallel.pipeline_schedule (empty: unset)
  // training
  int64_t micro = 8, global = 8, iters = 20, eval_interval = 10, eval_iters = 1;
  uint64_t seed = 1;
  std::string precision = "fp32";
  std::string recompute = "none";
  double lr = 0.005, min_lr = 0.0005, weight_decay = 0.1, clip_grad = 0.5;
  int64_t warmup = 3;
  std::optional<int64_t> decay_iters = {};
  std::string save = {}, load = {};   // checkpoint directories (empty: none)
  std::string checkpoint_extra = {};  // more checkpoint keys, e.g. ", async_save: true"
  std::string extra_sections = {};    // more top-level YAML, e.g. "peft: {type: lora}\n"
};

inline config::Recipe make_recipe(const RecipeSpec& s,
                                  const std::string& name = "equivalence.yaml") {
  std::ostringstream y;
  y << "model: {arch: " << s.arch << ", num_layers: " << s.layers << ", hidden_size: " << s.hidden
    << ", num_attention_heads: " << s.heads << ", seq_length: " << s.seq
    << ", make_vocab_size_divisible_by: 8";
  if (s.groups > 0) y << ", num_query_groups: " << s.groups;
  if (s.ffn > 0) y << ", ffn_hidden_size: " << s.ffn;
  if (s.arch == "llama")
    y << ", normalization: rmsnorm, activation: swiglu, position_embedding: rope,"
         " add_bias: false, tie_embeddings: false";
  if (s.arch == "bert") y << ", layernorm_epsilon: 1.0e-12";
  if (s.dropout > 0) y << ", hidden_dropout: " << s.dropout << ", attention_dropout: " << s.dropout;
  if (!s.model_extra.empty()) y << ", " << s.model_extra;
  y << "}\n"
    << "parallel: {tensor: " << s.tp << ", pipeline: " << s.pp
    << ", sequence_parallel: " << (s.sp ? "true" : "false");
  if (s.dp > 0) y << ", data: " << s.dp;
  if (s.ep > 1) y << ", expert: " << s.ep;
  if (s.etp > 0) y << ", expert_tensor: " << s.etp;
  if (s.vpp > 1) y << ", virtual_pipeline: " << s.vpp;
  if (!s.sharding.empty()) y << ", data_parallel_sharding_strategy: " << s.sharding;
  if (s.dp_instances > 1) y << ", num_distributed_optimizer_instances: " << s.dp_instances;
  if (s.fsdp_unit_layers > 1) y << ", fsdp_unit_layers: " << s.fsdp_unit_layers;
  if (s.cp > 1) y << ", context: " << s.cp;
  if (!s.cp_comm.empty()) y << ", cp_comm_type: " << s.cp_comm;
  if (!s.parallel_extra.empty()) y << ", " << s.parallel_extra;
  if (!s.schedule.empty()) y << ", pipeline_schedule: " << s.schedule;
  if (!s.stage_layers.empty()) {
    y << ", pipeline_layers: [";
    for (size_t i = 0; i < s.stage_layers.size(); ++i) y << (i ? ", " : "") << s.stage_layers[i];
    y << "]";
  }
  y << "}\n"
    << "training: {micro_batch_size: " << s.micro << ", global_batch_size: " << s.global
    << ", train_iters: " << s.iters << ", eval_interval: " << s.eval_interval
    << ", eval_iters: " << s.eval_iters << ", seed: " << s.seed << ", precision: " << s.precision
    << ", recompute: " << s.recompute << ", peak_tflops: 1.0}\n"
    << "optimizer: {lr: " << s.lr << ", min_lr: " << s.min_lr
    << ", weight_decay: " << s.weight_decay << ", clip_grad: " << s.clip_grad
    << ", distributed: " << (s.distributed ? "true" : "false")
    << ", schedule: {warmup_iters: " << s.warmup;
  if (s.decay_iters) y << ", decay_iters: " << *s.decay_iters;
  y << "}}\n"
    << "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}], bert_binary_head: "
    << (s.binary_head ? "true" : "false") << "}\n"
    << "checkpoint: {save: " << (s.save.empty() ? "null" : s.save)
    << ", load: " << (s.load.empty() ? "null" : s.load) << s.checkpoint_extra << "}\n"
    << "logging: {interval: 1000}\n"
    << s.extra_sections;
  return config::parse_recipe_string(y.str(), name);
}

// A parallel layout to run a RecipeSpec under.
struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, vpp = 1, micro = 1;
  bool sp = false, distributed = false;
  int64_t ep = 1;
  std::string recompute = "none";
  std::vector<int64_t> stage_layers = {};
  std::string sharding = {};   // parallel.data_parallel_sharding_strategy (empty: unset)
  int64_t dp_instances = 1;    // hybrid sharding
  int64_t etp = 0;             // parallel.expert_tensor (0: auto)
  int64_t cp = 1;              // parallel.context
  std::string cp_comm = {};    // parallel.cp_comm_type
  std::string schedule = {};   // parallel.pipeline_schedule
  std::string precision = {};  // training.precision (empty: the model's)
  int64_t ranks() const { return tp * pp * dp * cp; }
  std::string name() const {
    std::ostringstream o;
    o << "tp" << tp << " pp" << pp << " dp" << dp << " vpp" << vpp << " micro" << micro
      << (sp ? " sp" : "") << (distributed ? " distopt" : "");
    if (ep > 1) o << " ep" << ep;
    if (etp > 0) o << " etp" << etp;
    if (recompute != "none") o << " recompute " << recompute;
    for (int64_t n : stage_layers) o << " " << n;
    if (!sharding.empty()) o << " " << sharding;
    if (dp_instances > 1) o << " x" << dp_instances << " instances";
    if (cp > 1) o << " cp" << cp << " " << (cp_comm.empty() ? "p2p" : cp_comm);
    if (!schedule.empty()) o << " " << schedule;
    if (!precision.empty()) o << " " << precision;
    return o.str();
  }
  RecipeSpec applied_to(RecipeSpec s) const {
    s.tp = tp;
    s.pp = pp;
    s.dp = dp;
    s.vpp = vpp;
    s.micro = micro;
    s.sp = sp;
    s.distributed = distributed;
    s.stage_layers = stage_layers;
    s.ep = ep;
    s.etp = etp;
    s.recompute = recompute;
    s.sharding = sharding;
    s.dp_instances = dp_instances;
    s.cp = cp;
    s.cp_comm = cp_comm;
    if (!schedule.empty()) s.schedule = schedule;
    if (!precision.empty()) s.precision = precision;
    return s;
  }
};

// The layouts each model is checked under (a model of 4 layers, global batch 8): on 2 ranks
// tp=2, tp=2 + sp, pp=2, pp=2 interleaved (vpp=2), dp=2 and dp=2 with the distributed optimizer;
// on 4 ranks tp2 x pp2 + sp, tp2 x dp2, pp2 x dp2 interleaved, pp=4; on 8 ranks tp2 x pp2 x dp2
// (+ sp and the distributed optimizer; interleaved). Every one runs more than one micro-batch.
inline const std::vector<Layout>& model_layouts() {
  static const std::vector<Layout> all = {
      // 2 ranks
      {.tp = 2, .micro = 2},
      {.tp = 2, .micro = 2, .sp = true},
      {.pp = 2, .micro = 2},
      {.pp = 2, .vpp = 2, .micro = 2},
      {.dp = 2, .micro = 1},
      {.dp = 2, .micro = 2, .distributed = true},
      // 4 ranks
      {.tp = 2, .pp = 2, .micro = 2, .sp = true},
      {.tp = 2, .dp = 2, .micro = 2, .distributed = true},
      {.pp = 2, .dp = 2, .vpp = 2, .micro = 1, .distributed = true},
      {.pp = 4, .micro = 2},
      // 8 ranks
      {.tp = 2, .pp = 2, .dp = 2, .micro = 2, .sp = true, .distributed = true},
      {.tp = 2, .pp = 2, .dp = 2, .vpp = 2, .micro = 1},
  };
  return all;
}

// The LoRA layouts a model family's test runs (tp + sp, pp, both).
inline std::vector<Layout> family_lora_layouts() {
  return {{.tp = 2, .micro = 2, .sp = true}, {.pp = 2, .micro = 2}, {.tp = 2, .pp = 2, .micro = 2}};
}

// The context-parallel layouts (each cp_comm_type at cp 2 and 4, and cp combined with tp + sp,
// pp (1F1B and interleaved) and dp under the distributed optimizer and ZeRO-3): 2 and 4 ranks.
inline const std::vector<Layout>& context_parallel_layouts() {
  static const std::vector<Layout> all = {
      // 2 ranks
      {.micro = 2, .cp = 2, .cp_comm = "p2p"},
      {.micro = 2, .cp = 2, .cp_comm = "all_gather"},
      {.micro = 2, .cp = 2, .cp_comm = "a2a"},
      {.micro = 1, .recompute = "full", .cp = 2, .cp_comm = "p2p"},
      // 4 ranks
      {.micro = 2, .cp = 4, .cp_comm = "p2p"},
      {.micro = 2, .cp = 4, .cp_comm = "all_gather"},
      {.micro = 2, .cp = 4, .cp_comm = "a2a"},
      {.tp = 2, .micro = 2, .sp = true, .cp = 2, .cp_comm = "p2p"},
      {.tp = 2, .micro = 2, .sp = true, .cp = 2, .cp_comm = "a2a"},
      {.pp = 2, .micro = 2, .cp = 2, .cp_comm = "p2p"},
      {.pp = 2, .vpp = 2, .micro = 1, .cp = 2, .cp_comm = "all_gather"},
      {.dp = 2, .micro = 2, .distributed = true, .cp = 2, .cp_comm = "p2p"},
      {.dp = 2, .micro = 1, .sharding = "optim_grads_params", .cp = 2, .cp_comm = "a2a"},
  };
  return all;
}

// Trains on this process alone (a group of one, whatever the world).
inline training::TrainSummary train_single(const config::Recipe& r,
                                           std::shared_ptr<const training::BatchSource> train,
                                           std::shared_ptr<const training::BatchSource> valid) {
  auto self = mp::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(r, kVocab, std::move(train), std::move(valid),
                      training::TrainerGroups{self.get(), self.get(), self.get()}, log);
  return t.run();
}

// Trains on the whole world, split into the recipe's tp x pp mesh with data parallelism over the
// remaining ranks; `inspect` (if set) sees the trainer and its groups after the run.
using InspectTrainer = std::function<void(training::Trainer&, const training::TrainerGroups&)>;
inline training::TrainSummary train_on_world(const config::Recipe& r,
                                             std::shared_ptr<const training::BatchSource> train,
                                             std::shared_ptr<const training::BatchSource> valid,
                                             const InspectTrainer& inspect = {}) {
  mp::MeshSizes sizes;
  sizes.tp = r.parallel.tensor;
  sizes.pp = r.parallel.pipeline;
  sizes.ep = r.parallel.expert;
  sizes.cp = r.parallel.context;
  sizes.dp = mp::testing::world().size() / (sizes.tp * sizes.pp * sizes.cp);
  sizes.dp_instances = r.parallel.num_distributed_optimizer_instances;
  sizes.etp = r.parallel.expert_tensor;
  mp::Mesh mesh(sizes, mp::testing::world(), mp::testing::launch());
  std::ostringstream log;
  const training::TrainerGroups groups = training::TrainerGroups::from_mesh(mesh);
  training::Trainer t(r, kVocab, std::move(train), std::move(valid), groups, log);
  training::TrainSummary summary = t.run();
  if (inspect) inspect(t, groups);
  return summary;
}

// One scratch path for every rank of the world: temp/<prefix><rank 0's pid> (collective).
inline std::filesystem::path shared_scratch_path(const std::string& prefix) {
  int64_t id = mp::testing::world().rank() == 0 ? ::getpid() : 0;
  Tensor id_t = Tensor::wrap(&id, {1}, DType::I64);
  mp::testing::world().broadcast(id_t, 0);
  return std::filesystem::temp_directory_path() / (prefix + std::to_string(id));
}

// The largest relative differences seen by the expect_same_* calls (for the report).
// A run interrupted by a checkpoint at iteration `split` (saved by a first run of `split`
// iterations, loaded by a second of the whole length) continues the uninterrupted run's losses
// bit for bit. `recipe_of` turns a RecipeSpec into the recipe (adding what the spec cannot say);
// `train` runs it on the world.
inline void expect_resume_is_bit_exact(
    const RecipeSpec& run, int64_t split, const std::string& scratch_prefix,
    const std::function<config::Recipe(const RecipeSpec&)>& recipe_of,
    const std::function<training::TrainSummary(const config::Recipe&)>& train) {
  const std::filesystem::path dir = shared_scratch_path(scratch_prefix);
  if (mp::testing::world().rank() == 0) std::filesystem::remove_all(dir);
  mp::testing::world().barrier();
  const auto straight = train(recipe_of(run));
  RecipeSpec first = run;
  first.iters = split;
  first.save = dir.string();
  first.checkpoint_extra = concat(", save_interval: ", split);
  (void)train(recipe_of(first));
  RecipeSpec second = run;
  second.load = dir.string();
  const auto resumed = train(recipe_of(second));
  const size_t rest = static_cast<size_t>(run.iters - split);
  ASSERT_EQ(resumed.steps.size(), rest);
  for (size_t i = 0; i < rest; ++i)
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[static_cast<size_t>(split) + i].loss)
        << "step " << split + 1 + static_cast<int64_t>(i);
  mp::testing::world().barrier();
  if (mp::testing::world().rank() == 0) std::filesystem::remove_all(dir);
}

struct MaxDiff {
  double loss = 0, grad_norm = 0, moe = 0;
};
inline MaxDiff& max_diff() {
  static MaxDiff d;
  return d;
}
inline double relative(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-30);
}

// Relative tolerances: every loss (and, with an aux loss, its LM and sentence-pair parts)
// within loss_rtol, the gradient norm within grad_rtol (+1e-6).
struct Tolerance {
  double loss = 2e-5, grad_norm = 2e-4;
  // MoE load imbalance and dropped fraction (relative): counts of routing decisions, exact in
  // fp32; bf16 rounding flips the decisions of near-tied tokens.
  double moe_counts = 1e-9;
  // A reference routing margin below this counts as a tie (steps_before_routing_tie). Seen on a
  // Zen 3 (MoE softmax top-2, 64 tokens x 4 layers a step): layouts' margins differ from the
  // reference's by ~1e-8, a step's smallest margin is 1.5e-5..5e-4, and the one tie that parted
  // the curves had 2.2e-8.
  double routing_tie = 1e-6;
  // Layouts' smallest routing margin against the reference's (absolute). fp32: the ZeRO layouts
  // of the MoE sharding test drift from the reference by up to 3.5e-6 (Zen 3), while a missed
  // reduction reports another token's margin, 4e-5 and more away in the MoE tests' runs. In bf16
  // the router's scores carry rounding errors larger than the margins themselves (~1e-4), so a
  // bf16 comparison sets it to infinity: not compared.
  double routing_margin = 1e-5;
};

inline void expect_same_step(const training::StepMetrics& got, const training::StepMetrics& want,
                             const Tolerance& tol, const std::string& where) {
  // MEGATRON_EQ_TRACE=1: rank 0 prints every compared step (ctest -V), to see how a gap grows.
  if (std::getenv("MEGATRON_EQ_TRACE") != nullptr && mp::testing::world().rank() == 0)
    std::printf("%s: loss %.6f / %.6f, grad norm %.6f / %.6f (%+.2f%%)\n", where.c_str(), got.loss,
                want.loss, got.grad_norm, want.grad_norm,
                100.0 * (got.grad_norm - want.grad_norm) / want.grad_norm);
  if (std::getenv("MEGATRON_EQ_TRACE") != nullptr && mp::testing::world().rank() == 0 &&
      want.has_moe)
    std::printf("%s: routing margin %.3g / %.3g, load imbalance %.6f / %.6f\n", where.c_str(),
                got.moe_min_routing_margin, want.moe_min_routing_margin, got.moe_load_imbalance,
                want.moe_load_imbalance);
  EXPECT_NEAR(got.loss, want.loss, tol.loss * want.loss) << where;
  EXPECT_NEAR(got.grad_norm, want.grad_norm, tol.grad_norm * want.grad_norm + 1e-6) << where;
  EXPECT_EQ(got.has_aux, want.has_aux) << where;
  if (want.has_aux) {
    EXPECT_NEAR(got.lm_loss, want.lm_loss, tol.loss * want.lm_loss) << where << " (lm loss)";
    EXPECT_NEAR(got.aux_loss, want.aux_loss, tol.loss * want.aux_loss) << where << " (aux loss)";
    max_diff().loss = std::max({max_diff().loss, relative(got.lm_loss, want.lm_loss),
                                relative(got.aux_loss, want.aux_loss)});
  }
  EXPECT_EQ(got.has_moe, want.has_moe) << where;
  if (want.has_moe) {
    // The router losses, like the loss; imbalance and drops are counts (exact unless a routing
    // decision sits within round-off of a tie).
    EXPECT_NEAR(got.moe_aux_loss, want.moe_aux_loss, tol.loss * want.moe_aux_loss) << where;
    EXPECT_NEAR(got.moe_z_loss, want.moe_z_loss, tol.loss * want.moe_z_loss) << where;
    EXPECT_NEAR(got.moe_load_imbalance, want.moe_load_imbalance,
                tol.moe_counts * want.moe_load_imbalance)
        << where;
    EXPECT_NEAR(got.moe_dropped_fraction, want.moe_dropped_fraction,
                tol.moe_counts * want.moe_dropped_fraction + 1e-12)
        << where;
    // The smallest margin over the global batch: every layout reduces it over the ranks that
    // hold tokens (tp slices, dp, stages); a missed reduction reports another token's margin.
    if (std::isinf(want.moe_min_routing_margin)) {
      EXPECT_TRUE(std::isinf(got.moe_min_routing_margin)) << where << " (routing margin)";
    } else if (std::isfinite(tol.routing_margin)) {
      EXPECT_NEAR(got.moe_min_routing_margin, want.moe_min_routing_margin, tol.routing_margin)
          << where << " (routing margin)";
    }
    EXPECT_EQ(got.moe_layer_imbalance.size(), want.moe_layer_imbalance.size()) << where;
    for (size_t l = 0; l < got.moe_layer_imbalance.size() && l < want.moe_layer_imbalance.size();
         ++l)
      EXPECT_NEAR(got.moe_layer_imbalance[l], want.moe_layer_imbalance[l],
                  tol.moe_counts * want.moe_layer_imbalance[l] + 1e-12)
          << where << " (layer " << l << ")";
    max_diff().moe = std::max({max_diff().moe, relative(got.moe_aux_loss, want.moe_aux_loss),
                               relative(got.moe_z_loss, want.moe_z_loss)});
  }
  max_diff().loss = std::max(max_diff().loss, relative(got.loss, want.loss));
  max_diff().grad_norm = std::max(max_diff().grad_norm, relative(got.grad_norm, want.grad_norm));
}

// Steps [0, got.size()) of `got` against steps [offset, offset + got.size()) of `want`.
inline void expect_same_steps(const std::vector<training::StepMetrics>& got,
                              const std::vector<training::StepMetrics>& want, size_t offset,
                              const Tolerance& tol = {}) {
  ASSERT_LE(offset + got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_same_step(got[i], want[offset + i], tol,
                     "iteration " + std::to_string(want[offset + i].iteration));
}

// MoE: how many leading steps of the reference route away from ties. A routing decision whose
// choice values sit within round-off of a tie (StepMetrics::moe_min_routing_margin below
// tol.routing_tie) may go either way in another layout, and the curves part from there without
// any layout being wrong: the comparison ends before such a step. It must leave at least half
// the run, so a test still compares most of its curve (else: choose another seed).
inline size_t steps_before_routing_tie(const std::vector<training::StepMetrics>& want,
                                       const Tolerance& tol) {
  size_t n = 0;
  while (n < want.size() && !(want[n].has_moe && want[n].moe_min_routing_margin < tol.routing_tie))
    ++n;
  if (n < want.size() && mp::testing::world().rank() == 0) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "reference routing within %.3g of a tie at iteration %lld (margin %.3g): "
                  "comparing the %zu steps before it\n",
                  tol.routing_tie, static_cast<long long>(want[n].iteration),
                  want[n].moe_min_routing_margin, n);
    // Every layout of a test compares against the same reference: say it once.
    static std::string last;
    if (last != line) std::fputs(line, stdout);
    last = line;
  }
  EXPECT_GE(2 * n, want.size()) << "the reference's routing meets a near-tie at iteration "
                                << (n < want.size() ? want[n].iteration : -1)
                                << ", before half the run: too little curve to compare";
  return n;
}

// The whole run: every step and every evaluation (MoE: up to the reference's first near-tie).
inline void expect_same_curve(const training::TrainSummary& got, const training::TrainSummary& want,
                              const Tolerance& tol = {}) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  const size_t steps = steps_before_routing_tie(want.steps, tol);
  const std::vector<training::StepMetrics> got_steps(got.steps.begin(), got.steps.begin() + steps),
      want_steps(want.steps.begin(), want.steps.begin() + steps);
  expect_same_steps(got_steps, want_steps, 0, tol);
  // Evaluations after the tie's step ran on weights the tie may have changed.
  const int64_t last =
      steps < want.steps.size() ? want.steps[steps].iteration : std::numeric_limits<int64_t>::max();
  ASSERT_EQ(got.evals.size(), want.evals.size());
  for (size_t i = 0; i < got.evals.size(); ++i) {
    const auto &g = got.evals[i], &w = want.evals[i];
    if (w.iteration >= last) break;
    const std::string where = "evaluation at iteration " + std::to_string(w.iteration);
    EXPECT_NEAR(g.loss, w.loss, tol.loss * w.loss) << where;
    EXPECT_EQ(g.has_aux, w.has_aux) << where;
    if (w.has_aux) {
      EXPECT_NEAR(g.aux_loss, w.aux_loss, tol.loss * w.aux_loss) << where << " (aux loss)";
      max_diff().loss = std::max(max_diff().loss, relative(g.aux_loss, w.aux_loss));
    }
    max_diff().loss = std::max(max_diff().loss, relative(g.loss, w.loss));
  }
}

// Trains `model` on this process alone (the reference: its loss must fall), then under every
// layout of `layouts` that uses exactly the world's ranks, and expects the same curve from each.
// Returns how many layouts ran.
inline int expect_layouts_match(const RecipeSpec& model,
                                const std::shared_ptr<const training::BatchSource>& source,
                                const std::vector<Layout>& layouts, const Tolerance& tol = {}) {
  const auto reference = train_single(make_recipe(model), source, source);
  EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);
  int ran = 0;
  for (const Layout& l : layouts) {
    if (l.ranks() != mp::testing::world().size()) continue;
    SCOPED_TRACE(model.arch + " " + l.name());
    expect_same_curve(train_on_world(make_recipe(l.applied_to(model)), source, source), reference,
                      tol);
    ++ran;
  }
  return ran;
}

// Rank 0 prints the largest relative differences seen since the last report (ctest -V shows
// them); the next report starts from zero.
inline void report_max_diff(const std::string& what) {
  if (mp::testing::world().rank() == 0) {
    std::printf("%s: max relative difference: loss %.3g, grad norm %.3g, moe losses %.3g\n",
                what.c_str(), max_diff().loss, max_diff().grad_norm, max_diff().moe);
    std::fflush(stdout);
  }
  max_diff() = {};
}

}  // namespace megatron::equivalence
