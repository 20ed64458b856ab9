// Recipe loading: extends chains, cycles, malformed files, --set overrides, value forms,
// YAML/JSON round trips, the shipped recipes and resolve_path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "megatron/config/recipe.h"
#include "tests/config/recipe_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::config {
namespace {

using testing::fixture;
using ::testing::HasSubstr;
using testing::input_error;
using ::testing::Not;
using testing::ScratchDir;
using testing::source_path;

const char* kMinimal = R"(
model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32}
training: {micro_batch_size: 2, global_batch_size: 8, train_iters: 10}
optimizer: {lr: 1.0e-3}
data: {tokenizer: {type: ByteTokenizer}, train: data/x}
)";

Recipe minimal(const std::vector<std::string>& overrides = {}) {
  return parse_recipe_string(kMinimal, "minimal.yaml", overrides);
}

// ---- extends ----------------------------------------------------------------------------

TEST(RecipeExtends, ThreeLevelChainMergesDeeply) {
  Recipe r = load_recipe(fixture("extends/mid/leaf/leaf.yaml"));
  EXPECT_EQ(r.model.num_layers, 8);                                  // mid
  EXPECT_EQ(r.model.hidden_size, 128);                               // leaf
  EXPECT_EQ(r.model.num_attention_heads, 4);                         // base
  EXPECT_EQ(config::option_name(r.model.normalization), "rmsnorm");  // mid over base
  EXPECT_EQ(r.optimizer.schedule.warmup_iters, 3);                   // mid, nested
  EXPECT_EQ(config::option_name(r.optimizer.schedule.decay),
            "linear");                             // base, sibling of the overridden key
  EXPECT_EQ(r.optimizer.schedule.decay_iters, 8);  // leaf
  EXPECT_DOUBLE_EQ(r.optimizer.min_lr, 1e-4);      // base
  ASSERT_EQ(r.data.train.size(), 2u);              // lists are replaced, not merged
  EXPECT_EQ(r.data.train[0], (DatasetEntry{"data/leaf_a", 2.0}));
  EXPECT_EQ(r.data.train[1], (DatasetEntry{"data/leaf_b", 1.0}));
  EXPECT_EQ(r.logging.jsonl, "");  // null in the leaf resets the base's value
  EXPECT_EQ(r.logging.interval, 5);
  EXPECT_EQ(r.source_path, fixture("extends/mid/leaf/leaf.yaml"));
}

TEST(RecipeExtends, OriginsNameTheFileThatSetTheKey) {
  Recipe r = load_recipe(fixture("extends/mid/leaf/leaf.yaml"));
  EXPECT_THAT(r.origins.of("model.hidden_size"), HasSubstr("leaf.yaml:4"));
  EXPECT_THAT(r.origins.of("model.num_layers"), HasSubstr("mid.yaml:4"));
  EXPECT_THAT(r.origins.of("model.num_attention_heads"), HasSubstr("extends/base.yaml:5"));
  EXPECT_EQ(r.origins.of("model.rope_theta"), fixture("extends/mid/leaf/leaf.yaml"));  // default
}

TEST(RecipeExtends, ErrorInABaseNamesTheBaseFileAndLine) {
  ScratchDir dir;
  dir.write("base.yaml", std::string(kMinimal) + "parallel: {order: tp-dp}\n");
  std::string child =
      dir.write("sub/child.yaml", "extends: ../base.yaml\nmodel: {num_layers: 8}\n");
  std::string msg = input_error([&] { load_recipe(child); });
  EXPECT_THAT(msg, HasSubstr("base.yaml:6"));
  EXPECT_THAT(msg, HasSubstr("parallel.order"));
  EXPECT_THAT(msg, HasSubstr("tp-dp"));
}

TEST(RecipeExtends, ListOfBasesMergesInOrder) {
  ScratchDir dir;
  dir.write("a.yaml", kMinimal);
  dir.write("b.yaml", "model: {num_layers: 2}\ntraining: {train_iters: 7}\n");
  std::string c = dir.write("c.yaml", "extends: [a.yaml, b.yaml]\ntraining: {train_iters: 9}\n");
  Recipe r = load_recipe(c);
  EXPECT_EQ(r.model.num_layers, 2);
  EXPECT_EQ(r.training.train_iters, 9);
}

