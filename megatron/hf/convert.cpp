#include "megatron/hf/convert.h"

#include <filesystem>
#include <random>

#include "megatron/checkpoint/directory.h"
#include "megatron/checkpoint/safetensors.h"
#include "megatron/hf/hf_dtype.h"

namespace megatron::hf {

namespace fs = std::filesystem;
namespace st = checkpoint::safetensors;
using json = nlohmann::json;

namespace {

constexpr const char* kModelPrefix = "model/";

// The checkpoint key of a mapping's native tensor: a parameter's under model/; a name under moe/
// (the experts' bias of aux-loss-free balancing, kept with the checkpoint but not a parameter)
// or optim/ (an imported optimizer's moments, optim/exp_avg/<parameter>) as it is.
std::string checkpoint_key(const std::string& native) {
  const bool as_is = native.rfind("moe/", 0) == 0 || native.rfind("optim/", 0) == 0;
  return as_is ? native : kModelPrefix + native;
}

std::vector<int64_t> local_shape(const std::vector<int64_t>& global, const ShardSpec& s) {
  std::vector<int64_t> local = global;
  if (!s.replicated()) local[static_cast<size_t>(s.dim)] /= s.count;
  return local;
}

// The box of a global tensor a shard holds (the whole tensor when replicated).
checkpoint::PieceGeometry box(const std::string& name, const std::vector<int64_t>& global,
                              const ShardSpec& shard) {
  checkpoint::TensorPiece piece;
  piece.name = name;
  piece.global_shape = Shape(global.begin(), global.end());
  const std::vector<int64_t> local = local_shape(global, shard);
  piece.local_shape = Shape(local.begin(), local.end());
  piece.shard = shard;
  return piece.geometry();
}

std::string random_suffix() {
  std::random_device rd;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%08x%04x", rd(), rd() & 0xffff);
  return buf;
}

struct Piece {
  size_t rank_file, entry;
  ShardSpec shard;
};

}  // namespace

namespace {

// Step 1 of an import: every source present with its shape and a dtype that converts, every HF
// tensor used or ignored; before a byte is written.
void check_sources(const TensorSource& src, const ImportRequest& req) {
  std::set<std::string> used;
  for (const TensorMapping& m : req.mappings) {
    m.validate();
    for (const HfSource& s : m.sources) {
      if (!src.has(s.name))
        throw InputError(
            concat(src.description(), " has no tensor '", s.name, "' (needed for ", m.native, ")"));
      if (src.shape(s.name) != s.shape)
        throw InputError(concat(src.where(s.name), ": tensor '", s.name, "' has shape ",
                                json(src.shape(s.name)).dump(), ", the configuration needs ",
                                json(s.shape).dump()));
      if (const std::string why = src.unreadable(s.name); !why.empty())
        throw InputError(concat(src.where(s.name), ": tensor '", s.name, "' has ", why));
      used.insert(s.name);
      for (const std::string& c : src.companions(s.name)) used.insert(c);
    }
  }
  auto ignored = [&](const std::string& name) {
    if (req.ignored.count(name)) return true;
    for (const std::string& p : req.ignored_prefixes)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  };
  for (const std::string& name : src.names())
    if (!used.count(name) && !ignored(name))
      throw InputError(concat(src.where(name), ": tensor '", name, "' is not part of the model ",
                              req.model_description, " (extra tensor)"));
}

// Step 2: the target layout's shard files, laid out in full before streaming.
struct ShardFiles {
  std::vector<int> ranks;  // per file
  std::vector<st::Writer> layouts;
  std::vector<json> parts;
  std::map<std::string, std::vector<Piece>> pieces_of;  // by native name
};

ShardFiles lay_out_shards(const ImportRequest& req) {
  ShardFiles out;
  std::map<int, size_t> file_of_rank;
  for (const TensorMapping& m : req.mappings) {
    NativePlacement placement;
    const auto it = req.layout.find(m.native);
    if (it != req.layout.end()) placement = it->second;
    if (placement.pieces.empty()) placement.pieces.push_back({0, ShardSpec{}});
    // Each distinct piece once: replicas (over tp, or over ep/dp for dense shards) are written
    // by the first rank that holds them, as a training run saves one data-parallel replica.
    std::set<std::pair<int64_t, int64_t>> written;  // (shard index, count); replicated: (-1, 1)
    for (const auto& [rank, shard] : placement.pieces) {
      const std::pair<int64_t, int64_t> key = shard.replicated()
                                                  ? std::make_pair(int64_t{-1}, int64_t{1})
                                                  : std::make_pair(shard.index, shard.count);
      if (!written.insert(key).second) continue;
      if (!file_of_rank.count(rank)) {
        file_of_rank[rank] = out.layouts.size();
        out.ranks.push_back(rank);
        out.layouts.emplace_back();
        out.parts.push_back({{"pieces", json::array()}});
      }
      const size_t f = file_of_rank[rank];
      const std::string name = checkpoint_key(m.native);
      const std::vector<int64_t> local = local_shape(m.native_shape, shard);
      std::vector<int64_t> offset(m.native_shape.size(), 0);
      if (!shard.replicated())
        offset[static_cast<size_t>(shard.dim)] = shard.index * local[shard.dim];
      int64_t count = 1;
      for (int64_t d : local) count *= d;
      out.layouts[f].add({name, "F32", local, nullptr});
      const size_t entry = out.layouts[f].size() - 1;
      const auto [b, e] = out.layouts[f].data_offsets(entry);
      out.parts[f]["pieces"].push_back({{"name", name},
                                        {"shape", m.native_shape},
                                        {"key", name},
                                        {"offset", offset},
                                        {"extent", local},
                                        {"flat", {0, count}},
                                        {"data_offsets", {b, e}}});
      out.pieces_of[m.native].push_back({f, entry, shard});
    }
  }
  return out;
}

// Step 3: tensor by tensor, read the sources, build the native tensor, write each piece's box.
void stream_tensors(const TensorSource& src, const ImportRequest& req, const ShardFiles& files,
                    std::vector<std::unique_ptr<st::StreamWriter>>& streams) {
  for (const TensorMapping& m : req.mappings) {
    std::vector<std::vector<float>> sources;
    for (const HfSource& s : m.sources) sources.push_back(src.read(s.name, s.shape));
    const std::vector<float> full = m.import(sources);
    sources.clear();
    const checkpoint::PieceGeometry whole = box(m.native, m.native_shape, ShardSpec{});
    for (const Piece& p : files.pieces_of.at(m.native))
      checkpoint::for_each_overlap(
          whole, box(m.native, m.native_shape, p.shard), [&](const checkpoint::Overlap& o) {
            streams[p.rank_file]->write_at(p.entry, static_cast<uint64_t>(o.b_pos) * 4,
                                           full.data() + o.a_pos,
                                           static_cast<uint64_t>(o.length) * 4);
          });
  }
}

}  // namespace

void import_to_native(const TensorSource& src, const ImportRequest& req) {
  check_sources(src, req);
  ShardFiles files = lay_out_shards(req);
  const std::string tmp =
      checkpoint::tmp_checkpoint_path(req.out_dir, req.iteration, random_suffix());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) throw Error(concat("cannot create ", tmp, ": ", ec.message()));
  struct Cleanup {
    std::string path;
    bool armed = true;
    ~Cleanup() {
      std::error_code e;
      if (armed) fs::remove_all(path, e);
    }
  } cleanup{tmp};
  std::vector<std::unique_ptr<st::StreamWriter>> streams;
  for (size_t f = 0; f < files.layouts.size(); ++f) {
    const std::string file = concat("shard_", files.ranks[f], ".safetensors");
    st::Writer& layout = files.layouts[f];
    layout.set_metadata("format", "megatron-cpp checkpoint shard");
    layout.set_metadata("iteration", std::to_string(req.iteration));
    layout.set_metadata("rank", std::to_string(files.ranks[f]));
    layout.set_metadata("source", src.description());
    streams.push_back(
        std::make_unique<st::StreamWriter>(std::move(layout), (fs::path(tmp) / file).string()));
    files.parts[f]["file"] = file;
  }
  stream_tensors(src, req, files, streams);
  std::vector<json> rank_parts;
  for (size_t f = 0; f < streams.size(); ++f) {
    files.parts[f]["crc32c"] = streams[f]->finish(/*sync=*/true);
    files.parts[f]["bytes"] = streams[f]->layout().file_size();
    rank_parts.push_back(files.parts[f]);
  }
  checkpoint::SaveRequest save;
  save.dir = req.out_dir;
  save.iteration = req.iteration;
  save.metadata = req.metadata;
  checkpoint::finalize(save, tmp, rank_parts, /*keep_last=*/0, /*protect=*/{});
  cleanup.armed = false;
}

