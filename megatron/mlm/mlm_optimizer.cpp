#include "megatron/mlm/mlm_optimizer.h"

#include <algorithm>
#include <filesystem>

#include "megatron/checkpoint/distcp.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/core/error.h"
#include "megatron/hf/hf_dtype.h"
#include "megatron/mlm/mlm_layout.h"

namespace megatron::mlm {
namespace {

namespace fs = std::filesystem;
using checkpoint::PickleRef;
using checkpoint::PickleValue;
using Kind = PickleValue::Kind;

constexpr int64_t kParamAlign =
    64;  // _ParamAndGradBuffer's start alignment (distributed optimizer)

// Registration order of a dense layer's parameters in Megatron-Core's local layer spec.
const char* const kLayerParams[] = {"input_layernorm.weight",
                                    "input_layernorm.bias",
                                    "self_attention.linear_proj.weight",
                                    "self_attention.linear_proj.bias",
                                    "self_attention.linear_qkv.weight",
                                    "self_attention.linear_qkv.bias",
                                    "self_attention.q_layernorm.weight",
                                    "self_attention.k_layernorm.weight",
                                    "pre_mlp_layernorm.weight",
                                    "pre_mlp_layernorm.bias",
                                    "mlp.linear_fc1.weight",
                                    "mlp.linear_fc1.bias",
                                    "mlp.linear_fc2.weight",
                                    "mlp.linear_fc2.bias"};

// param_groups[0]["step"] of an optimizer state dict {"optimizer": {"param_groups": [...]}} (or
// of its inner dict).
double adam_step(const PickleValue& state, const std::string& where) {
  const PickleValue* inner = state.get("optimizer");
  const PickleValue* groups = (inner ? inner : &state)->get("param_groups");
  MT_INPUT_CHECK(groups && groups->is(Kind::List) && !groups->items.empty(), where,
                 ": the optimizer's param_groups are missing");
  const PickleValue* step = groups->items[0]->get("step");
  MT_INPUT_CHECK(step && (step->is(Kind::Float) || step->is(Kind::Int)), where,
                 ": the optimizer's param_groups carry no step count");
  return step->is(Kind::Float) ? step->real : static_cast<double>(step->integer);
}

std::vector<float> fp32_of(const Tensor& t, const std::string& where) {
  MT_INPUT_CHECK(t.dtype() == DType::F32, where, ": optimizer state in ", dtype_name(t.dtype()),
                 " (fp32 is read)");
  const auto* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// The value under the integer key `key` of a dict, or null.
const PickleValue* int_key(const PickleValue& dict, int64_t key) {
  for (const auto& [k, v] : dict.dict)
    if (k->is(Kind::Int) && k->integer == key) return v.get();
  return nullptr;
}

}  // namespace

const char* sharding_name(OptimizerSharding s) {
  switch (s) {
    case OptimizerSharding::DpReshardable:
      return "dp_reshardable";
    case OptimizerSharding::FullyReshardable:
      return "fully_reshardable";
    default:
      return "legacy distrib_optim.pt";
  }
}

std::vector<FlatParam> flat_layout(const MlmArgs& args, const MlmTensors& model, int64_t tp) {
  MT_INPUT_CHECK(!args.is_set("num_experts"), args.where(),
                 ": the flat optimizer state of expert layers (their own grad buffers) is not "
                 "read yet");
  MT_INPUT_CHECK(args.integer_or("pipeline_model_parallel_size", 1) == 1, args.where(),
                 ": the flat optimizer state of pipeline stages is not read yet");
  std::vector<std::string> names = {"embedding.word_embeddings.weight",
                                    "embedding.position_embeddings.weight"};
  for (int64_t l = 0; l < args.integer("num_layers"); ++l)
    for (const char* key : kLayerParams) names.push_back(concat("decoder.layers.", l, ".", key));
  for (const char* n :
       {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias", "output_layer.weight"})
    names.push_back(n);
  std::vector<FlatParam> out;
  int64_t at = 0;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {  // packed in reverse
    if (!model.has(*it)) continue;
    FlatParam p;
    p.name = *it;
    p.local_shape = model.shape(*it);
    const int d = tp_split_dim(*it);
    if (d >= 0) p.local_shape[static_cast<size_t>(d)] /= tp;
    int64_t n = 1;
    for (int64_t x : p.local_shape) n *= x;
    at = (at + kParamAlign - 1) / kParamAlign * kParamAlign;
    p.start = at;
    p.end = at += n;
    out.push_back(p);
  }
  return out;
}

namespace {

// The file the checkpoint's top-level dict came from (what errors about it name).
std::string top_level_path(const MlmCheckpoint& ck) {
  return ck.format == Format::TorchDist ? (fs::path(ck.dir) / "common.pt").string()
                                        : ck.rank_files.front().path;
}

}  // namespace

bool has_optimizer_state(const MlmCheckpoint& ck) {
  const PickleValue* optimizer = ck.top->get("optimizer");
  return optimizer != nullptr && optimizer->is(Kind::Dict);
}

MlmOptimizerState::MlmOptimizerState(const MlmCheckpoint& ck, const MlmTensors& model)
    : ckpt_(ck), model_(model) {
  const std::string top_path = top_level_path(ck);
  const PickleRef& top = ck.top;
  const PickleValue* optimizer = top->get("optimizer");
  MT_INPUT_CHECK(optimizer && optimizer->is(Kind::Dict), top_path,
                 ": no optimizer state (saved with --no-save-optim?)");
  if (const PickleValue* s = top->get("opt_param_scheduler"))
    scheduler_ = std::make_shared<PickleValue>(*s);
  if (ck.format == Format::TorchDist) {
    const PickleValue* type = optimizer->get("param_state_sharding_type");
    MT_INPUT_CHECK(type && type->is(Kind::String), top_path,
                   ": the optimizer state's sharding type is missing");
    if (type->text == "fully_reshardable") {
      sharding_ = OptimizerSharding::FullyReshardable;
      step_ = adam_step(*optimizer, top_path);
      for (const char* kind : {"param", "exp_avg", "exp_avg_sq"})
        per_kind_.push_back(
            std::make_unique<MlmTensors>(model, concat("optimizer.state.", kind, ".")));
      return;
    }
    MT_INPUT_CHECK(type->text == "dp_reshardable", top_path, ": optimizer sharding '", type->text,
                   "' is not read (dp_reshardable and fully_reshardable are)");
    sharding_ = OptimizerSharding::DpReshardable;
    dcp_ = model.distributed();
    for (const std::string& item : dcp_->byte_items())
      if (item.rfind("optimizer.distributed.dp_group_idx_0.optimizer/", 0) == 0) {
        const PickleRef groups = dcp_->read_object(item);  // [{"param_groups": [...]}]
        MT_INPUT_CHECK(groups->is(Kind::List) && !groups->items.empty(), ck.dir, ": '", item,
                       "' is not the optimizer's state list");
        step_ = adam_step(*groups->items[0], ck.dir + "/" + item);
      }
  } else {
    sharding_ = OptimizerSharding::Legacy;
    step_ = adam_step(*optimizer, top_path);
  }
  layout_ = flat_layout(ck.args, model, ck.tp);
}

MlmOptimizerState::~MlmOptimizerState() = default;

void MlmOptimizerState::read_flat(const std::string& kind) const {
  if (flat_.count(kind)) return;
  const int64_t size = layout_.empty() ? 0 : layout_.back().end;
  std::vector<std::vector<float>> per_rank;
  for (int64_t t = 0; t < ckpt_.tp; ++t) {
    std::vector<float> flat;
    std::string where;
    if (sharding_ == OptimizerSharding::DpReshardable) {
      const std::string base =
          concat("optimizer.distributed.dp_group_idx_", t, ".gbuf_idx_0.dtype_");
      const std::string name = base + "(torch.float32, torch.float32).bucket_idx_0." + kind;
      MT_INPUT_CHECK(dcp_->find(name), ckpt_.dir, ": no '", name,
                     "' (an fp32 model's single-bucket optimizer state is read)");
      MT_INPUT_CHECK(!dcp_->find(base + "(torch.float32, torch.float32).bucket_idx_1." + kind),
                     ckpt_.dir, ": optimizer state in several buckets is not read yet");
      where = ckpt_.dir + "/" + name;
      flat = fp32_of(dcp_->read(name), where);
    } else {
      const fs::path file = fs::path(ckpt_.rank_files[static_cast<size_t>(t)].path).parent_path() /
                            "distrib_optim.pt";
      where = file.string();
      checkpoint::TorchFile f(where);
      const PickleValue* buffer = int_key(f.root(), 0);
      MT_INPUT_CHECK(buffer && buffer->is(Kind::Dict) && buffer->dict.size() == 1, where,
                     ": not one grad buffer's state (several dtypes are not read yet)");
      const PickleValue* v = buffer->dict[0].second->get(kind);
      MT_INPUT_CHECK(v != nullptr, where, ": no '", kind, "'");
      flat = fp32_of(f.tensor(*v, kind), where);
    }
    // The layout must fill the buffer exactly: anything else is a model or layout not read here.
    MT_INPUT_CHECK(static_cast<int64_t>(flat.size()) == size, where, ": ", flat.size(),
                   " elements where this model's grad-buffer layout has ", size,
                   " (another layer spec's parameter order, or a layout not read here)");
    per_rank.push_back(std::move(flat));
  }
  flat_[kind] = std::move(per_rank);
}

std::vector<float> MlmOptimizerState::read(const std::string& kind, const std::string& name) const {
  MT_CHECK(kind == "param" || kind == "exp_avg" || kind == "exp_avg_sq", "optimizer state kind ",
           kind);
  if (sharding_ == OptimizerSharding::FullyReshardable) {
    const size_t k = kind == "param" ? 0 : kind == "exp_avg" ? 1 : 2;
    return per_kind_[k]->read(name, model_.shape(name));
  }
  read_flat(kind);
  const auto it = std::find_if(layout_.begin(), layout_.end(),
                               [&](const FlatParam& p) { return p.name == name; });
  MT_INPUT_CHECK(it != layout_.end(), ckpt_.dir, ": no optimizer state of '", name, "'");
  std::vector<std::vector<float>> pieces;
  for (const auto& flat : flat_.at(kind))
    pieces.emplace_back(flat.begin() + it->start, flat.begin() + it->end);
  const bool gated = ckpt_.args.boolean_or("swiglu", false) && gated_fc1(name);
  return join_tp(pieces, model_.shape(name), ckpt_.tp > 1 ? tp_split_dim(name) : -1, gated);
}

}  // namespace megatron::mlm
