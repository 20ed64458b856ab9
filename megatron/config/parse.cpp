#include "megatron/config/parse.h"

#include <algorithm>
#include <optional>

#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config::detail {
namespace {

[[noreturn]] void fail(const Node& n, const std::string& key, const std::string& msg) {
  throw InputError(concat(n.origin.str(), ": ", key, ": ", msg));
}

// Reads the keys of one map, remembering which were used so that leftovers are reported.
class MapReader {
 public:
  // `node` may be null (section absent); `path` is the map's key path ("model", "data.tokenizer").
  MapReader(const Node* node, std::string path, KeyOrigins& origins)
      : node_(node && !node->is_null() ? node : nullptr),
        path_(std::move(path)),
        origins_(origins) {
    if (node_ && node_->kind != Node::Kind::Map)
      fail(*node_, path_, concat("expected a map of keys, got ", node_->describe()));
  }

  std::string key_path(const std::string& key) const { return path_ + "." + key; }

  // The value of `key`, or null when absent or null. Records where the key came from.
  const Node* take(const std::string& key) {
    known_.push_back(key);
    if (!node_) return nullptr;
    const Node* v = node_->find(key);
    if (!v) return nullptr;
    origins_.by_key[key_path(key)] = v->origin.str();
    return v->is_null() ? nullptr : v;
  }

  [[noreturn]] void missing(const std::string& key) const {
    std::string where = node_ ? node_->origin.str() : origins_.fallback;
    throw InputError(concat(where, ": ", key_path(key), ": required key is missing"));
  }

  template <typename T>
  void get(const std::string& key, T& out) {
    if (const Node* v = take(key)) convert(*v, key_path(key), out);
  }
  template <typename T>
  void get(const std::string& key, std::optional<T>& out) {
    if (const Node* v = take(key)) {
      T value{};
      convert(*v, key_path(key), value);
      out = value;
    } else {
      out.reset();
    }
  }
  template <typename T>
  void required(const std::string& key, T& out) {
    const Node* v = take(key);
    if (!v) missing(key);
    convert(*v, key_path(key), out);
  }

  // Reports keys that no reader asked for, with a "did you mean" for near misses.
  void finish() const {
    if (!node_) return;
    for (const auto& [key, value] : node_->entries) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string best;
      size_t best_d = 3;
      for (const auto& k : known_) {
        size_t d = edit_distance(key, k);
        if (d < best_d) best_d = d, best = k;
      }
      std::string known;
      for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
      fail(value, key_path(key),
           concat("unknown key", best.empty() ? "" : concat(" (did you mean '", best, "'?)"),
                  "; known keys: ", known));
    }
  }

