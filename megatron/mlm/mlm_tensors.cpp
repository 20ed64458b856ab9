#include "megatron/mlm/mlm_tensors.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

#include "megatron/core/error.h"
#include "megatron/hf/hf_dtype.h"
#include "megatron/mlm/mlm_layout.h"

namespace megatron::mlm {
namespace {

namespace fs = std::filesystem;
using checkpoint::PickleRef;
using checkpoint::PickleValue;
using Kind = PickleValue::Kind;

constexpr const char* kLayers = "decoder.layers.";
constexpr const char* kExperts = "mlp.experts.experts.";  // torch_dist: [layers, experts, ...]

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    default:
      return "";
  }
}

std::vector<float> to_fp32(const Tensor& t, const std::string& where, const std::string& name) {
  const char* dtype = safetensors_dtype(t.dtype());
  MT_INPUT_CHECK(*dtype != '\0', where, ": tensor '", name, "' has dtype ", dtype_name(t.dtype()),
                 " (fp32, bf16 and fp16 convert)");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  hf::to_float(dtype, t.raw(), out.data(), t.numel());
  return out;
}

// The model dicts of a legacy rank file: "model", or "model0", "model1", ... with virtual
// pipeline stages.
std::vector<const PickleValue*> model_chunks(const PickleValue& top, int64_t vpp,
                                             const std::string& where) {
  std::vector<const PickleValue*> out;
  if (vpp <= 1) {
    const PickleValue* m = top.get("model");
    MT_INPUT_CHECK(m && m->is(Kind::Dict), where, ": no model state dict ('model')");
    out.push_back(m);
    return out;
  }
  for (int64_t v = 0; v < vpp; ++v) {
    const PickleValue* m = top.get(concat("model", v));
    MT_INPUT_CHECK(m && m->is(Kind::Dict), where, ": no 'model", v, "' (virtual stage ", v, ")");
    out.push_back(m);
  }
  return out;
}

// Local layer numbers of a model chunk dict.
std::set<int64_t> local_layers(const PickleValue& model) {
  std::set<int64_t> out;
  const std::regex layer("decoder\\.layers\\.([0-9]+)\\..*");
  for (const auto& [k, v] : model.dict) {
    std::smatch m;
    if (k->is(Kind::String) && std::regex_match(k->text, m, layer)) out.insert(std::stoll(m[1]));
  }
  return out;
}

}  // namespace

MlmTensors::MlmTensors(const MlmCheckpoint& checkpoint) : ckpt_(checkpoint) {
  swiglu_ = ckpt_.args.boolean_or("swiglu", false);
  if (ckpt_.format == Format::TorchDist)
    index_distributed();
  else
    index_legacy();
}

MlmTensors::MlmTensors(const MlmTensors& model, const std::string& prefix)
    : ckpt_(model.ckpt_), prefix_(prefix), swiglu_(model.swiglu_), dcp_(model.dcp_) {
  MT_CHECK(dcp_ != nullptr && !prefix.empty(), "a prefix is for torch_dist");
  index_distributed();
}

MlmTensors::~MlmTensors() = default;

std::string MlmTensors::description() const {
  return concat("Megatron-LM checkpoint ", ckpt_.dir, " (", format_name(ckpt_.format), ")");
}

void MlmTensors::index_distributed() {
  if (!dcp_) dcp_ = std::make_shared<const checkpoint::DcpCheckpoint>(ckpt_.dir);
  const int64_t layers = ckpt_.args.integer("num_layers");
  const std::string where = (fs::path(ckpt_.dir) / ".metadata").string();
  for (const auto& [stored, t] : dcp_->tensors()) {
    // The model's tensors, or (with a prefix) the optimizer state's under it.
    if (prefix_.empty() ? stored.rfind("optimizer.", 0) == 0 : stored.rfind(prefix_, 0) != 0)
      continue;
    const std::string name = stored.substr(prefix_.size());
    Entry e;
    e.dtype = t.dtype;
    e.where = where;
    e.dcp_name = stored;
    if (name.rfind(kLayers, 0) != 0) {
      e.shape = e.dcp_extent = t.shape;
      e.dcp_offset.assign(t.shape.size(), 0);
      entries_[name] = e;
      continue;
    }
    // Stacked over the layers (and the experts): one entry per layer (and expert).
    MT_INPUT_CHECK(!t.shape.empty() && t.shape[0] == layers, where, ": tensor '", name,
                   "' has shape ", Shape(t.shape.begin(), t.shape.end()).str(),
                   ", not one row per layer of the ", layers, " that args.num_layers says");
    std::string key = canonical_layer_key(name.substr(std::string(kLayers).size()));
    const bool experts = key.rfind(kExperts, 0) == 0;
    const size_t stacked = experts ? 2 : 1;
    MT_INPUT_CHECK(t.shape.size() > stacked, where, ": tensor '", name, "' has too few dimensions");
    if (experts) key = key.substr(std::string(kExperts).size());
    e.shape.assign(t.shape.begin() + static_cast<std::ptrdiff_t>(stacked), t.shape.end());
    e.dcp_extent = t.shape;
    e.dcp_extent[0] = 1;
    if (experts) e.dcp_extent[1] = 1;
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t x = 0; x < (experts ? t.shape[1] : 1); ++x) {
        e.dcp_offset.assign(t.shape.size(), 0);
        e.dcp_offset[0] = l;
        if (experts) e.dcp_offset[1] = x;
        entries_[experts ? concat(kLayers, l, ".mlp.experts.", x, ".", key)
                         : concat(kLayers, l, ".", key)] = e;
      }
  }
}