TEST(RecipeExtends, CycleIsReportedWithTheChain) {
  std::string msg = input_error([] { load_recipe(fixture("cycle/a.yaml")); });
  EXPECT_THAT(msg, HasSubstr("cycle"));
  EXPECT_THAT(msg, HasSubstr("cycle/a.yaml -> "));
  EXPECT_THAT(msg, HasSubstr("cycle/b.yaml -> "));
  EXPECT_THAT(msg, HasSubstr("cycle/c.yaml -> "));
  EXPECT_THAT(msg, HasSubstr("c.yaml:1: extends"));  // the line that closes the cycle
}

TEST(RecipeExtends, SelfExtendIsACycle) {
  ScratchDir dir;
  std::string p = dir.write("self.yaml", "extends: self.yaml\n");
  EXPECT_THAT(input_error([&] { load_recipe(p); }), HasSubstr("cycle"));
}

TEST(RecipeExtends, DiamondIsNotACycle) {
  ScratchDir dir;
  dir.write("root.yaml", kMinimal);
  dir.write("l.yaml", "extends: root.yaml\nmodel: {num_layers: 2}\n");
  dir.write("r.yaml", "extends: root.yaml\ntraining: {train_iters: 3}\n");
  Recipe r = load_recipe(dir.write("top.yaml", "extends: [l.yaml, r.yaml]\n"));
  EXPECT_EQ(r.model.num_layers, 4);  // r.yaml (with root's value) is merged after l.yaml
  EXPECT_EQ(r.training.train_iters, 3);
}

TEST(RecipeExtends, MissingBaseNamesBothFiles) {
  std::string msg = input_error([] { load_recipe(fixture("missing_base.yaml")); });
  EXPECT_THAT(msg, HasSubstr("missing_base.yaml:1: extends"));
  EXPECT_THAT(msg, HasSubstr("does_not_exist.yaml"));
}

TEST(RecipeExtends, BadExtendsValue) {
  std::string msg = input_error([] { parse_recipe_string("extends: {a: 1}\n", "x.yaml"); });
  EXPECT_THAT(msg, HasSubstr("x.yaml:1: extends"));
  EXPECT_THAT(msg, HasSubstr("a map"));
}

TEST(RecipeExtends, StringRecipeExtendsRelativeToCwd) {
  std::string text = "extends: " + fixture("valid_base.yaml") + "\ntraining: {train_iters: 4}\n";
  Recipe r = parse_recipe_string(text, "inline.yaml");
  EXPECT_EQ(r.training.train_iters, 4);
  EXPECT_EQ(r.model.hidden_size, 64);
}

// ---- file and YAML errors -----------------------------------------------------------------

TEST(RecipeFile, MissingFile) {
  std::string msg = input_error([] { load_recipe("/nonexistent/dir/recipe.yaml"); });
  EXPECT_THAT(msg, HasSubstr("/nonexistent/dir/recipe.yaml"));
  EXPECT_THAT(msg, HasSubstr("No such file"));
}

