#pragma once
// Recipes: YAML files that describe one training run, turned into one typed struct per component.
//
// Loading (load_recipe):
//   1. `extends: other.yaml` (or a list of files) names base recipes, relative to the extending
//      file's directory; bases are loaded recursively (cycles are reported), merged in order, and
//      the extending file is deep-merged on top: maps merge key by key, the child wins; lists and
//      scalars are replaced whole. A child may write `key: null` to put a key back to its default.
//   2. Overrides "section.key=value" (`--set`) are applied in order; the value is parsed as a YAML
//      scalar or flow collection ("3", "1e-4", "true", "rmsnorm", "[1,2]", "{path: x, weight: 2}").
//      List elements are addressed by index: "data.train.0.weight=2".
//   3. The merged tree is parsed into the structs below with strict checking (unknown keys, wrong
//      types, missing required keys are errors), then Recipe::validate() runs.
// Every error is a megatron::InputError whose message starts with where the offending key came
// from ("recipes/x.yaml:12", or "recipes/x.yaml (--set model.num_layers=5)" for an override, or the
// top recipe file for a key left at its default), then the full key path, then the problem with
// the bad value, e.g.
//   recipes/x.yaml:4: model.num_attention_heads: must be divisible by parallel.tensor (got 12 % 5 =
//   2)
//
// Scalars: integers are plain decimal; floats accept 6e-4, 0.1, 10; booleans are true/false;
// quoted scalars ("12") are strings and are rejected where a number or boolean is expected. A
// null (`null`, `~` or nothing) means "not set": the default applies (an error for required keys).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/key_info.h"
#include "megatron/config/model_config.h"
#include "megatron/config/moe_config.h"
#include "megatron/config/options.h"
#include "megatron/config/peft_config.h"
#include "megatron/config/sft_config.h"

namespace megatron::config {

class Checker;  // checker.h

struct ParallelConfig {
  int64_t tensor = 1, pipeline = 1;
  int64_t data = 0;  // 0 = auto ("auto" in YAML): world / (tensor * pipeline * context)
  int64_t expert = 1, context = 1;
  CpCommType cp_comm_type = CpCommType::P2P;  // context > 1: how attention crosses the cp group
  int64_t expert_tensor = 0;                  // 0 = auto ("auto" in YAML): parallel.tensor
  std::optional<int64_t> virtual_pipeline;    // model chunks per pipeline stage (interleaved 1F1B)
  // Unset: 1f1b, or interleaved with virtual_pipeline > 1 (pipeline_schedule_kind()).
  std::optional<PipelineSchedule> pipeline_schedule;
  bool sequence_parallel = false;
  std::string order = "tp-cp-ep-dp-pp";  // rank order, innermost first; a permutation of the five
  // Layers per pipeline stage (per virtual stage, in layer order, when virtual_pipeline > 1);
  // empty -> even split. Length must be pipeline * virtual_pipeline and the sum num_layers.
  std::vector<int64_t> pipeline_layers;
  // zb_h1 / zb_v: the relative forward, input-gradient (B) and weight-gradient (W) pass times
  // their greedy plans the lists on (pipeline/zero_bubble.h), e.g. measured ones from a timeline
  // (pipeline_timeline prints them); empty: equal times.
  std::vector<double> zero_bubble_pass_times;
  // Communication watchdog (MPI groups): a "waiting" line every comm_warn_s seconds of one wait,
  // the job aborted naming the group after comm_timeout_s (0 disables either;
  // MEGATRON_COMM_TIMEOUT_S overrides the timeout).
  double comm_warn_s = 60, comm_timeout_s = 600;
  // ZeRO stage (unset: optim when optimizer.distributed / training.use_distributed_optimizer,
  // else no_shard; Recipe::sharding_strategy() resolves it).
  std::optional<ShardingStrategy> data_parallel_sharding_strategy;
  // Hybrid sharding: shard inside groups of dp / this many consecutive data-parallel ranks (one
  // node when the mesh can place them so), replicate across the groups.
  int64_t num_distributed_optimizer_instances = 1;
  // Sharded gradients / weights: consecutive layers gathered and reduced together as one unit
  // (fewer, larger collectives; more transient memory).
  int64_t fsdp_unit_layers = 1;
  // Data-parallel gradient compression: topk sends each rank's topk_ratio largest entries of
  // every bucket (values and indices), the rest kept and added to the next step's gradient.
  GradCompression grad_compression = GradCompression::None;
  double topk_ratio = 0.01;
  // The sent share falls from 1 to topk_ratio geometrically over the first this many iterations
  // (deep gradient compression's warm-up); buckets it leaves at half or more go whole.
  int64_t topk_warmup_iters = 0;
  // ZeRO++ (DeepSpeed's keys): the sharded weights all-gathered as int8 blocks with a scale each
  // (optim_grads_params), the gradients reduce-scattered so (optim_grads, optim_grads_params);
  // the secondary intra-node weight partition (hpZ) is not implemented yet (1: off).
  bool zero_quantized_weights = false, zero_quantized_gradients = false;
  int64_t zero_hpz_partition_size = 1;

