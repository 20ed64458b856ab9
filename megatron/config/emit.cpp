// Recipe -> YAML / JSON. Every key is written (defaults included) so the output is the complete,
// resolved run description; parse_recipe_string(to_yaml()) gives back an equal Recipe.
#include <sstream>

#include "megatron/config/recipe.h"
#include "megatron/config/scalar.h"

namespace megatron::config {
namespace {

using detail::format_double;
using detail::yaml_quote;

class YamlWriter {
 public:
  void section(const std::string& name) {
    out_ << std::string(indent_, ' ') << name << ":\n";
    indent_ += 2;
  }
  void end() { indent_ -= 2; }
  void kv(const std::string& key, const std::string& value, const std::string& comment = "") {
    out_ << std::string(indent_, ' ') << key << ": " << value;
    if (!comment.empty()) out_ << "  # " << comment;
    out_ << "\n";
  }
  void raw(const std::string& line) { out_ << std::string(indent_, ' ') << line << "\n"; }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  int indent_ = 0;
};

std::string str(const std::string& s) { return s.empty() ? "null" : yaml_quote(s); }
std::string str(int64_t v) { return std::to_string(v); }
std::string str(uint64_t v) { return std::to_string(v); }
std::string str(double v) { return format_double(v); }
std::string str(bool v) { return v ? "true" : "false"; }
template <typename T>
std::string str(const std::optional<T>& v) {
  return v ? str(*v) : "null";
}
std::string auto_note(int64_t stored, int64_t resolved) {
  return stored == 0 ? "auto: " + std::to_string(resolved) : "";
}

nlohmann::json js(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}
template <typename T>
nlohmann::json js(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string Recipe::to_yaml() const {
  YamlWriter w;
  if (!source_path.empty()) w.raw("# Resolved recipe; source: " + source_path);
  const auto& m = model;
  w.section("model");
  w.kv("arch", str(m.arch));
  w.kv("num_layers", str(m.num_layers));
  w.kv("hidden_size", str(m.hidden_size));
  w.kv("num_attention_heads", str(m.num_attention_heads));
  w.kv("num_query_groups", str(m.num_query_groups),
       auto_note(m.num_query_groups, m.query_groups()));
  w.kv("ffn_hidden_size", str(m.ffn_hidden_size), auto_note(m.ffn_hidden_size, m.ffn()));
  w.kv("seq_length", str(m.seq_length));
  w.kv("max_position_embeddings", str(m.max_position_embeddings),
       auto_note(m.max_position_embeddings, m.max_positions()));
  w.kv("normalization", str(m.normalization));
  w.kv("activation", str(m.activation));
  w.kv("position_embedding", str(m.position_embedding));
  w.kv("attention_backend", str(m.attention_backend));
  w.kv("rope_theta", str(m.rope_theta));
  w.kv("tie_embeddings", str(m.tie_embeddings));
  w.kv("add_bias", str(m.add_bias));
  w.kv("hidden_dropout", str(m.hidden_dropout));
  w.kv("attention_dropout", str(m.attention_dropout));
  w.kv("layernorm_epsilon", str(m.layernorm_epsilon));
  w.kv("init_method_std", str(m.init_method_std));
  w.kv("vocab_size", str(m.vocab_size), m.vocab_size == 0 ? "auto: from the tokenizer" : "");
  w.kv("make_vocab_size_divisible_by", str(m.make_vocab_size_divisible_by));
  w.kv("num_experts", str(m.num_experts), m.num_experts == 0 ? "dense" : "");
  w.kv("moe_router_topk", str(m.moe_router_topk));
  w.end();

  const auto& p = parallel;
  w.section("parallel");
  w.kv("tensor", str(p.tensor));
  w.kv("pipeline", str(p.pipeline));
  w.kv("data", p.data == 0 ? "auto" : str(p.data));
  w.kv("expert", str(p.expert));
  w.kv("context", str(p.context));
  w.kv("virtual_pipeline", str(p.virtual_pipeline));
  w.kv("sequence_parallel", str(p.sequence_parallel));
  w.kv("order", str(p.order));
  if (p.pipeline_layers.empty()) {
    w.kv("pipeline_layers", "null");
  } else {
    std::string list;
    for (int64_t n : p.pipeline_layers) list += (list.empty() ? "" : ", ") + std::to_string(n);
    w.kv("pipeline_layers", "[" + list + "]");
  }
  w.end();

  const auto& t = training;
  w.section("training");
  w.kv("device", str(t.device));
  w.kv("precision", str(t.precision));
  w.kv("micro_batch_size", str(t.micro_batch_size));
  w.kv("global_batch_size", str(t.global_batch_size));
  w.kv("train_iters", str(t.train_iters));
  w.kv("eval_interval", str(t.eval_interval));
  w.kv("eval_iters", str(t.eval_iters));
  w.kv("seed", str(t.seed));
  w.kv("recompute", str(t.recompute));
  w.kv("exit_duration_minutes", str(t.exit_duration_minutes));
  w.kv("threads", str(t.threads), t.threads == 0 ? "auto" : "");
  w.kv("peak_tflops", str(t.peak_tflops), t.peak_tflops == 0 ? "measure at start" : "");
  w.kv("initial_loss_scale", str(t.initial_loss_scale), "fp16 only");
  w.kv("min_loss_scale", str(t.min_loss_scale));
  w.kv("loss_scale_window", str(t.loss_scale_window));
  w.kv("hysteresis", str(t.hysteresis));
  w.end();

  const auto& o = optimizer;
  w.section("optimizer");
  w.kv("type", str(o.type));
  w.kv("lr", str(o.lr));
  w.kv("min_lr", str(o.min_lr));
  w.kv("weight_decay", str(o.weight_decay));
  w.kv("beta1", str(o.beta1));
  w.kv("beta2", str(o.beta2));
  w.kv("eps", str(o.eps));
  w.kv("clip_grad", str(o.clip_grad));
  w.kv("distributed", str(o.distributed));
  w.section("schedule");
  w.kv("warmup_iters", str(o.schedule.warmup_iters));
  w.kv("decay", str(o.schedule.decay));
  w.kv("decay_iters", str(o.schedule.decay_iters),
       o.schedule.decay_iters ? "" : "auto: training.train_iters");
  w.end();
  w.end();

  w.section("data");
  w.section("tokenizer");
  w.kv("type", str(data.tokenizer.type));
  w.kv("vocab_file", str(data.tokenizer.vocab_file));
  w.kv("merge_file", str(data.tokenizer.merge_file));
  w.kv("model", str(data.tokenizer.model));
  w.kv("vocab_size", str(data.tokenizer.vocab_size));
  w.end();
  if (data.train.empty()) {
    w.kv("train", "[]");
  } else {
    w.section("train");
    for (const auto& e : data.train) {
      w.raw("- path: " + str(e.path));
      w.raw("  weight: " + str(e.weight));
    }
    w.end();
  }
  w.kv("split", yaml_quote(data.split.empty() ? "" : data.split));
  w.kv("cache_dir", str(data.cache_dir));
  w.kv("masking_probability", str(data.masking_probability), "BERT only");
  w.kv("short_seq_probability", str(data.short_seq_probability), "BERT only");
  w.kv("bert_binary_head", str(data.bert_binary_head), "BERT only");
  w.kv("mock", str(data.mock), data.mock ? "synthetic data" : "");
  w.end();

  const auto& c = checkpoint;
  w.section("checkpoint");
  w.kv("save", str(c.save));
  w.kv("load", str(c.load));
  w.kv("save_interval", str(c.save_interval));
  w.kv("keep_last", str(c.keep_last), c.keep_last == 0 ? "keep all" : "");
  w.kv("finetune", str(c.finetune));
  w.kv("strict", str(c.strict), c.strict ? "" : "partial loads allowed");
  w.end();

  w.section("logging");
  w.kv("interval", str(logging.interval));
  w.kv("jsonl", str(logging.jsonl));
  w.kv("tensorboard_dir", str(logging.tensorboard_dir));
  w.kv("timeline", str(logging.timeline));
  w.end();

  const auto& cl = cluster;
  w.section("cluster");
  w.kv("nodes", str(cl.nodes), cl.nodes == 0 ? "not stated" : "");
  w.kv("gpus_per_node", str(cl.gpus_per_node), cl.gpus_per_node == 0 ? "not stated" : "");
  w.kv("gpu_memory_gb", str(cl.gpu_memory_gb), cl.gpu_memory_gb == 0 ? "not stated" : "");
  w.kv("gpu_tflops", str(cl.gpu_tflops), cl.gpu_tflops == 0 ? "not stated" : "");
  w.kv("intra_node_gbps", str(cl.intra_node_gbps));
  w.kv("inter_node_gbps", str(cl.inter_node_gbps));
  w.end();
  return w.str();
}

nlohmann::json Recipe::to_json() const {
  using nlohmann::json;
  const auto& m = model;
  json j;
  j["model"] = {{"arch", m.arch},
                {"num_layers", m.num_layers},
                {"hidden_size", m.hidden_size},
                {"num_attention_heads", m.num_attention_heads},
                {"num_query_groups", m.num_query_groups},
                {"ffn_hidden_size", m.ffn_hidden_size},
                {"seq_length", m.seq_length},
                {"max_position_embeddings", m.max_position_embeddings},
                {"normalization", m.normalization},
                {"activation", m.activation},
                {"position_embedding", m.position_embedding},
                {"attention_backend", m.attention_backend},
                {"rope_theta", m.rope_theta},
                {"tie_embeddings", m.tie_embeddings},
                {"add_bias", m.add_bias},
                {"hidden_dropout", m.hidden_dropout},
                {"attention_dropout", m.attention_dropout},
                {"layernorm_epsilon", m.layernorm_epsilon},
                {"init_method_std", m.init_method_std},
                {"vocab_size", m.vocab_size},
                {"make_vocab_size_divisible_by", m.make_vocab_size_divisible_by},
                {"num_experts", m.num_experts},
                {"moe_router_topk", m.moe_router_topk}};
  const auto& p = parallel;
  j["parallel"] = {
      {"tensor", p.tensor},
      {"pipeline", p.pipeline},
      {"data", p.data == 0 ? json("auto") : json(p.data)},
      {"expert", p.expert},
      {"context", p.context},
      {"virtual_pipeline", js(p.virtual_pipeline)},
      {"sequence_parallel", p.sequence_parallel},
      {"order", p.order},
      {"pipeline_layers", p.pipeline_layers.empty() ? json(nullptr) : json(p.pipeline_layers)}};
  const auto& t = training;
  j["training"] = {{"device", t.device},
                   {"precision", t.precision},
                   {"micro_batch_size", t.micro_batch_size},
                   {"global_batch_size", t.global_batch_size},
                   {"train_iters", t.train_iters},
                   {"eval_interval", t.eval_interval},
                   {"eval_iters", t.eval_iters},
                   {"seed", t.seed},
                   {"recompute", t.recompute},
                   {"exit_duration_minutes", js(t.exit_duration_minutes)},
                   {"threads", t.threads},
                   {"peak_tflops", t.peak_tflops},
                   {"initial_loss_scale", t.initial_loss_scale},
                   {"min_loss_scale", t.min_loss_scale},
                   {"loss_scale_window", t.loss_scale_window},
                   {"hysteresis", t.hysteresis}};
  const auto& o = optimizer;
  j["optimizer"] = {{"type", o.type},
                    {"lr", o.lr},
                    {"min_lr", o.min_lr},
                    {"weight_decay", o.weight_decay},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"clip_grad", o.clip_grad},
                    {"distributed", o.distributed},
                    {"schedule",
                     {{"warmup_iters", o.schedule.warmup_iters},
                      {"decay", o.schedule.decay},
                      {"decay_iters", js(o.schedule.decay_iters)}}}};
  json train = json::array();
  for (const auto& e : data.train) train.push_back({{"path", e.path}, {"weight", e.weight}});
  j["data"] = {{"tokenizer",
                {{"type", js(data.tokenizer.type)},
                 {"vocab_file", js(data.tokenizer.vocab_file)},
                 {"merge_file", js(data.tokenizer.merge_file)},
                 {"model", js(data.tokenizer.model)},
                 {"vocab_size", data.tokenizer.vocab_size}}},
               {"train", train},
               {"split", data.split},
               {"cache_dir", js(data.cache_dir)},
               {"masking_probability", data.masking_probability},
               {"short_seq_probability", data.short_seq_probability},
               {"bert_binary_head", data.bert_binary_head},
               {"mock", data.mock}};
  const auto& c = checkpoint;
  j["checkpoint"] = {
      {"save", js(c.save)},       {"load", js(c.load)},     {"save_interval", js(c.save_interval)},
      {"keep_last", c.keep_last}, {"finetune", c.finetune}, {"strict", c.strict}};
  j["logging"] = {{"interval", logging.interval},
                  {"jsonl", js(logging.jsonl)},
                  {"tensorboard_dir", js(logging.tensorboard_dir)},
                  {"timeline", js(logging.timeline)}};
  j["cluster"] = {{"nodes", cluster.nodes},
                  {"gpus_per_node", cluster.gpus_per_node},
                  {"gpu_memory_gb", cluster.gpu_memory_gb},
                  {"gpu_tflops", cluster.gpu_tflops},
                  {"intra_node_gbps", cluster.intra_node_gbps},
                  {"inter_node_gbps", cluster.inter_node_gbps}};
  return j;
}

}  // namespace megatron::config
