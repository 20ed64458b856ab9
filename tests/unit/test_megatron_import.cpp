// Megatron-LM checkpoints read here (megatron/mlm, megatron/checkpoint/distcp.h,
// models/mlm_import.h), against the fixtures Megatron-Core saved (tests/fixtures/megatron, made
// by tools/gen_megatron_fixtures.py): both formats give the same tensors, the distributed
// checkpoint's chunks are where its metadata says, the args map to a recipe, and bad
// directories, files and args are refused naming what is wrong. (The logits against
// Megatron-Core's are tests/parallel/test_megatron_logits.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "megatron/checkpoint/distcp.h"
#include "megatron/core/error.h"
#include "megatron/mlm/mlm_checkpoint.h"
#include "megatron/mlm/mlm_tensors.h"
#include "models/mlm_import.h"
#include "tests/support/test_paths.h"
#include "tests/unit/mlm_test_util.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;
using checkpoint::PickleValue;

using mlm_test::fixture;
using mlm_test::refusal;
using mlm_test::Scratch;

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

void flip_byte(const fs::path& file, uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST(MegatronImport, BothFormatsHoldTheSameTensors) {
  for (const std::string model : {"gpt", "llama", "mixtral"}) {
    const std::string layout = model == "mixtral" ? "_tp1_pp2_ep2" : "_tp2_pp2";
    const auto dist = mlm::open_checkpoint(fixture(model + layout + "_torch_dist").string(), {});
    const auto legacy = mlm::open_checkpoint(fixture(model + layout + "_torch").string(), {});
    EXPECT_EQ(dist.format, mlm::Format::TorchDist);
    EXPECT_EQ(legacy.format, mlm::Format::Torch);
    EXPECT_EQ(dist.iteration, 10);
    EXPECT_EQ(legacy.iteration, 10);
    EXPECT_EQ(legacy.rank_files.size(), 4u);  // tp 2 x pp 2, or pp 2 x ep 2
    EXPECT_EQ(dist.tp, model == "mixtral" ? 1 : 2);
    EXPECT_EQ(dist.pp, 2);
    EXPECT_EQ(legacy.ep, model == "mixtral" ? 2 : 1);
    const mlm::MlmTensors a(dist), b(legacy);
    std::vector<std::string> names = a.names();
    if (model == "mixtral") {  // experts numbered over all expert ranks
      EXPECT_TRUE(a.has("decoder.layers.3.mlp.experts.3.linear_fc1.weight"));
      EXPECT_TRUE(b.has("decoder.layers.3.mlp.experts.3.linear_fc1.weight"));
      EXPECT_EQ(b.shape("decoder.layers.0.mlp.router.weight"), (std::vector<int64_t>{4, 32}));
    }
    // The legacy files keep the tied copy of the embedding on the last stage.
    std::vector<std::string> other = b.names();
    if (model == "gpt") std::erase(other, "output_layer.weight");
    EXPECT_EQ(names, other) << model;
    for (const std::string& n : names) {
      ASSERT_EQ(a.shape(n), b.shape(n)) << n;
      EXPECT_EQ(a.read(n, a.shape(n)), b.read(n, b.shape(n))) << model << " " << n;
    }
    if (model == "gpt") {
      EXPECT_EQ(
          b.read("output_layer.weight", b.shape("output_layer.weight")),
          a.read("embedding.word_embeddings.weight", a.shape("embedding.word_embeddings.weight")));
    }
  }
}

TEST(MegatronImport, TheNormsOfEitherLayerSpecHaveOneName) {
  EXPECT_EQ(mlm::canonical_layer_key("self_attention.linear_qkv.layer_norm_weight"),
            "input_layernorm.weight");
  EXPECT_EQ(mlm::canonical_layer_key("mlp.linear_fc1.layer_norm_bias"), "pre_mlp_layernorm.bias");
  EXPECT_EQ(mlm::canonical_layer_key("mlp.linear_fc1.weight"), "mlp.linear_fc1.weight");
  const auto ck = mlm::open_checkpoint(fixture("llama_tp2_pp2_torch_dist").string(), {});
  const mlm::MlmTensors t(ck);
  EXPECT_TRUE(t.has("decoder.layers.3.input_layernorm.weight"));
  EXPECT_TRUE(t.has("decoder.layers.3.pre_mlp_layernorm.weight"));
  EXPECT_FALSE(t.has("decoder.layers.4.input_layernorm.weight"));
  // SwiGLU's fc1: [gate; up] rows, 2 x ffn 64.
  EXPECT_EQ(t.shape("decoder.layers.0.mlp.linear_fc1.weight"), (std::vector<int64_t>{128, 32}));
}

TEST(MegatronImport, DistributedChunksAreWhereTheMetadataSays) {
  const checkpoint::DcpCheckpoint dcp(
      (fixture("llama_tp2_pp2_torch_dist") / "iter_0000010").string());
  const checkpoint::DcpTensor* qkv = dcp.find("decoder.layers.self_attention.linear_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  // 4 layers x (4 query + 2 x 2 kv heads) x head_dim 8 rows x hidden 32; a chunk per layer and
  // tensor rank.
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{4, 64, 32}));
  EXPECT_EQ(qkv->chunks.size(), 8u);
  EXPECT_EQ(qkv->dtype, DType::F32);
  EXPECT_FALSE(dcp.byte_items().empty());  // Transformer Engine's extra state, never unpickled
  // A box across two chunks (both tensor ranks' rows of layer 2) equals their pieces.
  const Tensor box = dcp.read_box(qkv->name, {2, 16, 0}, {1, 32, 32});
  const Tensor whole = dcp.read(qkv->name);
  const float* w = whole.data<float>();
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < 32; ++c)
      ASSERT_EQ(box.data<float>()[r * 32 + c], w[(2 * 64 + 16 + r) * 32 + c]);
}

