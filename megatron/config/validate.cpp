// Per-section and cross-section recipe validation. Every failure names where the key came from
// (KeyOrigins), the full key path, and the offending value.
#include <algorithm>
#include <initializer_list>
#include <sstream>

#include "megatron/config/checker.h"
#include "megatron/config/recipe.h"
#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config {

std::string KeyOrigins::of(const std::string& key) const {
  auto it = by_key.find(key);
  return it != by_key.end() ? it->second : fallback;
}

int64_t ModelConfig::padded_vocab_size(int64_t tokenizer_vocab, int64_t tensor_parallel) const {
  int64_t vocab = vocab_size > 0 ? vocab_size : tokenizer_vocab;
  int64_t multiple =
      std::max<int64_t>(1, make_vocab_size_divisible_by) * std::max<int64_t>(1, tensor_parallel);
  return (vocab + multiple - 1) / multiple * multiple;
}

void ParallelConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  for (auto [key, v] : {std::pair{"parallel.tensor", tensor},
                        {"parallel.pipeline", pipeline},
                        {"parallel.expert", expert},
                        {"parallel.expert_tensor", expert_tensor == 0 ? 1 : expert_tensor},
                        {"parallel.context", context}})
    c.check(v >= 1, key, concat("must be >= 1 (got ", v, ")"));
  c.check(data >= 0, "parallel.data", concat("must be >= 1 or auto (got ", data, ")"));
  c.check(num_distributed_optimizer_instances >= 1, "parallel.num_distributed_optimizer_instances",
          concat("must be >= 1 (got ", num_distributed_optimizer_instances, ")"));
  c.check(fsdp_unit_layers >= 1, "parallel.fsdp_unit_layers",
          concat("must be >= 1 (got ", fsdp_unit_layers, ")"));
  c.check(topk_ratio > 0 && topk_ratio <= 1, "parallel.topk_ratio",
          concat("must be in (0, 1] (got ", topk_ratio, ")"));
  c.check(topk_warmup_iters >= 0, "parallel.topk_warmup_iters",
          concat("must be >= 0 (got ", topk_warmup_iters, ")"));
  c.non_negative("parallel.comm_warn_s", comm_warn_s);
  c.non_negative("parallel.comm_timeout_s", comm_timeout_s);
  if (virtual_pipeline) {
    c.check(*virtual_pipeline >= 1, "parallel.virtual_pipeline",
            concat("must be >= 1 or null (got ", *virtual_pipeline, ")"));
    c.check(*virtual_pipeline == 1 || pipeline >= 2, "parallel.virtual_pipeline",
            concat("needs parallel.pipeline >= 2 (got virtual_pipeline ", *virtual_pipeline,
                   " with pipeline ", pipeline, ")"));
  }
  validate_pipeline_schedule(c);
  // order: a permutation of tp, cp, ep, dp, pp joined by '-'.
  std::vector<std::string> parts;
  std::stringstream ss(order);
  for (std::string part; std::getline(ss, part, '-');) parts.push_back(part);
  std::vector<std::string> sorted = parts;
  std::sort(sorted.begin(), sorted.end());
  c.check(sorted == std::vector<std::string>{"cp", "dp", "ep", "pp", "tp"} && order.back() != '-',
          "parallel.order",
          concat("must list each of tp, cp, ep, dp, pp once, joined by '-' (got '", order, "')"));
  if (!pipeline_layers.empty()) {
    int64_t stages = pipeline * virtual_stages();
    c.check(static_cast<int64_t>(pipeline_layers.size()) == stages, "parallel.pipeline_layers",
            concat("must have one entry per pipeline stage (parallel.pipeline * "
                   "parallel.virtual_pipeline = ",
                   stages, "), got ", pipeline_layers.size(), " entries"));
    for (size_t i = 0; i < pipeline_layers.size(); ++i)
      c.check(pipeline_layers[i] >= 0, concat("parallel.pipeline_layers"),
              concat("entries must be >= 0 (got ", pipeline_layers[i], " at index ", i, ")"));
  }
}

void TrainingConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.positive("training.micro_batch_size", micro_batch_size);
  c.positive("training.global_batch_size", global_batch_size);
  c.check(global_batch_size <= (int64_t{1} << 31), "training.global_batch_size",
          concat("must be <= ", int64_t{1} << 31, " (got ", global_batch_size, ")"));
  c.positive("training.train_iters", train_iters);
  c.divisible("training.global_batch_size", global_batch_size, "training.micro_batch_size",
              micro_batch_size);
  c.non_negative("training.eval_interval", eval_interval);
  c.non_negative("training.eval_iters", eval_iters);
  if (eval_interval > 0)
    c.check(eval_iters > 0, "training.eval_iters",
            concat("must be > 0 when training.eval_interval is set (got eval_iters ", eval_iters,
                   " with eval_interval ", eval_interval, ")"));
  if (exit_duration_minutes) c.positive("training.exit_duration_minutes", *exit_duration_minutes);
  c.non_negative("training.threads", threads);
  c.non_negative("training.peak_tflops", peak_tflops);
  c.positive("training.initial_loss_scale", initial_loss_scale);
  c.positive("training.min_loss_scale", min_loss_scale);
  c.check(min_loss_scale <= initial_loss_scale, "training.min_loss_scale",
          concat("must not exceed training.initial_loss_scale (", min_loss_scale, " > ",
                 initial_loss_scale, ")"));
  c.positive("training.loss_scale_window", loss_scale_window);
  c.positive("training.hysteresis", hysteresis);
  c.check(rerun_spike_factor > 1.0, "training.rerun_spike_factor",
          concat("must be > 1 (got ", rerun_spike_factor, ")"));
  c.non_negative("training.error_injection_rank", error_injection_rank);
  if (error_injection_type != ErrorInjection::None)
    c.positive("training.error_injection_iteration", error_injection_iteration);
}

void OptimizerConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.positive("optimizer.lr", lr);
  c.non_negative("optimizer.min_lr", min_lr);
  c.check(min_lr <= lr, "optimizer.min_lr",
          concat("must be <= optimizer.lr (got ", num(min_lr), " > ", num(lr), ")"));
  c.non_negative("optimizer.weight_decay", weight_decay);
  c.unit_interval("optimizer.beta1", beta1);
  c.unit_interval("optimizer.beta2", beta2);
  c.positive("optimizer.eps", eps);
  c.non_negative("optimizer.clip_grad", clip_grad);
  c.check(offload_fraction >= 0.0 && offload_fraction <= 1.0, "optimizer.offload_fraction",
          concat("must be in [0, 1] (got ", num(offload_fraction), ")"));
  c.non_negative("optimizer.schedule.warmup_iters", schedule.warmup_iters);
  if (schedule.decay_iters) c.positive("optimizer.schedule.decay_iters", *schedule.decay_iters);
}

std::vector<double> DataConfig::split_fractions() const {
  std::vector<double> parts;
  std::stringstream ss(split);
  for (std::string part; std::getline(ss, part, ',');) {
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    double v = -1;
    if (!detail::parse_double(part, v).empty() || v < 0) return {};
    parts.push_back(v);
  }
  if (parts.empty() || parts.size() > 3 || split.back() == ',') return {};
  double sum = 0;
  for (double v : parts) sum += v;
  if (!(sum > 0)) return {};
  parts.resize(3, 0.0);
  for (double& v : parts) v /= sum;
  return parts;
}

void DataConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.check(tokenizer.type.has_value(), "data.tokenizer.type", "required key is missing");
  const TokenizerType t = *tokenizer.type;
  auto needs = [&](const std::string& key, const std::string& value) {
    c.check(!value.empty(), key,
            concat("required for data.tokenizer.type ", option_name(t), " (got none)"));
  };
  switch (t) {
    case TokenizerType::GPT2BPE:
      needs("data.tokenizer.vocab_file", tokenizer.vocab_file);
      needs("data.tokenizer.merge_file", tokenizer.merge_file);
      break;
    case TokenizerType::SentencePiece:
    case TokenizerType::HuggingFace:
      needs("data.tokenizer.model", tokenizer.model);
      break;
    case TokenizerType::BertWordPieceLowerCase:
    case TokenizerType::BertWordPieceCase:
      needs("data.tokenizer.vocab_file", tokenizer.vocab_file);
      break;
    case TokenizerType::Byte:
    case TokenizerType::Null:
      break;
  }
  c.non_negative("data.tokenizer.vocab_size", tokenizer.vocab_size);
  if (t == TokenizerType::Null)
    c.check(tokenizer.vocab_size > 0, "data.tokenizer.vocab_size",
            concat("must be > 0 for NullTokenizer (got ", tokenizer.vocab_size, ")"));
  c.check(mock || !train.empty() || sft.enabled(), "data.train",
          "must name at least one dataset (got none; data.mock: true trains on synthetic data, "
          "data.sft.train fine-tunes on conversations)");
  c.check(!sft.enabled() || (train.empty() && !mock), "data.sft.train",
          "replaces data.train and data.mock; leave those unset");
  sft.validate(origins);
  for (size_t i = 0; i < train.size(); ++i) {
    std::string key = concat("data.train[", i, "]");
    c.check(!train[i].path.empty(), key + ".path", "must not be empty (got none)");
    c.positive(key + ".weight", train[i].weight);
  }
  c.check(!split_fractions().empty(), "data.split",
          concat("must be 1 to 3 comma-separated non-negative numbers with a positive sum, like "
                 "\"969,30,1\" (got \"",
                 split, "\")"));
  c.check(masking_probability > 0 && masking_probability < 1, "data.masking_probability",
          concat("must be in (0, 1) (got ", masking_probability, ")"));
  c.check(short_seq_probability >= 0 && short_seq_probability <= 1, "data.short_seq_probability",
          concat("must be in [0, 1] (got ", short_seq_probability, ")"));
}

void CheckpointConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  if (save_interval) {
    c.positive("checkpoint.save_interval", *save_interval);
    c.check(!save.empty(), "checkpoint.save_interval",
            concat("needs checkpoint.save (got save_interval ", *save_interval,
                   " and no save directory)"));
  }
  c.non_negative("checkpoint.keep_last", keep_last);
  c.check(!finetune || !load.empty(), "checkpoint.finetune",
          "needs checkpoint.load to name the pretrained checkpoint (got finetune true, load none)");
  c.check(!finetune || pretrained.empty(), "checkpoint.finetune",
          concat("and checkpoint.pretrained both start from other weights; use "
                 "checkpoint.pretrained alone (got finetune true, pretrained ",
                 pretrained, ")"));
  c.check(!async_save || !save.empty(), "checkpoint.async_save",
          "needs checkpoint.save (got async_save true and no save directory)");
  c.non_negative("checkpoint.local_replication", local_replication);
  if (local_interval) {
    c.positive("checkpoint.local_interval", *local_interval);
    c.check(!local_dir.empty(), "checkpoint.local_interval",
            concat("needs checkpoint.local_dir, a node-local directory (got local_interval ",
                   *local_interval, " and no local_dir)"));
  }
}

void LoggingConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.non_negative("logging.straggler_interval", straggler_interval);
  c.positive("logging.interval", interval);
  c.positive("logging.profile_step_start", profile_step_start);
  c.check(profile_step_end > profile_step_start, "logging.profile_step_end",
          concat("must be after logging.profile_step_start (", profile_step_start, "), got ",
                 profile_step_end));
}

void ClusterConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.non_negative("cluster.nodes", nodes);
  c.non_negative("cluster.gpus_per_node", gpus_per_node);
  c.non_negative("cluster.gpu_memory_gb", gpu_memory_gb);
  c.non_negative("cluster.gpu_tflops", gpu_tflops);
  c.positive("cluster.intra_node_gbps", intra_node_gbps);
  c.positive("cluster.inter_node_gbps", inter_node_gbps);
  // A shape is both numbers or neither.
  if (nodes > 0 || gpus_per_node > 0)
    c.check(nodes > 0 && gpus_per_node > 0, nodes > 0 ? "cluster.gpus_per_node" : "cluster.nodes",
            concat("needs both cluster.nodes and cluster.gpus_per_node (got nodes ", nodes,
                   ", gpus_per_node ", gpus_per_node, ")"));
  c.non_negative("cluster.elastic.min_nodes", elastic.min_nodes);
  c.non_negative("cluster.elastic.max_nodes", elastic.max_nodes);
  if (elastic.min_nodes > 0 || elastic.max_nodes > 0)
    c.check(elastic.min_nodes >= 1 && elastic.min_nodes <= elastic.max_nodes,
            "cluster.elastic.min_nodes",
            concat("needs 1 <= cluster.elastic.min_nodes <= cluster.elastic.max_nodes (got ",
                   elastic.min_nodes, " and ", elastic.max_nodes, ")"));
}

// What context parallelism needs and supports (megatron/transformer/context_parallel.h).
void Recipe::validate_context_parallel(Checker& c) const {
  const int64_t cp = parallel.context, tp = parallel.tensor;
  c.divisible("model.seq_length", model.seq_length, "2 * parallel.context", 2 * cp);
  c.check(model.arch != Arch::BERT, "parallel.context",
          concat("context parallelism is implemented for the causal decoders (model.arch gpt or "
                 "llama), not bert (got parallel.context ",
                 cp, ")"));
  c.check(model.attention_backend != AttentionBackend::Unfused &&
              model.attention_backend != AttentionBackend::Fused,
          "model.attention_backend",
          concat("context parallelism runs its own flash attention kernels: use flash or auto "
                 "(got ",
                 option_name(model.attention_backend), " with parallel.context ", cp, ")"));
  c.check(model.softmax_type == SoftmaxType::Vanilla || parallel.cp_comm_type != CpCommType::A2A,
          "parallel.cp_comm_type",
          concat("a2a keeps no row statistics of a rank's own heads, which attention sinks (model."
                 "softmax_type ",
                 option_name(model.softmax_type), ") scale by: use p2p or all_gather"));
  // MoE: ep is carved out of cp x dp, not out of tp x cp x dp.
  c.check(parallel.expert_tensor != 1 || parallel.tensor == 1, "parallel.expert_tensor",
          concat("1 below parallel.tensor ", parallel.tensor,
                 " is not implemented with context parallelism (got parallel.context ", cp, ")"));

  if (parallel.cp_comm_type == CpCommType::A2A) {
    c.divisible("model.num_attention_heads", model.num_attention_heads,
                "parallel.tensor * parallel.context (cp_comm_type a2a)", tp * cp);
    c.divisible("model.num_query_groups", model.query_groups(),
                "parallel.tensor * parallel.context (cp_comm_type a2a)", tp * cp);
  }
}

void Recipe::validate() const {
  model.validate(origins);
  parallel.validate(origins);
  training.validate(origins);
  optimizer.validate(origins);
  data.validate(origins);
  checkpoint.validate(origins);
  logging.validate(origins);
  cluster.validate(origins);
  peft.validate(origins);

  Checker c(origins);
  validate_layout(c);
  validate_experts(c);
  validate_sharding_and_device(c);
  validate_compression(c);
  validate_schedule_and_data(c);
  validate_pipeline(c);
}

// Sizes that must divide over tensor, context and pipeline parallelism.
void Recipe::validate_layout(Checker& c) const {
  const int64_t tp = parallel.tensor;
  c.divisible("model.num_attention_heads", model.num_attention_heads, "parallel.tensor", tp);
  c.divisible("model.num_query_groups", model.query_groups(), "parallel.tensor", tp);
  c.divisible("model.ffn_hidden_size", model.ffn(), "parallel.tensor", tp);
  if (parallel.sequence_parallel)
    c.divisible("model.seq_length", model.seq_length, "parallel.tensor (sequence_parallel)", tp);
  if (parallel.context > 1) validate_context_parallel(c);
  if (parallel.pipeline_layers.empty()) {
    int64_t stages = parallel.pipeline * parallel.virtual_stages();
    c.divisible("model.num_layers", model.num_layers,
                parallel.virtual_stages() > 1 ? "parallel.pipeline * parallel.virtual_pipeline"
                                              : "parallel.pipeline",
                stages);
  } else {
    int64_t sum = 0;
    std::string terms;
    for (int64_t n : parallel.pipeline_layers) {
      sum += n;
      terms += concat(terms.empty() ? "" : "+", n);
    }
    c.check(sum == model.num_layers, "parallel.pipeline_layers",
            concat("must sum to model.num_layers (got ", terms, " = ", sum, ", num_layers ",
                   model.num_layers, ")"));
  }
}