namespace {

// The adapter tensors of a native weight "X.weight": X.lora_a.weight, X.lora_b.weight.
std::vector<std::string> lora_names(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() <= suffix.size() ||
      weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) != 0)
    return {};
  const std::string base = weight.substr(0, weight.size() - suffix.size());
  return {base + ".lora_a.weight", base + ".lora_b.weight"};
}

// full (the whole native weight, rows x in) += scale * B A when the checkpoint has adapters for
// it: B's rows are laid out like the weight's (gated [2, F, r] too), A is [r, in].
void merge_lora(checkpoint::Reader& native, const TensorMapping& m, float scale,
                std::vector<float>& full) {
  const auto names = lora_names(m.native);
  const auto& tensors = native.index().tensors;
  if (scale == 0.0f || names.empty() || !tensors.count(kModelPrefix + names[0])) return;
  const auto& a_shape = tensors.at(kModelPrefix + names[0]).shape;
  const auto& b_shape = tensors.at(kModelPrefix + names[1]).shape;
  MT_INPUT_CHECK(a_shape.size() == 2 && !b_shape.empty(), "checkpoint ", native.index().path,
                 ": bad LoRA adapter shapes for '", m.native, "'");
  const int64_t r = a_shape[0], in = a_shape[1];
  const int64_t out = static_cast<int64_t>(full.size()) / in;
  int64_t b_numel = 1;
  for (int64_t d : b_shape) b_numel *= d;
  MT_INPUT_CHECK(b_shape.back() == r && b_numel == out * r && out * in == int64_t(full.size()),
                 "checkpoint ", native.index().path, ": LoRA adapters of '", m.native,
                 "' do not fit its weight");
  const std::vector<float> a = native.read_whole(kModelPrefix + names[0]);
  const std::vector<float> b = native.read_whole(kModelPrefix + names[1]);
  for (int64_t o = 0; o < out; ++o) {
    float* row = full.data() + o * in;
    for (int64_t k = 0; k < r; ++k) {
      const float c = scale * b[static_cast<size_t>(o * r + k)];
      const float* arow = a.data() + k * in;
      for (int64_t i = 0; i < in; ++i) row[i] += c * arow[i];
    }
  }
}

}  // namespace