TEST(MegatronImport, APlainDistributedCheckpointOfPyTorchReads) {
  // torch.distributed.checkpoint.save({"w": arange(4), "step": 3}) (tools/gen_pickle_fixtures.py)
  const checkpoint::DcpCheckpoint dcp(
      (fs::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/pickle/dcp").string());
  const Tensor w = dcp.read("w");
  ASSERT_EQ(w.numel(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.data<float>()[i], static_cast<float>(i));
  EXPECT_EQ(dcp.byte_items(), std::vector<std::string>{"step"});
}

TEST(MegatronImport, ArgsMapToARecipeAndTheRestIsNamedIgnored) {
  const auto ck = mlm::open_checkpoint(fixture("llama_tp2_pp2_torch").string(), {});
  const config::ModelConfig m = models::model_from_megatron_args(ck.args);
  EXPECT_EQ(m.arch, config::Arch::LLaMA);
  EXPECT_EQ(m.num_layers, 4);
  EXPECT_EQ(m.num_query_groups, 2);
  EXPECT_EQ(m.activation, config::Activation::SwiGLU);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_FALSE(m.add_bias);
  EXPECT_EQ(m.vocab_size, 128);  // the padded vocabulary Megatron trained
  const auto gpt = mlm::open_checkpoint(fixture("gpt_tp2_pp2_torch_dist").string(), {});
  const config::ModelConfig g = models::model_from_megatron_args(gpt.args);
  EXPECT_EQ(g.activation, config::Activation::GeLUExact);  // Megatron's F.gelu
  EXPECT_EQ(g.position_embedding, config::PositionEmbedding::Learned);
  EXPECT_TRUE(g.tie_embeddings);
  const std::string report = models::megatron_args_report(ck.args);
  expect_has(report, "\nhidden_size: mapped to model.hidden_size\n");
  expect_has(report, "\nlr_decay_style: mapped to optimizer.schedule.decay\n");
  expect_has(report, "\nuse_distributed_optimizer: ignored\n");
  EXPECT_GT(ck.args.keys().size(), 500u);  // Megatron-LM's whole parser
  Scratch out;
  models::MegatronImportOptions o;
  o.megatron_dir = fixture("llama_tp2_pp2_torch").string();
  o.out_dir = (out.path() / "ck").string();
  const auto r = models::import_megatron_checkpoint(o);
  const config::Recipe recipe = config::load_recipe(r.recipe_path);
  EXPECT_EQ(recipe.training.global_batch_size, 8);
  EXPECT_EQ(recipe.training.train_iters, 100);
  EXPECT_DOUBLE_EQ(recipe.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(recipe.optimizer.min_lr, 3e-5);
  EXPECT_EQ(recipe.optimizer.schedule.decay, config::LrDecay::Cosine);
  EXPECT_TRUE(fs::exists(out.path() / "ck" / "iter_0000010"));
  // Nothing already there is overwritten.
  expect_has(refusal([&] { models::import_megatron_checkpoint(o); }), "is not empty");
}

TEST(MegatronImport, BadDirectoriesAreRefusedNamingWhatIsWrong) {
  Scratch empty;
  expect_has(refusal([&] { mlm::open_checkpoint(empty.path().string(), {}); }),
             "has no latest_checkpointed_iteration.txt");
  expect_has(refusal([&] { mlm::open_checkpoint((empty.path() / "nope").string(), {}); }),
             "is not a directory");
  Scratch legacy("llama_tp2_pp2_torch");
  expect_has(refusal([&] { mlm::open_checkpoint(legacy.path().string(), 20); }),
             "has no iter_0000020 directory");
  {
    std::ofstream(legacy.path() / "latest_checkpointed_iteration.txt") << "ten";
    expect_has(refusal([&] { mlm::open_checkpoint(legacy.path().string(), {}); }),
               "holds 'ten', not an iteration number");
  }
  fs::remove_all(legacy.path() / "iter_0000010" / "mp_rank_01_001");
  expect_has(refusal([&] { mlm::open_checkpoint(legacy.path().string(), 10); }),
             "no file of tensor rank 1, pipeline rank 1");
  Scratch dist("llama_tp2_pp2_torch_dist");
  const fs::path iter = dist.path() / "iter_0000010";
  std::ofstream(iter / "metadata.json") << R"({"sharded_backend": "zarr"})";
  expect_has(refusal([&] { mlm::open_checkpoint(dist.path().string(), {}); }),
             "not a torch_dist checkpoint");
  fs::remove(iter / "metadata.json");
  fs::remove(iter / "common.pt");
  expect_has(refusal([&] { mlm::open_checkpoint(dist.path().string(), {}); }), "no common.pt");
}

TEST(MegatronImport, DamagedFilesAreRefused) {
  Scratch dist("llama_tp2_pp2_torch_dist");
  const fs::path iter = dist.path() / "iter_0000010";
  // A byte of a tensor's storage inside a .distcp archive: its CRC-32 fails.
  const checkpoint::DcpCheckpoint dcp(iter.string());
  const checkpoint::DcpChunk& c = dcp.find("embedding.word_embeddings.weight")->chunks[0];
  flip_byte(iter / c.file, c.offset + c.length / 2);
  const auto ck = mlm::open_checkpoint(dist.path().string(), {});
  const mlm::MlmTensors t(ck);
  const std::string e = refusal([&] {
    t.read("embedding.word_embeddings.weight", t.shape("embedding.word_embeddings.weight"));
  });
  expect_has(e, c.file);
  expect_has(e, "CRC-32");
  // A truncated .metadata.
  fs::resize_file(iter / ".metadata", fs::file_size(iter / ".metadata") / 2);
  expect_has(refusal([&] { checkpoint::DcpCheckpoint d(iter.string()); }), ".metadata");
}

TEST(MegatronImport, ARankFileThatRunsCodeIsRefused) {
  Scratch legacy("llama_tp2_pp2_torch");
  const fs::path victim = legacy.path() / "iter_0000010" / "mp_rank_00_000" / "model_optim_rng.pt";
  fs::copy_file(fs::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/pickle/malicious.pt", victim,
                fs::copy_options::overwrite_existing);
  fs::remove("/tmp/megatron_pickle_pwned");
  expect_has(refusal([&] { mlm::open_checkpoint(legacy.path().string(), {}); }),
             "refers to posix.system, which a checkpoint has no use for: refused");
  EXPECT_FALSE(fs::exists("/tmp/megatron_pickle_pwned"));
}

// The saved args with one setting changed, as a checkpoint of such a model would have them.
mlm::MlmArgs args_with(const mlm::MlmCheckpoint& ck, const std::string& key,
                       checkpoint::PickleRef value) {
  auto ns = std::make_shared<PickleValue>(*ck.args.namespace_value());
  auto state = std::make_shared<PickleValue>(*ns->state);
  for (auto& [k, v] : state->dict)
    if (k->text == key) v = value;
  ns->state = state;
  return mlm::MlmArgs(ns, "args.pt");
}

checkpoint::PickleRef integer(int64_t v) {
  auto p = std::make_shared<PickleValue>();
  p->kind = PickleValue::Kind::Int;
  p->integer = v;
  return p;
}

TEST(MegatronImport, ModelsNotImportedYetAreRefusedNamingTheArg) {
  const auto ck = mlm::open_checkpoint(fixture("llama_tp2_pp2_torch").string(), {});
  auto with = [&](const std::string& key, checkpoint::PickleRef value) {
    return args_with(ck, key, std::move(value));
  };
  auto text = [](const std::string& v) {
    auto p = std::make_shared<PickleValue>();
    p->kind = PickleValue::Kind::String;
    p->text = v;
    return p;
  };
  expect_has(
      refusal([&] {
        models::model_from_megatron_args(with("moe_shared_expert_intermediate_size", integer(64)));
      }),
      "args.pt: args.moe_shared_expert_intermediate_size = 64: shared experts are not "
      "imported yet");
  expect_has(refusal([&] {
               models::model_from_megatron_args(with("multi_latent_attention", integer(1)));
             }),
             "multi-latent attention checkpoints are not imported yet");
  expect_has(refusal([&] {
               models::model_from_megatron_args(with("position_embedding_type", text("mrope")));
             }),
             "args.position_embedding_type");
  expect_has(refusal([&] { models::model_from_megatron_args(with("normalization", text("Foo"))); }),
             "LayerNorm and RMSNorm are imported");
  expect_has(refusal([&] { models::model_from_megatron_args(with("hidden_size", text("32"))); }),
             "args.hidden_size = '32': an integer expected");
  expect_has(
      refusal([&] { models::model_from_megatron_args(with("softmax_type", text("learnable"))); }),
      "args.softmax_type = 'learnable': attention sinks (off-by-one, learnable) are not "
      "imported yet");
}

// A per-layer moe_layer_freq (Megatron-LM evaluates "([0]*1+[1]*3)" into a list before saving
// its args): one 0/1 a layer; elements that are not integers are refused naming the arg.
TEST(MegatronImport, PerLayerMoeFrequencyIsAPattern) {
  const auto ck = mlm::open_checkpoint(fixture("mixtral_tp1_pp2_ep2_torch").string(), {});
  auto with_list = [&](std::vector<checkpoint::PickleRef> items) {
    auto list = std::make_shared<PickleValue>();
    list->kind = PickleValue::Kind::List;
    list->items = std::move(items);
    return args_with(ck, "moe_layer_freq", list);
  };
  const int64_t L = ck.args.integer("num_layers");
  std::vector<checkpoint::PickleRef> pattern;
  for (int64_t l = 0; l < L; ++l) pattern.push_back(integer(l == 0 ? 0 : 1));
  const config::ModelConfig m = models::model_from_megatron_args(with_list(pattern));
  std::vector<int64_t> want(static_cast<size_t>(L), 1);
  want[0] = 0;
  EXPECT_EQ(m.moe.moe_layer_freq.pattern, want);
  EXPECT_FALSE(m.moe.moe_layer_freq.is_moe(0));
  EXPECT_TRUE(m.moe.moe_layer_freq.is_moe(L - 1));
  pattern.back() = std::make_shared<PickleValue>();  // None
  expect_has(refusal([&] { models::model_from_megatron_args(with_list(pattern)); }),
             "args.moe_layer_freq");
}

}  // namespace