  static void convert(const Node& v, const std::string& key, int64_t& out) {
    expect_plain_scalar(v, key, "an integer");
    if (auto why = parse_int64(v.scalar, out); !why.empty())
      fail(v, key, concat("expected an integer, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, uint64_t& out) {
    expect_plain_scalar(v, key, "a non-negative integer");
    if (auto why = parse_uint64(v.scalar, out); !why.empty())
      fail(v, key, concat("expected a non-negative integer, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, double& out) {
    expect_plain_scalar(v, key, "a number");
    if (auto why = parse_double(v.scalar, out); !why.empty())
      fail(v, key, concat("expected a number, got '", v.scalar, "' (", why, ")"));
  }
  static void convert(const Node& v, const std::string& key, bool& out) {
    expect_plain_scalar(v, key, "true or false");
    if (auto why = parse_bool(v.scalar, out); !why.empty())
      fail(v, key, concat("expected true or false, got '", v.scalar, "'"));
  }
  static void convert(const Node& v, const std::string& key, std::string& out) {
    if (v.kind != Node::Kind::Scalar) fail(v, key, concat("expected a string, got ", v.describe()));
    out = v.scalar;
  }
  static void convert(const Node& v, const std::string& key, std::vector<int64_t>& out) {
    if (v.kind != Node::Kind::Seq)
      fail(v, key, concat("expected a list of integers, got ", v.describe()));
    out.clear();
    for (size_t i = 0; i < v.items.size(); ++i) {
      int64_t x = 0;
      convert(v.items[i], concat(key, "[", i, "]"), x);
      out.push_back(x);
    }
  }

 private:
  static void expect_plain_scalar(const Node& v, const std::string& key, const char* what) {
    if (v.kind != Node::Kind::Scalar || v.quoted)
      fail(v, key, concat("expected ", what, ", got ", v.describe()));
  }

  const Node* node_;
  std::string path_;
  KeyOrigins& origins_;
  std::vector<std::string> known_;
};

void parse_model(MapReader r, ModelConfig& m) {
  r.get("arch", m.arch);
  r.required("num_layers", m.num_layers);
  r.required("hidden_size", m.hidden_size);
  r.required("num_attention_heads", m.num_attention_heads);
  r.get("num_query_groups", m.num_query_groups);
  r.get("ffn_hidden_size", m.ffn_hidden_size);
  r.required("seq_length", m.seq_length);
  r.get("max_position_embeddings", m.max_position_embeddings);
  r.get("normalization", m.normalization);
  r.get("activation", m.activation);
  r.get("position_embedding", m.position_embedding);
  r.get("attention_backend", m.attention_backend);
  r.get("rope_theta", m.rope_theta);
  r.get("tie_embeddings", m.tie_embeddings);
  r.get("add_bias", m.add_bias);
  r.get("hidden_dropout", m.hidden_dropout);
  r.get("attention_dropout", m.attention_dropout);
  r.get("layernorm_epsilon", m.layernorm_epsilon);
  r.get("init_method_std", m.init_method_std);
  r.get("vocab_size", m.vocab_size);
  r.get("make_vocab_size_divisible_by", m.make_vocab_size_divisible_by);
  r.get("num_experts", m.num_experts);
  r.get("moe_router_topk", m.moe_router_topk);
  r.finish();
}

void parse_parallel(MapReader r, ParallelConfig& p) {
  r.get("tensor", p.tensor);
  r.get("pipeline", p.pipeline);
  if (const Node* v = r.take("data")) {
    if (v->kind == Node::Kind::Scalar && v->scalar == "auto")
      p.data = 0;
    else if (v->kind != Node::Kind::Scalar || v->quoted || !parse_int64(v->scalar, p.data).empty())
      fail(*v, r.key_path("data"), concat("expected an integer or auto, got ", v->describe()));
  }
  r.get("expert", p.expert);
  r.get("context", p.context);
  r.get("virtual_pipeline", p.virtual_pipeline);
  r.get("sequence_parallel", p.sequence_parallel);
  r.get("order", p.order);
  r.get("pipeline_layers", p.pipeline_layers);
  r.finish();
}

void parse_training(MapReader r, TrainingConfig& t) {
  r.get("device", t.device);
  r.get("precision", t.precision);
  r.required("micro_batch_size", t.micro_batch_size);
  r.required("global_batch_size", t.global_batch_size);
  r.required("train_iters", t.train_iters);
  r.get("eval_interval", t.eval_interval);
  r.get("eval_iters", t.eval_iters);
  r.get("seed", t.seed);
  r.get("recompute", t.recompute);
  r.get("exit_duration_minutes", t.exit_duration_minutes);
  r.get("threads", t.threads);
  r.get("peak_tflops", t.peak_tflops);
  r.get("initial_loss_scale", t.initial_loss_scale);
  r.get("min_loss_scale", t.min_loss_scale);
  r.get("loss_scale_window", t.loss_scale_window);
  r.get("hysteresis", t.hysteresis);
  r.finish();
}

void parse_optimizer(MapReader r, KeyOrigins& origins, OptimizerConfig& o) {
  r.get("type", o.type);
  r.required("lr", o.lr);
  r.get("min_lr", o.min_lr);
  r.get("weight_decay", o.weight_decay);
  r.get("beta1", o.beta1);
  r.get("beta2", o.beta2);
  r.get("eps", o.eps);
  r.get("clip_grad", o.clip_grad);
  r.get("distributed", o.distributed);
  MapReader s(r.take("schedule"), "optimizer.schedule", origins);
  s.get("warmup_iters", o.schedule.warmup_iters);
  s.get("decay", o.schedule.decay);
  s.get("decay_iters", o.schedule.decay_iters);
  s.finish();
  r.finish();
}

void parse_data(MapReader r, KeyOrigins& origins, DataConfig& d) {
  MapReader tok(r.take("tokenizer"), "data.tokenizer", origins);
  tok.required("type", d.tokenizer.type);
  tok.get("vocab_file", d.tokenizer.vocab_file);
  tok.get("merge_file", d.tokenizer.merge_file);
  tok.get("model", d.tokenizer.model);
  tok.get("vocab_size", d.tokenizer.vocab_size);
  tok.finish();

  d.train.clear();
  if (const Node* v = r.take("train")) {
    if (v->kind == Node::Kind::Scalar) {
      d.train.push_back({v->scalar, 1.0});
      origins.by_key["data.train[0].path"] = v->origin.str();
    } else if (v->kind == Node::Kind::Seq) {
      for (size_t i = 0; i < v->items.size(); ++i) {
        const Node& item = v->items[i];
        std::string key = concat("data.train[", i, "]");
        DatasetEntry e;
        if (item.kind == Node::Kind::Scalar) {
          e.path = item.scalar;
          origins.by_key[key + ".path"] = item.origin.str();
        } else if (item.kind == Node::Kind::Map) {
          MapReader m(&item, key, origins);
          m.required("path", e.path);
          m.get("weight", e.weight);
          m.finish();
        } else {
          fail(item, key,
               concat("expected {path: ..., weight: ...} or a path, got ", item.describe()));
        }
        d.train.push_back(e);
      }
    } else {
      fail(*v, "data.train",
           concat("expected a list of {path, weight} or a path, got ", v->describe()));
    }
  }
  if (const Node* v = r.take("split")) {
    // Accept `split: 1` (plain number) as well as the usual "969,30,1".
    if (v->kind != Node::Kind::Scalar)
      fail(*v, "data.split", concat("expected a string like \"969,30,1\", got ", v->describe()));
    d.split = v->scalar;
  }
  r.get("cache_dir", d.cache_dir);
  r.get("masking_probability", d.masking_probability);
  r.get("short_seq_probability", d.short_seq_probability);
  r.get("bert_binary_head", d.bert_binary_head);
  r.get("mock", d.mock);
  r.finish();
}

void parse_checkpoint(MapReader r, CheckpointConfig& c) {
  r.get("save", c.save);
  r.get("load", c.load);
  r.get("save_interval", c.save_interval);
  r.get("keep_last", c.keep_last);
  r.get("finetune", c.finetune);
  r.get("strict", c.strict);
  r.finish();
}

void parse_logging(MapReader r, LoggingConfig& l) {
  r.get("interval", l.interval);
  r.get("jsonl", l.jsonl);
  r.get("tensorboard_dir", l.tensorboard_dir);
  r.get("timeline", l.timeline);
  r.finish();
}

void parse_cluster(MapReader r, ClusterConfig& c) {
  r.get("nodes", c.nodes);
  r.get("gpus_per_node", c.gpus_per_node);
  r.get("gpu_memory_gb", c.gpu_memory_gb);
  r.get("gpu_tflops", c.gpu_tflops);
  r.get("intra_node_gbps", c.intra_node_gbps);
  r.get("inter_node_gbps", c.inter_node_gbps);
  r.finish();
}

}  // namespace

Recipe parse_tree(const Node& root, const std::string& top_file) {
  Recipe r;
  r.origins.fallback = top_file;
  static const std::vector<std::string> sections = {"model", "parallel",   "training", "optimizer",
                                                    "data",  "checkpoint", "logging",  "cluster"};
  for (const auto& [key, value] : root.entries) {
    if (std::find(sections.begin(), sections.end(), key) != sections.end()) continue;
    std::string best;
    for (const auto& s : sections)
      if (edit_distance(key, s) <= 2) best = s;
    std::string list;
    for (const auto& s : sections) list += (list.empty() ? "" : ", ") + s;
    fail(value, key,
         concat("unknown section", best.empty() ? "" : concat(" (did you mean '", best, "'?)"),
                "; known sections: extends, ", list));
  }
  auto section = [&](const char* name) { return MapReader(root.find(name), name, r.origins); };
  parse_model(section("model"), r.model);
  parse_parallel(section("parallel"), r.parallel);
  parse_training(section("training"), r.training);
  parse_optimizer(section("optimizer"), r.origins, r.optimizer);
  parse_data(section("data"), r.origins, r.data);
  parse_checkpoint(section("checkpoint"), r.checkpoint);
  parse_logging(section("logging"), r.logging);
  parse_cluster(section("cluster"), r.cluster);
  return r;
}

}  // namespace megatron::config::detail