  int64_t virtual_stages() const { return virtual_pipeline.value_or(1); }
  PipelineSchedule pipeline_schedule_kind() const {
    if (pipeline_schedule) return *pipeline_schedule;
    return virtual_stages() > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB;
  }
  // Whether this run's schedule splits backwards / places chunks in a V (options.h).
  bool splits_backward() const { return config::splits_backward(pipeline_schedule_kind()); }
  bool v_placement() const { return config::v_placement(pipeline_schedule_kind()); }
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const ParallelConfig&) const = default;
  void validate_pipeline_schedule(Checker& c) const;
  void validate_pass_times(Checker& c) const;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("tensor", s.tensor);
    v("pipeline", s.pipeline);
    v("data", s.data, KeyInfo{false, "", true, false});
    v("expert", s.expert);
    v("expert_tensor", s.expert_tensor, KeyInfo{false, "", true, false});
    v("context", s.context);
    v("cp_comm_type", s.cp_comm_type, noted("p2p (ring), all_gather, a2a (Ulysses)"));
    v("virtual_pipeline", s.virtual_pipeline);
    v("pipeline_schedule", s.pipeline_schedule,
      noted(s.pipeline_schedule ? "" : "auto: 1f1b, or interleaved with virtual_pipeline > 1"));
    v("sequence_parallel", s.sequence_parallel);
    v("order", s.order);
    v("pipeline_layers", s.pipeline_layers);
    v("zero_bubble_pass_times", s.zero_bubble_pass_times,
      noted("[forward, input gradient, weight gradient] (zb_h1, zb_v); unset: equal"));
    v("comm_warn_s", s.comm_warn_s);
    v("comm_timeout_s", s.comm_timeout_s);
    v("data_parallel_sharding_strategy", s.data_parallel_sharding_strategy,
      noted(s.data_parallel_sharding_strategy ? "" : "auto: optim with the distributed optimizer"));
    v("num_distributed_optimizer_instances", s.num_distributed_optimizer_instances);
    v("fsdp_unit_layers", s.fsdp_unit_layers, noted("optim_grads, optim_grads_params"));
    v("grad_compression", s.grad_compression, noted("none, topk (no_shard)"));
    v("topk_ratio", s.topk_ratio, noted("grad_compression topk: the share of entries sent"));
    v("topk_warmup_iters", s.topk_warmup_iters, noted("from all entries down to topk_ratio"));
    v("zero_quantized_weights", s.zero_quantized_weights, noted("ZeRO++ qwZ: int8 gathers"));
    v("zero_quantized_gradients", s.zero_quantized_gradients,
      noted("ZeRO++ qgZ: int8 reduce-scatters"));
    v("zero_hpz_partition_size", s.zero_hpz_partition_size, noted("ZeRO++ hpZ: not yet (1)"));
  }
};

struct ScheduleConfig {
  int64_t warmup_iters = 0;
  LrDecay decay = LrDecay::Cosine;
  std::optional<int64_t> decay_iters;  // unset -> training.train_iters
  bool operator==(const ScheduleConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("warmup_iters", s.warmup_iters);
    v("decay", s.decay);
    v("decay_iters", s.decay_iters, noted(s.decay_iters ? "" : "auto: training.train_iters"));
  }
};