TEST(RecipeFile, MalformedYamlNamesFileAndLine) {
  std::string msg = input_error([] { load_recipe(fixture("malformed.yaml")); });
  EXPECT_THAT(msg, HasSubstr("malformed.yaml:"));
  EXPECT_THAT(msg, HasSubstr("malformed YAML"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("malformed\\.yaml:[34]:"));
}

TEST(RecipeFile, MalformedIndentation) {
  std::string msg = input_error(
      [] { parse_recipe_string("model:\n  num_layers: 4\n   hidden_size: 3\n", "indent.yaml"); });
  EXPECT_THAT(msg, HasSubstr("indent.yaml:3"));
}

TEST(RecipeFile, TopLevelMustBeAMap) {
  EXPECT_THAT(input_error([] { parse_recipe_string("- a\n- b\n", "list.yaml"); }),
              HasSubstr("list.yaml: the top level must be a map"));
}

TEST(RecipeFile, OneDocumentOnly) {
  EXPECT_THAT(
      input_error([] { parse_recipe_string(std::string(kMinimal) + "---\na: 1\n", "two.yaml"); }),
      HasSubstr("two.yaml: expected one YAML document"));
}

// Found by fuzz_recipe: yaml-cpp's LoadAll never returned on this text (it kept producing
// documents until memory ran out); the recipe is refused at once.
TEST(RecipeFile, TextTheYamlParserCannotEndIsRefusedPromptly) {
  const std::string text =
      "# gpt_viny: the defaqlt CPU recip  pretrain --recipe recipes/gpt_tiny.yamlion: gelu\n"
      "  position_embedding: learned\n"
      "  tie_nd-to-end test and quick startngs: true\n"
      ",  hidden _";
  EXPECT_THAT(input_error([&] { parse_recipe_string(text, "fuzzed.yaml"); }),
              HasSubstr("fuzzed.yaml: expected one YAML document"));
}

TEST(RecipeFile, DuplicateKey) {
  std::string msg = input_error([] {
    parse_recipe_string(std::string(kMinimal) + "logging:\n  interval: 1\n  interval: 2\n",
                        "dup.yaml");
  });
  EXPECT_THAT(msg, HasSubstr("dup.yaml:8: logging.interval: duplicate key"));
}

TEST(RecipeFile, EmptyFileReportsFirstMissingKey) {
  std::string msg = input_error([] { parse_recipe_string("", "empty.yaml"); });
  EXPECT_THAT(msg, HasSubstr("empty.yaml: model.num_layers: required key is missing"));
}

TEST(RecipeFile, DirectoryIsNotARecipe) {
  ScratchDir dir;
  EXPECT_THAT(input_error([&] { load_recipe(dir.path().string()); }),
              HasSubstr("it is a directory"));
}

TEST(RecipeFile, AliasesWorkButRecursiveOnesAreErrors) {
  Recipe r = parse_recipe_string(
      std::string(kMinimal) + "checkpoint: {save: &dir ck, load: *dir}\n", "alias.yaml");
  EXPECT_EQ(r.checkpoint.load, "ck");
  std::string msg = input_error([] { parse_recipe_string("model: &m {x: *m}\n", "loop.yaml"); });
  EXPECT_THAT(msg, HasSubstr("loop.yaml:1: model.x.x.x"));
  EXPECT_THAT(msg, HasSubstr("recursive alias"));
}

// ---- overrides ------------------------------------------------------------------------------

TEST(RecipeOverrides, ScalarsOfEveryType) {
  Recipe r = minimal({"training.train_iters=50", "optimizer.lr=3e-4", "model.tie_embeddings=false",
                      "model.normalization=rmsnorm", "training.seed=7",
                      "training.exit_duration_minutes=1.5"});
  EXPECT_EQ(r.training.train_iters, 50);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 3e-4);
  EXPECT_FALSE(r.model.tie_embeddings);
  EXPECT_EQ(config::option_name(r.model.normalization), "rmsnorm");
  EXPECT_EQ(r.training.seed, 7u);
  EXPECT_EQ(r.training.exit_duration_minutes, 1.5);
  EXPECT_THAT(r.origins.of("training.train_iters"),
              HasSubstr("minimal.yaml (--set training.train_iters=50)"));
}

TEST(RecipeOverrides, NestedListMapAndIndex) {
  Recipe r = minimal(
      {"optimizer.schedule.decay=linear", "parallel.pipeline=2", "parallel.pipeline_layers=[1,3]",
       "data.train=[{path: a, weight: 1}, {path: b, weight: 3}]", "data.train.1.weight=5",
       "data.tokenizer={type: NullTokenizer, vocab_size: 100}"});
  EXPECT_EQ(config::option_name(r.optimizer.schedule.decay), "linear");
  EXPECT_EQ(r.parallel.pipeline_layers, (std::vector<int64_t>{1, 3}));
  ASSERT_EQ(r.data.train.size(), 2u);
  EXPECT_EQ(r.data.train[1], (DatasetEntry{"b", 5.0}));
  EXPECT_EQ(r.data.tokenizer.type, config::TokenizerType::Null);
  EXPECT_EQ(r.data.tokenizer.vocab_size, 100);
}