// Expert (and expert tensor) parallelism against the MoE model.
void Recipe::validate_experts(Checker& c) const {
  if (parallel.expert > 1) {
    c.check(model.moe.num_experts > 0, "parallel.expert",
            concat("needs an MoE model (model.num_experts > 0) (got expert ", parallel.expert,
                   " with num_experts ", model.moe.num_experts, ")"));
    c.divisible("model.num_experts", model.moe.num_experts, "parallel.expert", parallel.expert);
  }
  // Expert tensor parallelism (Megatron's ETP): auto/tp splits each expert's MLP like the dense
  // one; 1 under tp > 1 keeps the experts whole and folds the tp ranks into expert parallelism
  // (parallel folding). As in Megatron, that needs the tokens split over tp (sequence
  // parallelism), so every rank routes and dispatches only its own slice.
  const int64_t etp = parallel.expert_tensor == 0 ? parallel.tensor : parallel.expert_tensor;
  if (parallel.expert_tensor != 0)
    c.check(etp == parallel.tensor || etp == 1, "parallel.expert_tensor",
            concat("must be auto, 1 or parallel.tensor (got ", parallel.expert_tensor,
                   " with tensor ", parallel.tensor, ")"));
  if (etp != parallel.tensor) {
    c.check(model.moe.enabled(), "parallel.expert_tensor",
            concat("needs an MoE model (model.num_experts > 0) (got expert_tensor ", etp,
                   " with num_experts ", model.moe.num_experts, ")"));
    c.check(parallel.sequence_parallel, "parallel.expert_tensor",
            concat("1 below parallel.tensor ", parallel.tensor,
                   " needs parallel.sequence_parallel: true (each tensor-parallel rank routes its "
                   "own slice of the tokens)"));
  }
  if (model.moe.enabled()) {
    const int64_t expert_ffn = model.moe.expert_ffn(model.ffn());
    c.divisible("model.moe_ffn_hidden_size", expert_ffn, "parallel.expert_tensor", etp);
    c.divisible("model.moe_shared_expert_intermediate_size",
                model.moe.moe_shared_expert_intermediate_size, "parallel.tensor", parallel.tensor);
  }
}

// Data-parallel sharding, the attention backend and optimizer offload against the device.
void Recipe::validate_sharding_and_device(Checker& c) const {
  // Data-parallel sharding: the aliases may only agree with an explicit strategy.
  const bool alias = optimizer.distributed || training.use_distributed_optimizer;
  if (parallel.data_parallel_sharding_strategy && alias)
    c.check(*parallel.data_parallel_sharding_strategy != ShardingStrategy::NoShard,
            "parallel.data_parallel_sharding_strategy",
            concat("no_shard contradicts ",
                   optimizer.distributed ? "optimizer.distributed"
                                         : "training.use_distributed_optimizer",
                   ": true (which asks for the distributed optimizer, strategy optim)"));
  if (parallel.num_distributed_optimizer_instances > 1) {
    c.check(sharding_strategy() != ShardingStrategy::NoShard,
            "parallel.num_distributed_optimizer_instances",
            concat("hybrid sharding (", parallel.num_distributed_optimizer_instances,
                   " instances) needs a sharding strategy: set "
                   "parallel.data_parallel_sharding_strategy to optim, optim_grads or "
                   "optim_grads_params"));
    c.check(!model.moe.enabled(), "parallel.num_distributed_optimizer_instances",
            concat("hybrid sharding of mixture-of-experts models is not implemented (the expert "
                   "weights shard over expert data parallelism); got ",
                   parallel.num_distributed_optimizer_instances,
                   " instances with model.num_experts ", model.moe.num_experts));
  }
  c.check(
      model.attention_backend != AttentionBackend::Fused || training.device == TrainingDevice::CUDA,
      "model.attention_backend",
      "fused is cuDNN's fused attention and needs training.device: cuda (use flash or auto "
      "on the cpu)");
  if (optimizer.offload == OptimizerOffload::CPU) {
    c.check(training.device == TrainingDevice::CUDA, "optimizer.offload",
            "cpu offload moves the optimizer from the GPU to host memory; with training.device: "
            "cpu the optimizer already lives in host memory (remove the key or set it to none)");
    c.check(optimizer.type == OptimizerType::AdamW, "optimizer.offload",
            concat("the host optimizer is AdamW (got optimizer.type: ", option_name(optimizer.type),
                   ")"));
  }
}