struct TrainingConfig {
  TrainingDevice device = TrainingDevice::CPU;
  Precision precision = Precision::FP32;
  int64_t micro_batch_size = 0, global_batch_size = 0, train_iters = 0;  // required
  int64_t eval_interval = 0, eval_iters = 0;  // eval_interval 0 -> no periodic evaluation
  uint64_t seed = 1234;
  RecomputeGranularity recompute = RecomputeGranularity::None;
  std::optional<double> exit_duration_minutes;
  int64_t threads = 0;     // 0 = auto
  double peak_tflops = 0;  // 0 = measure at start
  // fp16 dynamic loss scaling (Megatron's --initial-loss-scale, --min-loss-scale,
  // --loss-scale-window, --hysteresis); unused for fp32 and bf16.
  double initial_loss_scale = 4294967296.0;  // 2^32
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;  // clean steps before the scale doubles
  int64_t hysteresis = 2;            // overflowing steps tolerated before it halves
  // Megatron's --use-distributed-optimizer: an alias of optimizer.distributed (ZeRO-1).
  bool use_distributed_optimizer = false;
  // Suspicious steps (megatron/training/rerun.h): a non-finite loss or gradient norm, or a loss
  // above rerun_spike_factor x the mean of the last accepted ones, is re-run on the same data;
  // validate stops on a repeatable fault (rerun_skip_batch: skips that batch instead).
  RerunMode rerun_mode = RerunMode::Disabled;
  double rerun_spike_factor = 10.0;
  bool rerun_skip_batch = false;
  // A fault on purpose, to test the above: the loss and gradients of world rank
  // error_injection_rank turn NaN at iteration error_injection_iteration.
  ErrorInjection error_injection_type = ErrorInjection::None;
  int64_t error_injection_iteration = 0, error_injection_rank = 0;
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const TrainingConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("device", s.device);
    v("precision", s.precision);
    v("micro_batch_size", s.micro_batch_size, required_key());
    v("global_batch_size", s.global_batch_size, required_key());
    v("train_iters", s.train_iters, required_key());
    v("eval_interval", s.eval_interval);
    v("eval_iters", s.eval_iters);
    v("seed", s.seed);
    v("recompute", s.recompute);
    v("exit_duration_minutes", s.exit_duration_minutes);
    v("threads", s.threads, noted(s.threads == 0 ? "auto" : ""));
    v("peak_tflops", s.peak_tflops, noted(s.peak_tflops == 0 ? "measure at start" : ""));
    v("initial_loss_scale", s.initial_loss_scale, noted("fp16 only"));
    v("min_loss_scale", s.min_loss_scale);
    v("loss_scale_window", s.loss_scale_window);
    v("hysteresis", s.hysteresis);
    v("use_distributed_optimizer", s.use_distributed_optimizer,
      noted("alias of parallel.data_parallel_sharding_strategy: optim"));
    v("rerun_mode", s.rerun_mode, noted("disabled, validate, report"));
    v("rerun_spike_factor", s.rerun_spike_factor);
    v("rerun_skip_batch", s.rerun_skip_batch);
    v("error_injection_type", s.error_injection_type,
      noted("none, transient_error, persistent_error"));
    v("error_injection_iteration", s.error_injection_iteration);
    v("error_injection_rank", s.error_injection_rank);
  }
};

struct OptimizerConfig {
  OptimizerType type = OptimizerType::AdamW;
  double lr = 0;  // required, > 0
  double min_lr = 0, weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_grad = 1.0;  // 0 -> no clipping
  // onebit_adam: AdamW steps (full-precision gradient all-reduces) before the variance freezes
  // and the momenta go as signs (DeepSpeed's freeze_step); 0 with the other types.
  int64_t freeze_step = 0;
  bool distributed = false;  // ZeRO-1 over data parallel
  // Master weights and Adam moments in host memory, stepped by the host Adam (cuda only); the
  // fraction of them offloaded (Megatron's --optimizer-offload-fraction).
  OptimizerOffload offload = OptimizerOffload::None;
  double offload_fraction = 1.0;
  ScheduleConfig schedule;
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const OptimizerConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("type", s.type);
    v("lr", s.lr, required_key());
    v("min_lr", s.min_lr);
    v("weight_decay", s.weight_decay);
    v("beta1", s.beta1);
    v("beta2", s.beta2);
    v("eps", s.eps);
    v("clip_grad", s.clip_grad);
    v("freeze_step", s.freeze_step, noted("onebit_adam: full-precision steps before compression"));
    v("distributed", s.distributed,
      noted("alias of parallel.data_parallel_sharding_strategy: optim"));
    v("offload", s.offload);
    v("offload_fraction", s.offload_fraction, noted("with offload: cpu"));
    v.section("schedule", s.schedule);
  }
};