TEST(RecipeOverrides, CreatesSectionsAndNullResets) {
  Recipe r = minimal({"checkpoint.save=ckpt dir", "checkpoint.save_interval=5",
                      "checkpoint.save_interval=null", "parallel.virtual_pipeline=~",
                      "model.seq_length=16", "model.seq_length=24"});
  EXPECT_EQ(r.checkpoint.save, "ckpt dir");
  EXPECT_FALSE(r.checkpoint.save_interval.has_value());  // later override wins
  EXPECT_FALSE(r.parallel.virtual_pipeline.has_value());
  EXPECT_EQ(r.model.seq_length, 24);
}

// A required key emptied by --set is reported against the override, not the file's section line
// (it read "minimal.yaml:2: model.num_layers: required key is missing").
TEST(RecipeOverrides, ARequiredKeyEmptiedByAnOverrideNamesIt) {
  EXPECT_THAT(input_error([] { minimal({"model.num_layers="}); }),
              HasSubstr("minimal.yaml (--set model.num_layers=): model.num_layers: required key is "
                        "missing"));
}

TEST(RecipeOverrides, AppliedAfterExtends) {
  Recipe r = load_recipe(fixture("extends/mid/leaf/leaf.yaml"),
                         {"model.num_layers=2", "data.split=1,1,0"});
  EXPECT_EQ(r.model.num_layers, 2);
  EXPECT_EQ(r.data.split, "1,1,0");
  EXPECT_EQ(r.model.hidden_size, 128);
}

TEST(RecipeOverrides, SyntaxErrorsNameTheOverride) {
  EXPECT_THAT(input_error([] { minimal({"model.num_layers"}); }),
              HasSubstr("--set model.num_layers: expected section.key=value"));
  EXPECT_THAT(input_error([] { minimal({"=3"}); }), HasSubstr("--set =3: expected"));
  EXPECT_THAT(input_error([] { minimal({"model..num_layers=3"}); }),
              HasSubstr("--set model..num_layers=3: malformed key"));
  EXPECT_THAT(input_error([] { minimal({"model=3"}); }),
              HasSubstr("--set model=3: 'model' is a whole section"));
  EXPECT_THAT(input_error([] { minimal({"extends=x.yaml"}); }),
              HasSubstr("--set extends=x.yaml: extends cannot"));
  EXPECT_THAT(input_error([] { minimal({"model.num_layers.x=1"}); }),
              HasSubstr("--set model.num_layers.x=1: model.num_layers is a value"));
  EXPECT_THAT(input_error([] { minimal({"model.num_layers=[1,"}); }),
              HasSubstr("--set model.num_layers=[1,: cannot parse the value '[1,'"));
  EXPECT_THAT(input_error([] {
                minimal({"data.train=[a]", "data.train.3.weight=1"});
              }),
              HasSubstr("--set data.train.3.weight=1: data.train is a list of 1 items"));
}