// A legacy rank file's layer-relative key with its global expert number: local expert j of
// expert rank r is expert r * (experts / ep) + j.
std::string MlmTensors::global_expert_key(const std::string& key, int64_t ep_rank) const {
  static const std::regex local("mlp\\.experts\\.local_experts\\.([0-9]+)\\.(.*)");
  std::smatch m;
  if (!std::regex_match(key, m, local)) return key;
  const int64_t per_rank = ckpt_.args.integer("num_experts") / ckpt_.ep;
  return concat("mlp.experts.", ep_rank * per_rank + std::stoll(m[1]), ".", m[2].str());
}

void MlmTensors::index_legacy() {
  // Layer offsets: chunks in model order (virtual stage-major, then pipeline rank), each
  // holding as many layers as its tensor rank 0 file lists.
  std::map<std::pair<int64_t, int64_t>, int64_t> count;  // (virtual, pp rank) -> layers
  for (size_t f = 0; f < ckpt_.rank_files.size(); ++f) {
    const auto& rf = ckpt_.rank_files[f];
    files_.push_back(std::make_unique<checkpoint::TorchFile>(rf.path));
    if (rf.tp_rank != 0 || rf.ep_rank != 0) continue;
    const auto chunks = model_chunks(files_.back()->root(), ckpt_.vpp, rf.path);
    for (size_t v = 0; v < chunks.size(); ++v)
      count[{static_cast<int64_t>(v), rf.pp_rank}] =
          static_cast<int64_t>(local_layers(*chunks[v]).size());
  }
  std::map<std::pair<int64_t, int64_t>, int64_t> offset;
  int64_t total = 0;
  for (const auto& [key, n] : count) offset[key] = total, total += n;
  const int64_t layers = ckpt_.args.integer("num_layers");
  MT_INPUT_CHECK(total == layers, ckpt_.dir, ": the rank files hold ", total,
                 " layers, args.num_layers says ", layers);
  const std::regex layer("decoder\\.layers\\.([0-9]+)\\.(.*)");
  for (size_t f = 0; f < files_.size(); ++f) {
    const auto& rf = ckpt_.rank_files[f];
    const auto chunks = model_chunks(files_[f]->root(), ckpt_.vpp, rf.path);
    for (size_t v = 0; v < chunks.size(); ++v)
      for (const auto& [k, value] : chunks[v]->dict) {
        MT_INPUT_CHECK(k->is(Kind::String), rf.path, ": a model key is ", k->describe());
        if (k->text.ends_with("._extra_state")) continue;  // Transformer Engine's FP8 state
        std::string name = k->text;
        std::smatch m;
        bool expert = false;
        if (std::regex_match(k->text, m, layer)) {
          const std::string key = global_expert_key(canonical_layer_key(m[2]), rf.ep_rank);
          expert = key.rfind("mlp.experts.", 0) == 0;
          name = concat(kLayers, std::stoll(m[1]) + offset[{static_cast<int64_t>(v), rf.pp_rank}],
                        ".", key);
        }
        // Everything but the experts is the same on every expert rank: rank 0's copy.
        if (expert || rf.ep_rank == 0) add_legacy_piece(name, f, value, rf.tp_rank);
      }
  }
  for (const auto& [name, e] : entries_)
    MT_INPUT_CHECK(static_cast<int64_t>(e.pieces.size()) == (e.split_dim >= 0 ? ckpt_.tp : 1),
                   ckpt_.dir, ": tensor '", name, "' is in ", e.pieces.size(),
                   " rank files, not one per tensor-parallel rank");
}