// The LR schedule, fine-tuning data and LoRA against the model, the validation split.
void Recipe::validate_schedule_and_data(Checker& c) const {
  int64_t decay_iters = optimizer.schedule.decay_iters.value_or(training.train_iters);
  c.check(optimizer.schedule.warmup_iters <= decay_iters, "optimizer.schedule.warmup_iters",
          concat("must be <= the decay length (optimizer.schedule.decay_iters, default "
                 "training.train_iters) (got ",
                 optimizer.schedule.warmup_iters, " > ", decay_iters, ")"));
  if (data.sft.enabled()) {
    c.check(model.arch != Arch::BERT, "data.sft.train",
            "fine-tunes causal decoders (model.arch gpt or llama), not bert");
    c.check(data.tokenizer.type != TokenizerType::Null, "data.tokenizer.type",
            "data.sft needs a tokenizer for the chat text (got NullTokenizer)");
  }
  if (peft.lora()) {
    c.check(model.arch != Arch::BERT, "peft.type",
            "LoRA is implemented for the decoders (model.arch gpt or llama), not bert");
    c.check(!model.moe.enabled(), "peft.type",
            concat("LoRA on mixture-of-experts models is not implemented (model.num_experts ",
                   model.moe.num_experts, ")"));
    c.check(!model.mla.enabled(), "peft.type",
            "LoRA on multi-latent attention's projections is not implemented "
            "(model.multi_latent_attention)");
  }
  const bool sft_valid_files = data.sft.enabled() && !data.sft.valid.empty();
  if (training.eval_interval > 0 && !sft_valid_files)
    c.check(data.split_fractions()[1] > 0, "data.split",
            concat("needs a non-zero validation part when training.eval_interval > 0 (got \"",
                   data.split, "\")"));
  if (model.vocab_size > 0 && data.tokenizer.vocab_size > 0)
    c.check(model.vocab_size >= data.tokenizer.vocab_size, "model.vocab_size",
            concat("must be >= data.tokenizer.vocab_size (got ", model.vocab_size, " < ",
                   data.tokenizer.vocab_size, ")"));
}