TEST(RecipeOverrides, UnknownKeyNamesTheOverride) {
  std::string msg = input_error([] { minimal({"model.num_layer=3"}); });
  EXPECT_THAT(msg,
              HasSubstr("minimal.yaml (--set model.num_layer=3): model.num_layer: unknown key"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'num_layers'"));
  msg = input_error([] { minimal({"modle.num_layers=3"}); });
  EXPECT_THAT(
      msg, HasSubstr("(--set modle.num_layers=3): modle: unknown section (did you mean 'model'?)"));
}

TEST(RecipeOverrides, BadValueNamesOverrideKeyAndValue) {
  std::string msg = input_error([] { minimal({"model.num_layers=abc"}); });
  EXPECT_THAT(msg, HasSubstr("--set model.num_layers=abc"));
  EXPECT_THAT(msg, HasSubstr("model.num_layers: expected an integer, got 'abc'"));
  msg = input_error([] { minimal({"optimizer.lr=-1"}); });
  EXPECT_THAT(
      msg, HasSubstr("minimal.yaml (--set optimizer.lr=-1): optimizer.lr: must be > 0 (got -1)"));
}

// ---- value forms -------------------------------------------------------------------------------

TEST(RecipeValues, DataTrainForms) {
  EXPECT_EQ(minimal().data.train, (std::vector<DatasetEntry>{{"data/x", 1.0}}));
  Recipe r = minimal({"data.train=[a, b]"});
  EXPECT_EQ(r.data.train, (std::vector<DatasetEntry>{{"a", 1.0}, {"b", 1.0}}));
  r = minimal({"data.train=[{path: a, weight: 0.25}, {path: b}]"});
  EXPECT_EQ(r.data.train, (std::vector<DatasetEntry>{{"a", 0.25}, {"b", 1.0}}));
}

TEST(RecipeValues, NullsAndAuto) {
  Recipe r = parse_recipe_string(R"(
model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, num_query_groups: ~}
training:
  micro_batch_size: 2
  global_batch_size: 8
  train_iters: 10
  exit_duration_minutes:
optimizer: {lr: 1.0e-3, schedule: null}
data: {tokenizer: {type: ByteTokenizer}, train: data/x, cache_dir: null}
parallel: {data: auto, virtual_pipeline: null, pipeline_layers: ~}
checkpoint: {save: null, save_interval: null}
logging:
)",
                                 "nulls.yaml");
  EXPECT_EQ(r.model.num_query_groups, 0);
  EXPECT_FALSE(r.training.exit_duration_minutes);
  EXPECT_EQ(r.parallel.data, 0);
  EXPECT_FALSE(r.parallel.virtual_pipeline);
  EXPECT_TRUE(r.parallel.pipeline_layers.empty());
  EXPECT_EQ(r.checkpoint.save, "");
  EXPECT_EQ(r.logging, LoggingConfig{});
  EXPECT_EQ(r.optimizer.schedule, ScheduleConfig{});
  EXPECT_EQ(minimal({"parallel.data=4"}).parallel.data, 4);
}

// model.attention_backend: auto (default) is flash on cuda and unfused on cpu.
TEST(RecipeValues, AttentionBackend) {
  const Recipe r = minimal({});
  EXPECT_EQ(config::option_name(r.model.attention_backend), "auto");
  EXPECT_TRUE(r.model.flash_attention(config::TrainingDevice::CUDA));
  EXPECT_FALSE(r.model.flash_attention(config::TrainingDevice::CPU));
  const Recipe flash = minimal({"model.attention_backend=flash"});
  EXPECT_TRUE(flash.model.flash_attention(config::TrainingDevice::CPU));
  const Recipe unfused = minimal({"model.attention_backend=unfused"});
  EXPECT_FALSE(unfused.model.flash_attention(config::TrainingDevice::CUDA));
}

TEST(RecipeValues, NumberForms) {
  Recipe r = minimal({"optimizer.lr=6e-4", "optimizer.min_lr=.5e-4", "optimizer.eps=+1.0E-8",
                      "optimizer.clip_grad=2", "training.seed=18446744073709551615"});
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 6e-4);
  EXPECT_DOUBLE_EQ(r.optimizer.min_lr, 0.5e-4);
  EXPECT_DOUBLE_EQ(r.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(r.optimizer.clip_grad, 2.0);
  EXPECT_EQ(r.training.seed, 18446744073709551615ull);
  EXPECT_THAT(input_error([] { minimal({"optimizer.lr=.inf"}); }),
              HasSubstr("'.inf' (not a number)"));
  EXPECT_THAT(input_error([] { minimal({"optimizer.lr=nan"}); }), HasSubstr("optimizer.lr"));
  EXPECT_THAT(input_error([] { minimal({"model.tie_embeddings=yes"}); }),
              HasSubstr("model.tie_embeddings: expected true or false, got 'yes'"));
}

// ---- round trips --------------------------------------------------------------------------------