void MlmTensors::add_legacy_piece(const std::string& name, size_t file, const PickleRef& value,
                                  int64_t tp_rank) {
  const std::string& path = ckpt_.rank_files[file].path;
  MT_INPUT_CHECK(checkpoint::TorchFile::is_tensor(*value), path, ": '", name, "' is ",
                 value->describe(), ", not a tensor");
  const checkpoint::TorchTensorRef ref = files_[file]->tensor_ref(*value, name);
  const int split = ckpt_.tp > 1 ? tp_split_dim(name) : -1;
  MT_INPUT_CHECK(split != -2, path, ": tensor '", name,
                 "': how Megatron-Core splits it over tensor parallelism is not known here");
  MT_INPUT_CHECK(split < static_cast<int>(ref.shape.size()), path, ": tensor '", name,
                 "' has too few dimensions");
  Entry& e = entries_[name];
  if (split < 0 && tp_rank > 0) return;  // replicated: rank 0's copy
  if (e.pieces.empty()) {
    e.dtype = ref.dtype;
    e.where = path;
    e.split_dim = split;
    e.gated = swiglu_ && gated_fc1(name);
    e.shape = ref.shape;
  } else {
    std::vector<int64_t> local = e.shape;
    local[static_cast<size_t>(split)] /= static_cast<int64_t>(e.pieces.size());
    MT_INPUT_CHECK(ref.shape == local && ref.dtype == e.dtype, path, ": tensor '", name,
                   "' has another shape or dtype than on tensor rank 0");
  }
  MT_INPUT_CHECK(static_cast<int64_t>(e.pieces.size()) == (split < 0 ? 0 : tp_rank), path,
                 ": tensor '", name, "' found out of tensor-rank order");
  e.pieces.push_back({file, value});
  if (split >= 0) {
    std::vector<int64_t> local = ref.shape;
    e.shape = local;
    e.shape[static_cast<size_t>(split)] *= static_cast<int64_t>(e.pieces.size());
  }
}

std::vector<std::string> MlmTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

std::vector<int64_t> MlmTensors::shape(const std::string& name) const {
  const auto it = entries_.find(name);
  MT_INPUT_CHECK(it != entries_.end(), description(), " has no tensor '", name, "'");
  return it->second.shape;
}

std::string MlmTensors::where(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? ckpt_.dir : it->second.where;
}

std::string MlmTensors::unreadable(const std::string& name) const {
  const DType d = entries_.at(name).dtype;
  if (*safetensors_dtype(d) != '\0') return "";
  return concat("dtype ", dtype_name(d), " (fp32, bf16 and fp16 convert)");
}

std::vector<float> MlmTensors::read_legacy(const std::string& name, const Entry& e) const {
  std::vector<std::vector<float>> pieces;
  for (const Piece& p : e.pieces)
    pieces.push_back(to_fp32(files_[p.file]->tensor(*p.value, name), e.where, name));
  return join_tp(pieces, e.shape, e.split_dim, e.gated);
}

std::vector<float> MlmTensors::read(const std::string& name,
                                    const std::vector<int64_t>& shape) const {
  const auto it = entries_.find(name);
  MT_INPUT_CHECK(it != entries_.end(), description(), " has no tensor '", name, "'");
  const Entry& e = it->second;
  MT_INPUT_CHECK(e.shape == shape, e.where, ": tensor '", name, "' has shape ",
                 Shape(e.shape.begin(), e.shape.end()).str(), ", the model needs ",
                 Shape(shape.begin(), shape.end()).str());
  std::vector<float> out =
      e.pieces.empty()
          ? to_fp32(dcp_->read_box(e.dcp_name, e.dcp_offset, e.dcp_extent), e.where, name)
          : read_legacy(name, e);
  int64_t bad = 0;
  for (float v : out) bad += std::isfinite(v) ? 0 : 1;
  MT_INPUT_CHECK(
      bad == 0, e.where, ": tensor '", name, "' holds ", bad,
      " non-finite values: the checkpoint is damaged or was saved after a diverged step");
  return out;
}

std::string MlmTensors::common_dtype() const {
  std::map<DType, int64_t> bytes;
  for (const auto& [name, e] : entries_) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    bytes[e.dtype] += n * static_cast<int64_t>(dtype_size(e.dtype));
  }
  DType best = DType::F32;
  int64_t most = -1;
  for (const auto& [d, n] : bytes)
    if (n > most && *safetensors_dtype(d) != '\0') best = d, most = n;
  return safetensors_dtype(best);
}

}  // namespace megatron::mlm
