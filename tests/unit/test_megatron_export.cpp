// Native checkpoints exported to Megatron-LM (models/mlm_export.h, megatron/mlm/mlm_writer.h),
// compared with the files Megatron-Core itself saved (tests/fixtures/megatron): a fixture
// imported and exported in the legacy format at its own layout with the local layer spec gives
// rank files with Megatron's exact keys, shapes and tensor bytes; the torch_dist export holds
// Megatron's tensors (names, global shapes, values) and extra-state objects; both import back to
// the same native tensors. (Megatron-LM's own load_checkpoint of these exports, with the
// fixtures' logits, is tools/gen_megatron_fixtures.py --check, run by hand.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/distcp.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/core/error.h"
#include "megatron/mlm/mlm_checkpoint.h"
#include "megatron/mlm/mlm_tensors.h"
#include "models/mlm_export.h"
#include "models/mlm_import.h"
#include "tests/support/test_paths.h"
#include "tests/unit/mlm_test_util.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;
using checkpoint::PickleValue;
using Kind = PickleValue::Kind;

using mlm_test::fixture;
using mlm_test::refusal;
using mlm_test::Scratch;

// The fixture imported, then exported as asked.
void round_trip(const std::string& name, const Scratch& s, mlm::Format format, int64_t tp,
                int64_t pp, mlm::LayerSpec spec) {
  models::MegatronImportOptions in;
  in.megatron_dir = fixture(name).string();
  in.out_dir = (s / "native").string();
  models::import_megatron_checkpoint(in);
  models::MegatronExportOptions out;
  out.native_dir = in.out_dir;
  out.out_dir = (s / "megatron").string();
  out.format = format;
  out.tp = tp;
  out.pp = pp;
  out.spec = spec;
  const auto r = models::export_megatron_checkpoint(out);
  EXPECT_EQ(r.iteration, 10);
  EXPECT_EQ(r.padded_vocab, 128);
}

TEST(MegatronExport, LegacyRankFilesAreMegatronsOwn) {
  for (const std::string model : {"gpt", "llama"}) {
    Scratch s;
    round_trip(model + "_tp2_pp2_torch", s, mlm::Format::Torch, 2, 2, mlm::LayerSpec::Local);
    for (const char* rank :
         {"mp_rank_00_000", "mp_rank_01_000", "mp_rank_00_001", "mp_rank_01_001"}) {
      const std::string file = std::string(rank) + "/model_optim_rng.pt";
      checkpoint::TorchFile ours((s / "megatron" / "iter_0000010" / file).string());
      checkpoint::TorchFile theirs(
          (fixture(model + "_tp2_pp2_torch") / "iter_0000010" / file).string());
      const PickleValue& a = *ours.root().get("model");
      const PickleValue& b = *theirs.root().get("model");
      std::set<std::string> keys_a, keys_b;
      for (const auto& [k, v] : a.dict) keys_a.insert(k->text);
      for (const auto& [k, v] : b.dict) keys_b.insert(k->text);
      EXPECT_EQ(keys_a, keys_b) << model << " " << rank;
      for (const auto& [k, v] : b.dict) {
        const PickleValue* mine = a.get(k->text);
        ASSERT_NE(mine, nullptr) << k->text;
        if (!checkpoint::TorchFile::is_tensor(*v)) {
          EXPECT_TRUE(mine->is(Kind::None)) << k->text;  // extra state
          continue;
        }
        const Tensor x = ours.tensor(*mine, k->text), y = theirs.tensor(*v, k->text);
        ASSERT_EQ(x.shape(), y.shape()) << k->text;
        EXPECT_EQ(0, std::memcmp(x.raw(), y.raw(), static_cast<size_t>(x.numel()) * 4))
            << model << " " << rank << " " << k->text;
      }
      EXPECT_EQ(ours.root().get("iteration")->integer, 10);
      EXPECT_EQ(ours.root().get("checkpoint_version")->real, 3.0);
      const PickleValue* args = ours.root().get("args");
      ASSERT_TRUE(args && args->text == "argparse.Namespace");
      EXPECT_EQ(args->state->get("tensor_model_parallel_size")->integer, 2);
      EXPECT_EQ(args->state->get("num_layers")->integer, 4);
    }
  }
}

