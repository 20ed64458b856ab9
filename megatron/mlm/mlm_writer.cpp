#include "megatron/mlm/mlm_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>

#include "megatron/checkpoint/torch_save.h"
#include "megatron/core/error.h"
#include "megatron/hf/hf_dtype.h"
#include "megatron/mlm/mlm_layout.h"

namespace megatron::mlm {
namespace {

namespace fs = std::filesystem;
using checkpoint::Py;
using checkpoint::PyItem;
using checkpoint::TorchArchiveWriter;

constexpr const char* kLayers = "decoder.layers.";
const char* const kLinears[] = {"self_attention.linear_qkv", "self_attention.linear_proj",
                                "mlp.linear_fc1", "mlp.linear_fc2"};

struct LayerName {
  int64_t layer = -1;  // -1: not a layer's tensor
  std::string key;     // layer-relative (or the whole name)
};

LayerName parse_name(const std::string& name) {
  static const std::regex layer("decoder\\.layers\\.([0-9]+)\\.(.*)");
  std::smatch m;
  if (!std::regex_match(name, m, layer)) return {-1, name};
  return {std::stoll(m[1]), m[2]};
}

const char* dtype_text(DType d) {
  return d == DType::BF16 ? "BF16" : d == DType::F16 ? "F16" : "F32";
}

std::vector<char> encode(const std::vector<float>& x, DType dtype) {
  std::vector<char> out(x.size() * dtype_size(dtype));
  hf::from_float(dtype_text(dtype), x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

Py ints(const std::vector<int64_t>& v) {
  std::vector<Py> items;
  for (int64_t i : v) items.push_back(Py::integer_value(i));
  return Py::tuple(items);
}
Py torch_size(const std::vector<int64_t>& v) {
  return Py::reduce(Py::global("torch", "Size"), {ints(v)});
}
Py torch_dtype(DType d) {
  return Py::global("torch", d == DType::BF16  ? "bfloat16"
                             : d == DType::F16 ? "float16"
                                               : "float32");
}

// One torch.save archive appended to `out`: a tensor (or, for an extra-state object, [None]);
// its (offset, length).
std::pair<uint64_t, uint64_t> append_archive(std::ofstream& out, const std::string& where,
                                             const std::vector<float>* data, DType dtype,
                                             const std::vector<int64_t>& shape) {
  const auto start = static_cast<uint64_t>(out.tellp());
  TorchArchiveWriter w(out, "archive", where);
  if (data == nullptr) {
    // Megatron-Core saves each sharded object as the list of its local values.
    w.write_pickle(checkpoint::write_pickle(Py::list({Py::none()})));
  } else {
    w.write_pickle(checkpoint::write_pickle(checkpoint::torch_tensor_reference(0, dtype, shape)));
    const std::vector<char> bytes = encode(*data, dtype);
    w.begin_storage(0, bytes.size());
    w.write(bytes.data(), bytes.size());
    w.end_storage();
  }
  return {start, w.finish()};
}

class TmpDir {
 public:
  TmpDir(const fs::path& final_path) : final_(final_path) {
    path_ = final_.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TmpDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void commit() {
    fs::rename(path_, final_);
    committed_ = true;
  }

 private:
  fs::path final_, path_;
  bool committed_ = false;
};

void write_small_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  MT_INPUT_CHECK(out.good(), path.string(), ": cannot write");
}

// common.pt (or a rank file): a torch.save of `top`, its tensors' storages from `tensors`.
void write_torch_file(const fs::path& path, const Py& top) {
  std::ofstream out(path, std::ios::binary);
  TorchArchiveWriter w(out, path.stem().string(), path.string());
  w.write_pickle(checkpoint::write_pickle(top));
  w.finish();
}

Py common_state(const MlmWriteSpec& s, bool with_content_metadata) {
  std::vector<PyItem> items = {
      {Py::str("args"), s.args},
      {Py::str("checkpoint_version"), Py::real_value(3.0)},
      {Py::str("iteration"), Py::integer_value(s.iteration)},
      {Py::str("num_floating_point_operations_so_far"), Py::integer_value(0)}};
  if (with_content_metadata)
    items.push_back(
        {Py::str("content_metadata"),
         Py::dictionary({{Py::str("singleton_local_shards"), Py::boolean_value(false)},
                         {Py::str("chained_optim_avoid_prefix"), Py::boolean_value(true)}})});
  return Py::dictionary(items);
}

// ---- torch_dist ---------------------------------------------------------------------------

Py dcp_class(const std::string& name, Py state) {
  return Py::new_object("torch.distributed.checkpoint.metadata", name, std::move(state));
}

struct DcpEntry {
  std::vector<int64_t> size;
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> chunks;  // offsets, sizes
};

Py tensor_metadata(const DcpEntry& e, DType dtype) {
  const Py properties = dcp_class(
      "TensorProperties",
      Py::tuple(
          {torch_dtype(dtype),
           Py::reduce(Py::global("torch.serialization", "_get_layout"), {Py::str("torch.strided")}),
           Py::boolean_value(false),
           Py::reduce(Py::global("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
                      {Py::integer_value(0)}),
           Py::boolean_value(false)}));
  std::vector<Py> chunks;
  for (const auto& [offsets, sizes] : e.chunks)
    chunks.push_back(
        dcp_class("ChunkStorageMetadata", Py::dictionary({{Py::str("offsets"), torch_size(offsets)},
                                                          {Py::str("sizes"), torch_size(sizes)}})));
  return dcp_class("TensorStorageMetadata",
                   Py::dictionary({{Py::str("properties"), properties},
                                   {Py::str("size"), torch_size(e.size)},
                                   {Py::str("chunks"), Py::list(chunks)}}));
}

Py storage_key(const std::string& fqn, const std::vector<int64_t>* offsets) {
  std::vector<PyItem> state = {{Py::str("fqn"), Py::str(fqn)}};
  if (offsets) state.push_back({Py::str("offset"), torch_size(*offsets)});
  state.push_back({Py::str("index"), Py::none()});
  return dcp_class("MetadataIndex", Py::dictionary(state));
}

Py storage_info(const std::string& file, std::pair<uint64_t, uint64_t> at) {
  return Py::new_object(
      "torch.distributed.checkpoint.filesystem", "_StorageInfo",
      Py::dictionary({{Py::str("relative_path"), Py::str(file)},
                      {Py::str("offset"), Py::integer_value(static_cast<int64_t>(at.first))},
                      {Py::str("length"), Py::integer_value(static_cast<int64_t>(at.second))}}));
}

void write_distributed(const MlmWriteSpec& s, const std::vector<MlmTensorOut>& tensors,
                       const std::function<std::vector<float>(const std::string&)>& read,
                       const fs::path& dir) {
  const std::string file = "__0_0.distcp";
  const fs::path data_path = dir / file;
  std::ofstream out(data_path, std::ios::binary);
  std::map<std::string, DcpEntry> entries;
  std::vector<std::string> order;
  std::vector<PyItem> storage;
  for (const MlmTensorOut& t : tensors) {
    const LayerName n = parse_name(t.name);
    const std::string fqn = n.layer < 0 ? t.name : kLayers + te_layer_key(n.key);
    std::vector<int64_t> offsets(t.shape.size(), 0), sizes = t.shape;
    if (n.layer >= 0) {
      offsets.insert(offsets.begin(), n.layer);
      sizes.insert(sizes.begin(), 1);
    }
    if (!entries.count(fqn)) {
      order.push_back(fqn);
      entries[fqn].size = sizes;
      if (n.layer >= 0) entries[fqn].size[0] = s.num_layers;
    }
    const std::vector<float> data = read(t.name);
    const auto at = append_archive(out, data_path.string(), &data, s.dtype, sizes);
    entries[fqn].chunks.push_back({offsets, sizes});
    storage.push_back({storage_key(fqn, &offsets), storage_info(file, at)});
  }
  std::vector<PyItem> state_dict;
  for (const std::string& fqn : order)
    state_dict.push_back({Py::str(fqn), tensor_metadata(entries[fqn], s.dtype)});
  // The linear layers' extra state (Transformer Engine's FP8 metadata; None here), an object
  // per layer as Megatron-Core saves it.
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (const char* m : kLinears) {
      const std::string fqn = concat(kLayers, m, "._extra_state/shard_", l, "_", s.num_layers);
      const auto at = append_archive(out, data_path.string(), nullptr, s.dtype, {});
      state_dict.push_back({Py::str(fqn), dcp_class("BytesStorageMetadata", Py::dictionary({}))});
      storage.push_back({storage_key(fqn, nullptr), storage_info(file, at)});
    }
  out.close();
  MT_INPUT_CHECK(out.good(), data_path.string(), ": cannot write (disk full?)");
  const Py metadata =
      dcp_class("Metadata", Py::dictionary({
                                {Py::str("state_dict_metadata"), Py::dictionary(state_dict)},
                                {Py::str("planner_data"), Py::none()},
                                {Py::str("storage_data"), Py::dictionary(storage)},
                                {Py::str("storage_meta"), Py::none()},
                                {Py::str("version"), Py::str("1.0.0")},
                            }));
  write_small_file(dir / ".metadata", checkpoint::write_pickle(metadata));
  write_torch_file(dir / "common.pt", common_state(s, true));
  write_small_file(dir / "metadata.json",
                   R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, )"
                   R"("common_backend": "torch", "common_backend_version": 1})");
}

}  // namespace

// ---- torch (legacy) -------------------------------------------------------------------------

namespace {

struct StageTensor {
  std::string global, local;  // canonical name; the rank file's key
  std::vector<int64_t> shape;
};

// The stage's tensors with their local names, and the extra-state keys its modules have.
std::vector<StageTensor> stage_tensors(const MlmWriteSpec& s, const std::vector<MlmTensorOut>& all,
                                       int64_t p, std::vector<std::string>& extra_state) {
  const int64_t per_stage = s.num_layers / s.pp;
  std::vector<StageTensor> out;
  bool has_output = false;
  for (const MlmTensorOut& t : all) {
    const LayerName n = parse_name(t.name);
    if (n.layer >= 0) {
      if (n.layer / per_stage != p) continue;
      const std::string key = s.spec == LayerSpec::TransformerEngine ? te_layer_key(n.key) : n.key;
      out.push_back({t.name, concat(kLayers, n.layer % per_stage, ".", key), t.shape});
      continue;
    }
    const bool first = t.name.rfind("embedding.", 0) == 0;
    if ((first && p == 0) || (!first && p == s.pp - 1)) out.push_back({t.name, t.name, t.shape});
    has_output = has_output || t.name == "output_layer.weight";
    // Tied embeddings with pipeline stages: the last keeps a copy as its output layer.
    if (t.name == "embedding.word_embeddings.weight" && s.tied_embeddings && s.pp > 1 &&
        p == s.pp - 1)
      out.push_back({t.name, "output_layer.weight", t.shape});
  }
  for (int64_t l = 0; l < per_stage; ++l)
    for (const char* m : kLinears)
      extra_state.push_back(concat(kLayers, l, ".", m, "._extra_state"));
  if (p == s.pp - 1) extra_state.push_back("output_layer._extra_state");
  return out;
}

void write_rank_files(const MlmWriteSpec& s, const std::vector<MlmTensorOut>& tensors,
                      const std::function<std::vector<float>(const std::string&)>& read,
                      const fs::path& dir) {
  MT_CHECK(s.num_layers % s.pp == 0, "layers ", s.num_layers, " do not split over pp ", s.pp);
  for (int64_t p = 0; p < s.pp; ++p) {
    std::vector<std::string> extra;
    const std::vector<StageTensor> stage = stage_tensors(s, tensors, p, extra);
    std::vector<std::unique_ptr<std::ofstream>> files;
    std::vector<std::unique_ptr<TorchArchiveWriter>> writers;
    for (int64_t t = 0; t < s.tp; ++t) {
      const std::string name = s.pp > 1 ? concat("mp_rank_", t < 10 ? "0" : "", t, "_",
                                                 p < 10    ? "00"
                                                 : p < 100 ? "0"
                                                           : "",
                                                 p)
                                        : concat("mp_rank_", t < 10 ? "0" : "", t);
      fs::create_directories(dir / name);
      const fs::path path = dir / name / "model_optim_rng.pt";
      files.push_back(std::make_unique<std::ofstream>(path, std::ios::binary));
      writers.push_back(
          std::make_unique<TorchArchiveWriter>(*files.back(), "model_optim_rng", path.string()));
      std::vector<PyItem> model;
      for (size_t i = 0; i < stage.size(); ++i) {
        std::vector<int64_t> local = stage[i].shape;
        const int d = tp_split_dim(stage[i].global);
        if (d >= 0) local[static_cast<size_t>(d)] /= s.tp;
        model.push_back({Py::str(stage[i].local), checkpoint::torch_tensor_reference(
                                                      static_cast<int64_t>(i), s.dtype, local)});
      }
      for (const std::string& k : extra) model.push_back({Py::str(k), Py::none()});
      Py top = common_state(s, false);
      top.dict.push_back({Py::str("model"), Py::ordered_dict(model)});
      writers.back()->write_pickle(checkpoint::write_pickle(top));
    }
    for (size_t i = 0; i < stage.size(); ++i) {
      const std::vector<float> x = read(stage[i].global);
      const int d = tp_split_dim(stage[i].global);
      const bool gated = s.swiglu && gated_fc1(stage[i].global);
      for (int64_t t = 0; t < s.tp; ++t) {
        const std::vector<char> bytes =
            encode(tp_piece(x, stage[i].shape, d, t, s.tp, gated), s.dtype);
        writers[static_cast<size_t>(t)]->begin_storage(static_cast<int64_t>(i), bytes.size());
        writers[static_cast<size_t>(t)]->write(bytes.data(), bytes.size());
        writers[static_cast<size_t>(t)]->end_storage();
      }
    }
    for (auto& w : writers) w->finish();
    for (auto& f : files) {
      f->close();
      MT_INPUT_CHECK(f->good(), dir.string(), ": cannot write (disk full?)");
    }
  }
}

}  // namespace

void write_megatron_checkpoint(const MlmWriteSpec& s, const std::vector<MlmTensorOut>& tensors,
                               const std::function<std::vector<float>(const std::string&)>& read) {
  const fs::path root(s.root);
  std::error_code ec;
  MT_INPUT_CHECK(!fs::exists(root, ec) || (fs::is_directory(root, ec) && fs::is_empty(root, ec)),
                 s.root, ": exists and is not empty (nothing already saved is overwritten)");
  fs::create_directories(root, ec);
  MT_INPUT_CHECK(!ec, s.root, ": cannot create (", ec.message(), ")");
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(s.iteration));
  TmpDir tmp(root / name);
  if (s.format == Format::TorchDist)
    write_distributed(s, tensors, read, tmp.path());
  else
    write_rank_files(s, tensors, read, tmp.path());
  tmp.commit();
  write_small_file(root / "latest_checkpointed_iteration.txt", std::to_string(s.iteration));
}

}  // namespace megatron::mlm