void Recipe::validate_for_world(int64_t world) const {
  validate();  // also guarantees the parallel sizes are >= 1 before dividing by them
  Checker c(origins);
  const auto& p = parallel;
  c.check(world >= 1, "world size", concat("must be >= 1 (got ", world, ")"));
  int64_t mp = p.tensor * p.pipeline * p.context;
  c.check(world % mp == 0, "parallel.tensor",
          concat("parallel.tensor * parallel.pipeline * parallel.context (", p.tensor, " * ",
                 p.pipeline, " * ", p.context, " = ", mp, ") must divide the world size (got ",
                 world, " ranks)"));
  int64_t dp = world / mp;
  c.check(p.data == 0 || p.data == dp, "parallel.data",
          concat("must be auto or world / (tensor * pipeline * context) = ", world, " / ", mp,
                 " = ", dp, " (got ", p.data, ")"));
  int64_t per_step = training.micro_batch_size * dp;
  c.check(training.global_batch_size % per_step == 0, "training.global_batch_size",
          concat("must be divisible by training.micro_batch_size * data-parallel size (got ",
                 training.global_batch_size, " % (", training.micro_batch_size, " * ", dp,
                 ") = ", training.global_batch_size % per_step, ")"));
  if (p.expert_tensor == 1 && p.tensor > 1)
    c.check((p.tensor * dp) % p.expert == 0, "parallel.expert",
            concat("must divide tensor * data-parallel size with expert_tensor 1 (got ",
                   p.tensor * dp, " % expert ", p.expert, " = ", (p.tensor * dp) % p.expert, ")"));
  else if (p.context > 1)
    c.check((p.context * dp) % p.expert == 0, "parallel.expert",
            concat("must divide context * data-parallel size (got ", p.context * dp, " % expert ",
                   p.expert, " = ", (p.context * dp) % p.expert, ")"));
  else
    c.check(dp % p.expert == 0, "parallel.expert",
            concat("must divide the data-parallel size (got dp ", dp, " % expert ", p.expert, " = ",
                   dp % p.expert, ")"));
  validate_pipeline_for_world(c, dp);
  c.check(dp % p.num_distributed_optimizer_instances == 0,
          "parallel.num_distributed_optimizer_instances",
          concat("must divide the data-parallel size (got dp ", dp, " % ",
                 p.num_distributed_optimizer_instances, " = ",
                 dp % p.num_distributed_optimizer_instances, ")"));
}

ShardingStrategy Recipe::sharding_strategy() const {
  if (parallel.data_parallel_sharding_strategy) return *parallel.data_parallel_sharding_strategy;
  return optimizer.distributed || training.use_distributed_optimizer ? ShardingStrategy::Optim
                                                                     : ShardingStrategy::NoShard;
}

int64_t Recipe::data_parallel_size(int64_t world_size) const {
  validate_for_world(world_size);
  return world_size / (parallel.tensor * parallel.pipeline * parallel.context);
}

int64_t Recipe::num_microbatches(int64_t world_size) const {
  int64_t dp = data_parallel_size(world_size);
  return training.global_batch_size / (training.micro_batch_size * dp);
}

void Recipe::resolve_for_world(int64_t world_size) {
  parallel.data = data_parallel_size(world_size);
}

bool Recipe::operator==(const Recipe& o) const {
  return model == o.model && parallel == o.parallel && training == o.training &&
         optimizer == o.optimizer && data == o.data && checkpoint == o.checkpoint &&
         logging == o.logging && cluster == o.cluster && peft == o.peft;
}

void SFTDataConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.one_of("data.sft.chat_template", chat_template,
           {"simple", "plain", "llama2", "llama3", "chatml", "qwen3", "gemma", "phi3"});
  c.one_of("data.sft.packing", packing, {"packed", "padded"});
  c.one_of("data.sft.truncation", truncation, {"right", "left", "drop"});
  c.check(train.empty() == false || valid.empty(), "data.sft.valid",
          "needs data.sft.train (got validation files only)");
  for (const auto* files : {&train, &valid}) {
    const char* name = files == &train ? "data.sft.train" : "data.sft.valid";
    for (size_t i = 0; i < files->size(); ++i) {
      const std::string key = concat(name, "[", i, "]");
      c.check(!(*files)[i].path.empty(), key + ".path", "must not be empty (got none)");
      c.positive(key + ".weight", (*files)[i].weight);
    }
  }
}

void PeftConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  c.one_of("peft.type", type, {"none", "lora"});
  if (!lora()) return;
  c.positive("peft.dim", dim);
  c.positive("peft.alpha", alpha);
  c.unit_interval("peft.dropout", dropout);
  c.check(!target_modules.empty(), "peft.target_modules", "must name at least one module");
  for (size_t i = 0; i < target_modules.size(); ++i)
    c.one_of(concat("peft.target_modules[", i, "]"), target_modules[i],
             {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"});
}

}  // namespace megatron::config