struct TokenizerConfig {
  // GPT2BPETokenizer (vocab_file + merge_file) | SentencePieceTokenizer (model) |
  // BertWordPieceLowerCase, BertWordPieceCase (vocab_file) | ByteTokenizer |
  // HuggingFaceTokenizer (model: a directory) | NullTokenizer (vocab_size). Required; unset only
  // in a recipe built in code, which validate() refuses.
  std::optional<TokenizerType> type;
  std::string vocab_file, merge_file, model;
  int64_t vocab_size = 0;
  bool operator==(const TokenizerConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("type", s.type, required_key());
    v("vocab_file", s.vocab_file);
    v("merge_file", s.merge_file);
    v("model", s.model);
    v("vocab_size", s.vocab_size);
  }
};

struct DataConfig {
  TokenizerConfig tokenizer;
  std::vector<DatasetEntry> train;  // YAML: a list of {path, weight} (or of paths), or one path
  std::string split = "969,30,1";   // train,valid,test weights (1 to 3 comma-separated numbers)
  std::string cache_dir;            // empty -> next to the dataset
  // BERT (model.arch: bert) samples: Megatron's --mask-prob, --short-seq-prob and binary head
  // (next-sentence prediction; false = --bert-no-binary-head).
  double masking_probability = 0.15, short_seq_probability = 0.1;
  bool bert_binary_head = true;
  // Synthetic samples instead of data.train (Megatron's --mock-data), for smoke tests and
  // throughput runs: no data file is read, and no tokenizer file when model.vocab_size is set.
  bool mock = false;
  // Supervised fine-tuning on chat JSONL (data.sft.train set) instead of data.train: sft_config.h.
  SFTDataConfig sft;
  // The split as three fractions summing to 1 (missing parts are 0).
  std::vector<double> split_fractions() const;
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const DataConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v.section("tokenizer", s.tokenizer);
    v("train", s.train);
    v("split", s.split, KeyInfo{false, "", false, true});  // "969,30,1"; `split: 1` too
    v("cache_dir", s.cache_dir);
    v("masking_probability", s.masking_probability, noted("BERT only"));
    v("short_seq_probability", s.short_seq_probability, noted("BERT only"));
    v("bert_binary_head", s.bert_binary_head, noted("BERT only"));
    v("mock", s.mock, noted(s.mock ? "synthetic data" : ""));
    v.section("sft", s.sft);
  }
};

struct CheckpointConfig {
  std::string save, load;                // directories; empty -> none
  std::optional<int64_t> save_interval;  // unset -> save only on signal/exit (if save is set)
  int64_t keep_last = 3;                 // 0 -> keep all
  bool finetune = false;                 // load weights only: reset iteration, optimizer, data
  // Megatron's --pretrained-checkpoint: a native checkpoint or a Hugging Face directory whose
  // weights (only) start the run when checkpoint.load / checkpoint.save hold no checkpoint of it
  // yet; a restarted run resumes its own saves instead. Empty: none.
  std::string pretrained;
  // Every model tensor of the checkpoint is used and every one the model needs is there; false:
  // a partial load that skips both kinds, naming each skipped tensor.
  bool strict = true;
  // Megatron's --async-save: a save copies its shards to host memory and training continues
  // while a background thread writes them (megatron/checkpoint/async_save.h).
  bool async_save = false;
  // Local checkpoints (training/local_checkpoints.h): every local_interval steps each rank's
  // state goes to local_dir on its node ("{node}" is replaced by the node's name; tmpfs such as
  // /dev/shm keeps it in memory) and to local_replication peers on other nodes.
  std::optional<int64_t> local_interval;
  int64_t local_replication = 1;
  std::string local_dir;
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const CheckpointConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("save", s.save);
    v("load", s.load);
    v("save_interval", s.save_interval);
    v("keep_last", s.keep_last, noted(s.keep_last == 0 ? "keep all" : ""));
    v("finetune", s.finetune);
    v("pretrained", s.pretrained);
    v("strict", s.strict, noted(s.strict ? "" : "partial loads allowed"));
    v("async_save", s.async_save, noted(s.async_save ? "written in the background" : ""));
    v("local_interval", s.local_interval, noted(s.local_interval ? "" : "no local checkpoints"));
    v("local_replication", s.local_replication, noted("copies on other nodes"));
    v("local_dir", s.local_dir, noted("node-local; {node}: the node's name"));
  }
};

