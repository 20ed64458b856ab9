#pragma once
// Helpers of the Hugging Face conversion tests (test_hf_conversion.cpp, test_hf_families.cpp):
// the fixtures of tests/fixtures/hf, raw HF and native tensors, a per-test scratch directory
// with import / export, editable fixture copies, and a tiny model trained here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/safetensors.h"
#include "megatron/config/recipe.h"
#include "megatron/core/format.h"
#include "megatron/training/batch_source.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"
#include "tests/support/test_paths.h"

namespace megatron::hf_test {

namespace fs = std::filesystem;
namespace st = checkpoint::safetensors;

inline fs::path fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf" / name;
}

// tests/fixtures/hf_configs/<name>.json: a released checkpoint's config.json.
inline fs::path released(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf_configs" / (name + ".json");
}

// The model section a config.json describes (the converter's config reader).
inline config::ModelConfig model_of(const fs::path& config_json) {
  return models::model_from_hf_config(hf::ConfigJson::load(config_json.string()));
}

// A shipped recipe, recipes/<name>.
inline config::Recipe recipe(const std::string& name) {
  return config::load_recipe((fs::path(MEGATRON_SOURCE_DIR) / "recipes" / name).string());
}

// name -> (dtype, shape, bytes) of every tensor of an HF directory.
using RawTensors =
    std::map<std::string, std::tuple<std::string, std::vector<int64_t>, std::string>>;
inline RawTensors raw_tensors(const fs::path& dir) {
  RawTensors out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    const st::File f(e.path().string());
    for (const st::TensorInfo& t : f.tensors()) {
      std::string bytes(t.nbytes(), '\0');
      f.read_bytes(t, 0, t.nbytes(), bytes.data());
      out[t.name] = {t.dtype, t.shape, bytes};
    }
  }
  return out;
}

// Every model/ tensor of a native checkpoint (and moe/: the experts' bias), whole (vocabulary
// tables cut to `vocab` rows when given).
inline std::map<std::string, std::vector<float>> native_tensors(const fs::path& dir,
                                                                int64_t vocab = 0) {
  checkpoint::Reader reader(dir.string());
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : reader.index().tensors) {
    if (name.rfind("model/", 0) != 0 && name.rfind("moe/", 0) != 0) continue;
    std::vector<float> data(static_cast<size_t>(t.numel()));
    checkpoint::TensorPiece piece;
    piece.name = name;
    piece.global_shape = Shape(t.shape.begin(), t.shape.end());
    piece.local_shape = piece.global_shape;
    piece.dest = data.data();
    reader.read({piece});
    // Vocabulary tables: the real rows only (padding depends on the layout).
    if (vocab > 0 && t.shape.size() == 2 && t.shape[0] >= vocab &&
        (name.find("word_embeddings") != std::string::npos ||
         name.find("output_layer") != std::string::npos))
      data.resize(static_cast<size_t>(vocab * t.shape[1]));
    out[name] = std::move(data);
  }
  return out;
}

// A scratch directory per test, with import / export into it and editable fixture copies.
class HfScratch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megatron_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  models::HfImportResult import(const fs::path& hf, const std::string& out, int64_t tp = 1,
                                int64_t pp = 1, int64_t ep = 1) {
    models::HfImportOptions o;
    o.hf_dir = hf.string();
    o.out_dir = (dir_ / out).string();
    o.tp = tp, o.pp = pp, o.ep = ep;
    return models::import_hf_checkpoint(o);
  }
  void export_to(const std::string& native, const std::string& hf, uint64_t shard = 5ull << 30,
                 const std::string& dtype = "") {
    models::HfExportOptions o;
    o.native_dir = (dir_ / native).string();
    o.hf_dir = (dir_ / hf).string();
    o.max_shard_bytes = shard;
    o.dtype = dtype;
    models::export_hf_checkpoint(o);
  }
  // The config reader's error for a copy of fixture `name` whose config.json `edit` changed.
  std::string edited_config_error(const std::string& name,
                                  const std::function<void(nlohmann::json&)>& edit);
  // A copy of a fixture whose tensors and config.json can be edited.
  fs::path editable(const std::string& name) {
    const fs::path d = dir_ / concat("edit_", name, "_", ++edits_);
    fs::copy(fixture(name), d, fs::copy_options::recursive);
    return d;
  }
  fs::path dir_;
  int edits_ = 0;
};

class CountingSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 8; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= 8; ++t) tokens[t] = static_cast<int32_t>((index * 5 + t * 3) % 61);
  }
};

inline std::string trained_recipe(const std::string& model, const fs::path& save) {
  return concat("model: {", model,
                ", num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 8, "
                "vocab_size: 61, make_vocab_size_divisible_by: 16}\n"
                "training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 3, seed: 3, "
                "peak_tflops: 1.0}\n"
                "optimizer: {lr: 0.01}\n"
                "data: {tokenizer: {type: NullTokenizer, vocab_size: 61}, mock: true}\n"
                "checkpoint: {save: ",
                save.string(), "}\nlogging: {interval: 1000}\n");
}

// ---- bad input -----------------------------------------------------------------------------

// Rewrites dir/model.safetensors through `edit` (name -> (dtype, shape, bytes)).
inline void rewrite(const fs::path& dir, const std::function<void(RawTensors&)>& edit) {
  RawTensors t = raw_tensors(dir);
  edit(t);
  st::Writer w;
  for (const auto& [name, v] : t)
    w.add({name, std::get<0>(v), std::get<1>(v), std::get<2>(v).data()});
  w.write((dir / "model.safetensors").string());
}

inline void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

inline std::string config_error(const fs::path& dir) {
  try {
    models::model_from_hf_config(hf::ConfigJson::load((dir / "config.json").string()));
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted " << dir;
  return "";
}

inline std::string HfScratch::edited_config_error(
    const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path d = editable(name);
  edit_config(d, edit);
  return config_error(d);
}

}  // namespace megatron::hf_test