Recipe everything_set() {
  return minimal({"model.arch=llama",
                  "model.num_layers=8",
                  "model.num_query_groups=2",
                  "model.kv_channels=24",
                  "model.ffn_hidden_size=172",
                  "model.max_position_embeddings=64",
                  "model.normalization=rmsnorm",
                  "model.activation=swiglu",
                  "model.position_embedding=yarn",
                  "model.yarn_rotary_scaling_factor=4.5",
                  "model.yarn_original_max_position_embeddings=32",
                  "model.yarn_beta_fast=16",
                  "model.yarn_beta_slow=2",
                  "model.yarn_mscale=0.5",
                  "model.yarn_mscale_all_dim=0.25",
                  "model.yarn_correction_range_round_to_int=false",
                  "model.window_size=[7,0]",
                  "model.attention_backend=flash",
                  "model.rope_theta=500000.5",
                  "model.tie_embeddings=false",
                  "model.add_bias=false",
                  "model.hidden_dropout=0.1",
                  "model.attention_dropout=0.05",
                  "model.layernorm_epsilon=1e-6",
                  "model.init_method_std=0.006",
                  "model.vocab_size=50304",
                  "model.num_experts=4",
                  "model.moe_router_topk=1",
                  "parallel.tensor=2",
                  "parallel.pipeline=2",
                  "parallel.virtual_pipeline=2",
                  "parallel.pipeline_layers=[1,2,3,2]",
                  "parallel.sequence_parallel=true",
                  "parallel.order=tp-ep-cp-dp-pp",
                  "parallel.data=4",
                  "parallel.expert=2",
                  "training.device=cuda",
                  "training.precision=bf16",
                  "training.eval_interval=3",
                  "training.eval_iters=2",
                  "training.seed=99",
                  "training.recompute=selective",
                  "training.exit_duration_minutes=230.5",
                  "training.threads=2",
                  "training.peak_tflops=989.5",
                  "training.initial_loss_scale=65536",
                  "training.min_loss_scale=2",
                  "training.loss_scale_window=50",
                  "training.hysteresis=3",
                  "optimizer.type=sgd",
                  "optimizer.lr=0.1",
                  "optimizer.min_lr=0.001",
                  "optimizer.distributed=true",
                  "optimizer.schedule={warmup_iters: 1, decay: constant, decay_iters: 9}",
                  "data.tokenizer={type: GPT2BPETokenizer, vocab_file: 'v o.json', merge_file: "
                  "'m: \"x\"#.txt', vocab_size: 50257}",
                  "data.train=[{path: /abs/a, weight: 0.3}, {path: 'null', weight: 0.7}]",
                  "data.split=98,1,1",
                  "data.cache_dir=-cache",
                  "checkpoint.save=ck",
                  "checkpoint.load=true",
                  "checkpoint.save_interval=4",
                  "checkpoint.keep_last=0",
                  "checkpoint.finetune=true",
                  "checkpoint.strict=false",
                  "logging.interval=1",
                  "logging.jsonl=log.jsonl",
                  "logging.tensorboard_dir=tb"});
}

TEST(RecipeRoundTrip, YamlReparsesToAnEqualRecipe) {
  for (const Recipe& r :
       {minimal(), everything_set(), load_recipe(fixture("extends/mid/leaf/leaf.yaml")),
        load_recipe(source_path("recipes/gpt_tiny.yaml")),
        load_recipe(source_path("recipes/gpt2_124m.yaml"))}) {
    std::string yaml = r.to_yaml();
    Recipe back = parse_recipe_string(yaml, "dump.yaml");
    EXPECT_TRUE(back == r) << yaml;
    auto body = [](const std::string& y) { return y.substr(y.find('\n') + 1); };
    EXPECT_EQ(body(back.to_yaml()), body(yaml));
    EXPECT_EQ(back.to_json(), r.to_json());
  }
  Recipe e = everything_set();
  EXPECT_EQ(e.data.train[1].path, "null");
  EXPECT_EQ(e.data.tokenizer.merge_file, "m: \"x\"#.txt");
  EXPECT_EQ(e.checkpoint.load, "true");
}

TEST(RecipeRoundTrip, YamlShowsResolvedDefaults) {
  std::string yaml = minimal().to_yaml();
  EXPECT_THAT(yaml, HasSubstr("num_query_groups: 0  # auto: 4"));
  EXPECT_THAT(yaml, HasSubstr("ffn_hidden_size: 0  # auto: 256"));
  EXPECT_THAT(yaml, HasSubstr("data: auto"));
  EXPECT_THAT(yaml, HasSubstr("virtual_pipeline: null"));
  EXPECT_THAT(yaml, HasSubstr("layernorm_epsilon: 1e-05"));
  EXPECT_THAT(yaml, HasSubstr("split: \"969,30,1\""));
  EXPECT_THAT(yaml, HasSubstr("# Resolved recipe; source: minimal.yaml"));
}