struct LoggingConfig {
  int64_t interval = 10;
  std::string jsonl, tensorboard_dir;  // empty -> off
  // Per-rank action timings as JSONL (PATH.rank<N>.jsonl) for tools/pipeline_timeline.
  std::string timeline;
  // The op-by-op device time of steps [profile_step_start, profile_step_end), printed after
  // them (training/step_profile.h); Megatron-Core's keys and defaults.
  bool profile = false;
  int64_t profile_step_start = 10, profile_step_end = 12;
  // Every N steps each rank's time split (data, compute, exposed communication, pipeline,
  // optimizer) is gathered and the slowest ranks are named against the median
  // (training/step_split.h); 0: off.
  int64_t straggler_interval = 0;
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const LoggingConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("interval", s.interval);
    v("jsonl", s.jsonl);
    v("tensorboard_dir", s.tensorboard_dir);
    v("timeline", s.timeline);
    v("straggler_interval", s.straggler_interval, noted(s.straggler_interval > 0 ? "" : "off"));
    v("profile", s.profile);
    v("profile_step_start", s.profile_step_start);
    v("profile_step_end", s.profile_step_end);
  }
};

// Elastic restarts (cluster.elastic): a run may start on any node count in [min_nodes,
// max_nodes]; the data-parallel size follows the world (tp/pp/cp/ep kept), gradient accumulation
// keeps the global batch and the checkpoint is resharded (training/elastic.h). 0/0: off.
struct ElasticConfig {
  int64_t min_nodes = 0, max_nodes = 0;
  bool enabled() const { return max_nodes > 0; }
  bool operator==(const ElasticConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("min_nodes", s.min_nodes, noted(s.enabled() ? "" : "off"));
    v("max_nodes", s.max_nodes, noted(s.enabled() ? "" : "off"));
  }
};

// The cluster a recipe is written for (optional; documentation and the planner's default:
// `build/bin/plan` plans the recipe for this shape, its flags override). `pretrain` reads only
// `elastic` from it. 0 means "not stated" for the first four keys.
struct ClusterConfig {
  int64_t nodes = 0;
  int64_t gpus_per_node = 0;
  double gpu_memory_gb = 0;  // per device, in GB (1e9 bytes)
  double gpu_tflops = 0;     // peak dense bf16 TFLOP/s per device
  // Per-device bandwidths in GB/s as seen by collectives: NVLink-class inside a node, the
  // device's share of the network (e.g. one 400 Gb/s NIC per GPU) across nodes.
  double intra_node_gbps = 450;
  double inter_node_gbps = 50;
  ElasticConfig elastic;
  bool specified() const { return nodes > 0 || gpus_per_node > 0; }
  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const ClusterConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("nodes", s.nodes, noted(s.nodes == 0 ? "not stated" : ""));
    v("gpus_per_node", s.gpus_per_node, noted(s.gpus_per_node == 0 ? "not stated" : ""));
    v("gpu_memory_gb", s.gpu_memory_gb, noted(s.gpu_memory_gb == 0 ? "not stated" : ""));
    v("gpu_tflops", s.gpu_tflops, noted(s.gpu_tflops == 0 ? "not stated" : ""));
    v("intra_node_gbps", s.intra_node_gbps);
    v("inter_node_gbps", s.inter_node_gbps);
    v.section("elastic", s.elastic);
  }
};