void export_to_hf(checkpoint::Reader& native, const ExportRequest& req,
                  const std::string& out_dir) {
  const checkpoint::CheckpointIndex& index = native.index();
  std::set<std::string> mapped;
  std::vector<OutTensor> out;
  for (const TensorMapping& m : req.mappings) {
    m.validate();
    const std::string name = checkpoint_key(m.native);
    const auto it = index.tensors.find(name);
    if (it == index.tensors.end())
      throw InputError(concat("checkpoint ", index.path, " has no tensor '", name,
                              "' (the recipe in its metadata describes a model that has it)"));
    if (it->second.shape != m.native_shape)
      throw InputError(concat("checkpoint ", index.path, ": tensor '", name, "' has shape ",
                              json(it->second.shape).dump(), ", the recipe's model needs ",
                              json(m.native_shape).dump()));
    mapped.insert(name);
    if (req.lora_scale != 0.0f || req.drop_lora)
      for (const std::string& adapter : lora_names(m.native))
        if (index.tensors.count(kModelPrefix + adapter)) mapped.insert(kModelPrefix + adapter);
    for (const HfSource& s : m.sources) {
      const auto [fused, e] = find_expert_slab(req.fused, s.name);
      if (fused == nullptr)
        out.push_back({s.name, s.shape, req.dtype});
      else if (e == 0)
        out.push_back({fused->name, fused->shape(), req.dtype});
    }
  }
  for (const auto& [name, t] : index.tensors)
    if (name.rfind(kModelPrefix, 0) == 0 && !mapped.count(name) &&
        !req.ignored.count(name.substr(std::string(kModelPrefix).size())))
      throw InputError(concat("checkpoint ", index.path, ": tensor '", name,
                              "' has no Hugging Face counterpart in this architecture"));
  HfWriter writer(out_dir, out, req.max_shard_bytes);
  for (const TensorMapping& m : req.mappings) {
    std::vector<float> full = native.read_whole(checkpoint_key(m.native));  // shape checked above
    merge_lora(native, m, req.lora_scale, full);
    const auto sources = m.export_sources(full);
    full = {};
    for (size_t s = 0; s < sources.size(); ++s) {
      const auto [fused, e] = find_expert_slab(req.fused, m.sources[s].name);
      if (fused == nullptr)
        writer.write(m.sources[s].name, sources[s].data());
      else
        writer.write_slab(fused->name, e, fused->experts, sources[s].data());
    }
  }
  for (const auto& [name, contents] : req.files) writer.add_file(name, contents);
  writer.commit();
}

}  // namespace megatron::hf