TEST(RecipeRoundTrip, JsonReparsesToAnEqualRecipe) {
  for (const Recipe& r :
       {minimal(), everything_set(), load_recipe(source_path("recipes/gpt2_124m.yaml"))}) {
    nlohmann::json j = r.to_json();
    EXPECT_TRUE(parse_recipe_string(j.dump(2), "dump.json") == r) << j.dump(2);
  }
  nlohmann::json j = minimal().to_json();
  EXPECT_EQ(j["model"]["num_layers"], 4);
  EXPECT_EQ(j["parallel"]["data"], "auto");
  EXPECT_TRUE(j["checkpoint"]["save"].is_null());
  EXPECT_EQ(j["data"]["train"][0]["path"], "data/x");
  EXPECT_EQ(j["optimizer"]["schedule"]["decay"], "cosine");
}

// ---- shipped recipes
// ------------------------------------------------------------------------------

TEST(ShippedRecipes, GptTiny) {
  Recipe r = load_recipe(source_path("recipes/gpt_tiny.yaml"));
  EXPECT_EQ(r.model.num_layers, 4);
  EXPECT_EQ(r.model.hidden_size, 256);
  EXPECT_EQ(r.model.num_attention_heads, 4);
  EXPECT_EQ(r.model.seq_length, 128);
  EXPECT_EQ(r.model.ffn(), 1024);
  EXPECT_EQ(r.model.vocab_size, 0);
  EXPECT_TRUE(r.model.tie_embeddings);
  EXPECT_EQ(config::option_name(r.training.device), "cpu");
  EXPECT_EQ(r.training.micro_batch_size, 8);
  EXPECT_EQ(r.training.global_batch_size, 16);
  EXPECT_EQ(r.training.train_iters, 300);
  EXPECT_EQ(r.training.eval_interval, 50);
  EXPECT_EQ(r.training.eval_iters, 5);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(r.optimizer.min_lr, 1e-4);
  EXPECT_DOUBLE_EQ(r.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(r.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(r.optimizer.clip_grad, 1.0);
  EXPECT_EQ(r.optimizer.schedule.warmup_iters, 30);
  EXPECT_EQ(config::option_name(r.optimizer.schedule.decay), "cosine");
  EXPECT_EQ(r.data.tokenizer.type, config::TokenizerType::SentencePiece);
  EXPECT_EQ(r.data.tokenizer.model, "tokenizers/corpus_spm_8k.model");
  EXPECT_EQ(r.data.train, (std::vector<DatasetEntry>{{"data/cache/corpus_text_document", 1.0}}));
  EXPECT_EQ(r.data.split, "949,50,1");
  EXPECT_EQ(r.checkpoint.save, "");
  EXPECT_EQ(r.logging.interval, 10);
  EXPECT_EQ(r.logging.jsonl, "runs/gpt_tiny/log.jsonl");
  EXPECT_EQ(r.root_dir, std::filesystem::path(MEGATRON_SOURCE_DIR).lexically_normal().string());
  EXPECT_EQ(r.num_microbatches(1), 2);
  r.validate_for_world(2);  // dp 2 under mpirun -n 2
  EXPECT_EQ(r.model.padded_vocab_size(8000), 8064);
}

TEST(ShippedRecipes, Gpt2Small) {
  Recipe r = load_recipe(source_path("recipes/gpt2_124m.yaml"));
  EXPECT_EQ(r.model.num_layers, 12);
  EXPECT_EQ(r.model.hidden_size, 768);
  EXPECT_EQ(r.model.num_attention_heads, 12);
  EXPECT_EQ(r.model.seq_length, 1024);
  EXPECT_EQ(r.model.head_dim(), 64);
  EXPECT_EQ(r.model.padded_vocab_size(50257), 50304);
  EXPECT_EQ(r.data.tokenizer.type, config::TokenizerType::GPT2BPE);
  EXPECT_EQ(r.data.tokenizer.vocab_file, "tokenizers/gpt2/vocab.json");
  EXPECT_EQ(r.data.tokenizer.merge_file, "tokenizers/gpt2/merges.txt");
  EXPECT_EQ(config::option_name(r.training.device), "cuda");
  EXPECT_EQ(config::option_name(r.training.precision), "bf16");
  EXPECT_EQ(r.training.micro_batch_size, 8);
  EXPECT_EQ(r.training.global_batch_size, 512);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 6e-4);
  EXPECT_DOUBLE_EQ(r.optimizer.min_lr, 6e-5);
  EXPECT_EQ(r.data_parallel_size(8), 8);
  EXPECT_EQ(r.num_microbatches(8), 8);
  EXPECT_EQ(r.num_microbatches(1), 64);
}

// ---- resolve_path
// ----------------------------------------------------------------------------------

class CwdGuard {
 public:
  explicit CwdGuard(const std::filesystem::path& p) : old_(std::filesystem::current_path()) {
    std::filesystem::current_path(p);
  }
  ~CwdGuard() { std::filesystem::current_path(old_); }

 private:
  std::filesystem::path old_;
};

TEST(ResolvePath, Rules) {
  ScratchDir dir;
  std::string recipe_file = dir.write("repo/recipes/sub/r.yaml", kMinimal);
  dir.write("repo/data/only_in_repo.txt", "x");
  dir.write("work/data/in_cwd.txt", "x");
  Recipe r = load_recipe(recipe_file);
  std::string root = (dir.path() / "repo").string();
  EXPECT_EQ(r.root_dir, root);
  CwdGuard cwd(dir.path() / "work");
  EXPECT_EQ(resolve_path(r, "/abs/x"), "/abs/x");
  EXPECT_EQ(resolve_path(r, ""), "");
  EXPECT_EQ(resolve_path(r, "data/in_cwd.txt"), "data/in_cwd.txt");
  EXPECT_EQ(resolve_path(r, "data/only_in_repo.txt"), root + "/data/only_in_repo.txt");
  EXPECT_EQ(resolve_path(r, "./data/../data/nowhere"), root + "/data/nowhere");
  Recipe no_root = parse_recipe_string(kMinimal, "elsewhere.yaml");
  EXPECT_EQ(no_root.root_dir, "");
  EXPECT_EQ(resolve_path(no_root, "data/nowhere"), "data/nowhere");
}

// Outputs resolve one fixed way, existing or not: against the working directory, absolute.
// (Inputs above fall back to the repository; before, a new output directory did too, and one
// that existed in the working directory did not.)
TEST(ResolvePath, OutputsResolveAgainstTheWorkingDirectory) {
  ScratchDir dir;
  dir.write("repo/recipes/r.yaml", kMinimal);
  dir.write("work/runs/existing/log.jsonl", "x");
  CwdGuard cwd(dir.path() / "work");
  const std::string work = std::filesystem::current_path().string();
  EXPECT_EQ(resolve_output_path("runs/new/ckpt"), work + "/runs/new/ckpt");
  EXPECT_EQ(resolve_output_path("runs/existing/log.jsonl"), work + "/runs/existing/log.jsonl");
  EXPECT_EQ(resolve_output_path("./a/../b"), work + "/b");
  EXPECT_EQ(resolve_output_path("/abs/x"), "/abs/x");
  EXPECT_EQ(resolve_output_path(""), "");
}

TEST(ResolvePath, RelativeRecipePathIsAbsolutizedAtLoad) {
  ScratchDir dir;
  dir.write("repo/recipes/r.yaml", kMinimal);
  Recipe r;
  {
    CwdGuard cwd(dir.path() / "repo");
    r = load_recipe("recipes/r.yaml");
  }
  EXPECT_EQ(r.source_path, "recipes/r.yaml");
  EXPECT_EQ(r.root_dir, (dir.path() / "repo").string());
  EXPECT_EQ(resolve_path(r, "tok.model"), (dir.path() / "repo" / "tok.model").string());
}

}  // namespace
}  // namespace megatron::config