struct Recipe {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  ClusterConfig cluster;
  PeftConfig peft;          // LoRA fine-tuning (peft_config.h)
  std::string source_path;  // the top recipe file, as given to load_recipe
  std::string root_dir;     // repository root guessed at load time (see resolve_path); may be empty
  KeyOrigins origins;       // filled by the loader; used in error messages

  // The sections, in file order.
  template <typename Self, typename V>
  static void sections(Self& s, V& v) {
    v.section("model", s.model);
    v.section("parallel", s.parallel);
    v.section("training", s.training);
    v.section("optimizer", s.optimizer);
    v.section("data", s.data);
    v.section("checkpoint", s.checkpoint);
    v.section("logging", s.logging);
    v.section("cluster", s.cluster);
    v.section("peft", s.peft);
  }

  // parallel.data_parallel_sharding_strategy, or its aliases' optim, or no_shard.
  ShardingStrategy sharding_strategy() const;

  // Each section, then cross-section checks (heads % tensor, layers % pipeline or pipeline_layers,
  // global_batch % micro_batch, schedule vs train_iters, ...).
  void validate() const;
  // parallel.context > 1: what context parallelism needs (seq_length % 2cp, heads for a2a) and
  // what it does not support yet (bert, unfused attention, whole experts under tp; the trainer
  // refuses cuda, which the planner can still size).
  void validate_context_parallel(Checker& c) const;
  // validate()'s cross-section checks, by concern (validate.cpp).
  void validate_layout(Checker& c) const;
  void validate_experts(Checker& c) const;
  void validate_sharding_and_device(Checker& c) const;
  void validate_schedule_and_data(Checker& c) const;
  // Communication compression (parallel.grad_compression, optimizer.type onebit_adam) against
  // the sharding strategy, device, precision and run length (validate_compression.cpp).
  void validate_compression(Checker& c) const;
  // The pipeline schedule against the model and device, and its micro-batch count against the
  // data-parallel size (validate_pipeline.cpp).
  void validate_pipeline(Checker& c) const;
  void validate_pipeline_for_world(Checker& c, int64_t dp) const;
  // Checks against a world size: world % (tensor*pipeline*context) == 0, parallel.data (if not
  // auto) == world / (tensor*pipeline*context), global_batch % (micro*dp) == 0, dp % expert == 0.
  void validate_for_world(int64_t world_size) const;
  // validate_for_world(), then the resolved data-parallel size / microbatches per step.
  int64_t data_parallel_size(int64_t world_size) const;
  int64_t num_microbatches(int64_t world_size) const;
  // validate_for_world(), then sets parallel.data to the resolved size.
  void resolve_for_world(int64_t world_size);

  std::string to_yaml() const;     // every key, defaults included; re-parses to an equal recipe
  nlohmann::json to_json() const;  // same keys; empty strings and unset optionals are null

  // Compares the configuration sections only (not source_path, root_dir or origins).
  bool operator==(const Recipe& other) const;
};

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});
// As load_recipe, from text; `extends:` paths are relative to the current directory.
// name_for_errors stands in for the file name in messages (and guesses root_dir like a path).
Recipe parse_recipe_string(const std::string& yaml_text, const std::string& name_for_errors,
                           const std::vector<std::string>& overrides = {});

// Resolves a path written in a recipe (data.train[].path, tokenizer files, cache_dir, checkpoint
// and log paths):
//   - an absolute path (or an empty one) is returned unchanged;
//   - else if the path exists relative to the current working directory, it is returned as is;
//   - else if a repository root is known (recipe.root_dir: the parent of the nearest `recipes`
//     directory among the recipe file's ancestors, e.g. /repo for /repo/recipes/gpt_tiny.yaml),
//     root_dir/p is returned (whether or not it exists, so later errors show the full path);
//   - else p is returned unchanged.
std::string resolve_path(const Recipe& recipe, const std::string& p);
// Resolves an output path (checkpoint.save, logging.jsonl, logging.tensorboard_dir,
// logging.timeline) one fixed way, whether or not it exists yet: absolute as written, relative
// against the current working directory; the result is absolute and normalized (what the run
// prints at start).
std::string resolve_output_path(const std::string& p);

}  // namespace megatron::config