TEST(MegatronExport, DistributedExportHoldsMegatronsTensors) {
  for (const std::string model : {"gpt", "llama"}) {
    Scratch s;
    round_trip(model + "_tp2_pp2_torch_dist", s, mlm::Format::TorchDist, 1, 1,
               mlm::LayerSpec::TransformerEngine);
    const checkpoint::DcpCheckpoint ours((s / "megatron" / "iter_0000010").string());
    const checkpoint::DcpCheckpoint theirs(
        (fixture(model + "_tp2_pp2_torch_dist") / "iter_0000010").string());
    ASSERT_EQ(ours.tensors().size(), theirs.tensors().size()) << model;
    for (const auto& [name, t] : theirs.tensors()) {
      const checkpoint::DcpTensor* mine = ours.find(name);
      ASSERT_NE(mine, nullptr) << name;
      EXPECT_EQ(mine->shape, t.shape) << name;
      const Tensor x = ours.read(name), y = theirs.read(name);
      EXPECT_EQ(0, std::memcmp(x.raw(), y.raw(), static_cast<size_t>(x.numel()) * 4)) << name;
    }
    std::set<std::string> extra_ours, extra_theirs;
    for (const auto& n : ours.byte_items()) extra_ours.insert(n);
    for (const auto& n : theirs.byte_items())
      if (n.rfind("rng_state", 0) != 0) extra_theirs.insert(n);  // not exported (--no-load-rng)
    EXPECT_EQ(extra_ours, extra_theirs) << model;
    // And it imports back to the same model tensors.
    const auto back = mlm::open_checkpoint((s / "megatron").string(), {});
    const auto orig = mlm::open_checkpoint(fixture(model + "_tp2_pp2_torch_dist").string(), {});
    const mlm::MlmTensors a(back), b(orig);
    EXPECT_EQ(a.names(), b.names());
    for (const std::string& n : b.names())
      EXPECT_EQ(a.read(n, a.shape(n)), b.read(n, b.shape(n))) << n;
    EXPECT_EQ(back.args.integer("consumed_train_samples"), 80);
  }
}

TEST(MegatronExport, TransformerEngineNamesFuseTheNorms) {
  Scratch s;
  round_trip("llama_tp2_pp2_torch", s, mlm::Format::Torch, 1, 1, mlm::LayerSpec::TransformerEngine);
  checkpoint::TorchFile f(
      (s / "megatron" / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt").string());
  const PickleValue& model = *f.root().get("model");
  EXPECT_NE(model.get("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"), nullptr);
  EXPECT_NE(model.get("decoder.layers.3.mlp.linear_fc1.layer_norm_weight"), nullptr);
  EXPECT_EQ(model.get("decoder.layers.0.input_layernorm.weight"), nullptr);
  // It imports back (the names are canonicalised) to the same tensors.
  const mlm::MlmTensors a(mlm::open_checkpoint((s / "megatron").string(), {}));
  const mlm::MlmTensors b(mlm::open_checkpoint(fixture("llama_tp2_pp2_torch").string(), {}));
  for (const std::string& n : b.names())
    EXPECT_EQ(a.read(n, a.shape(n)), b.read(n, b.shape(n))) << n;
}

TEST(MegatronExport, BadRequestsAreRefused) {
  Scratch s;
  round_trip("llama_tp2_pp2_torch", s, mlm::Format::TorchDist, 1, 1,
             mlm::LayerSpec::TransformerEngine);
  models::MegatronExportOptions o;
  o.native_dir = (s / "native").string();
  o.out_dir = (s / "megatron").string();  // already holds the first export
  EXPECT_NE(refusal([&] { models::export_megatron_checkpoint(o); }).find("is not empty"),
            std::string::npos);
  o.out_dir = (s / "other").string();
  o.format = mlm::Format::Torch;
  o.pp = 3;  // 4 layers
  EXPECT_NE(refusal([&] { models::export_megatron_checkpoint(o); }).find("must divide"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(s / "other" / "iter_0000010"));
}

}  // namespace
