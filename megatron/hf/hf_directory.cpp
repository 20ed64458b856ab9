#include "megatron/hf/hf_directory.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/finite.h"
#include "megatron/hf/hf_dtype.h"

namespace megatron::hf {

namespace fs = std::filesystem;
namespace st = checkpoint::safetensors;
using json = nlohmann::json;

namespace {

std::string shape_text(const std::vector<int64_t>& s) { return json(s).dump(); }

bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

}  // namespace

HfTensors::HfTensors(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(concat("Hugging Face directory ", dir, " does not exist"));
  const fs::path single = fs::path(dir) / kSingleFile, index = fs::path(dir) / kIndexFile;
  std::vector<std::string> names;
  json weight_map;
  if (fs::exists(index, ec)) {
    const std::string path = index.string();
    json j;
    try {
      j = json::parse(checkpoint::io::read_file(path));
    } catch (const json::exception& e) {
      throw InputError(concat(path, ": invalid JSON: ", e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw InputError(concat(path, ": no \"weight_map\" object"));
    weight_map = j["weight_map"];
    std::set<std::string> files;
    for (const auto& [tensor, file] : weight_map.items()) {
      if (!file.is_string() || !plain_file_name(file.get<std::string>()))
        throw InputError(concat(path, ": weight_map[\"", tensor, "\"] is not a file name in ", dir,
                                " (got ", file.dump(), ")"));
      files.insert(file.get<std::string>());
    }
    if (files.empty()) throw InputError(concat(path, ": weight_map is empty"));
    names.assign(files.begin(), files.end());
  } else if (fs::exists(single, ec)) {
    names.push_back(kSingleFile);
  } else {
    const bool pickle = fs::exists(fs::path(dir) / "pytorch_model.bin", ec) ||
                        fs::exists(fs::path(dir) / "pytorch_model.bin.index.json", ec);
    throw InputError(
        concat("Hugging Face directory ", dir, " has neither ", kSingleFile, " nor ", kIndexFile,
               pickle ? " (pytorch_model.bin, a PyTorch pickle, is not read: save the model with "
                        "safetensors, e.g. transformers' save_pretrained, first)"
                      : ""));
  }
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::is_regular_file(path, ec))
      throw InputError(concat(index.string(), " names ", name, ", which is not a file in ", dir));
    files_.emplace_back(path);
  }
  for (size_t f = 0; f < files_.size(); ++f)
    for (const st::TensorInfo& t : files_[f].tensors()) {
      const auto [it, fresh] = where_.emplace(t.name, std::make_pair(f, &t));
      if (!fresh)
        throw InputError(concat("tensor '", t.name, "' is in both ",
                                files_[it->second.first].path(), " and ", files_[f].path()));
      if (!weight_map.is_null()) {
        if (!weight_map.contains(t.name))
          throw InputError(
              concat(files_[f].path(), ": tensor '", t.name, "' is not in ", index.string()));
        if (weight_map[t.name].get<std::string>() != names[f])
          throw InputError(concat(index.string(), " puts tensor '", t.name, "' in ",
                                  weight_map[t.name].get<std::string>(), ", but it is in ",
                                  files_[f].path()));
      }
    }
  if (!weight_map.is_null())
    for (const auto& [tensor, file] : weight_map.items())
      if (!where_.count(tensor))
        throw InputError(concat(index.string(), " lists tensor '", tensor, "' in ",
                                file.get<std::string>(), ", which does not hold it"));
}

std::vector<std::string> HfTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, w] : where_) out.push_back(name);
  return out;
}

const st::TensorInfo& HfTensors::info(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end())
    throw InputError(concat("Hugging Face checkpoint ", dir_, " has no tensor '", name, "'"));
  return *it->second.second;
}

const std::string& HfTensors::file_of(const std::string& name) const {
  info(name);
  return files_[where_.at(name).first].path();
}

bool HfTensors::fp8_quantized(const std::string& name) const {
  return fp8_.enabled() && has(name) && info(name).dtype == "F8_E4M3";
}

std::string HfTensors::unreadable(const std::string& name) const {
  const std::string& dtype = info(name).dtype;
  if (float_dtype(dtype) || fp8_quantized(name)) return "";
  return concat("dtype ", dtype,
                " (F32, BF16 or F16 convert; F8_E4M3 with the block scales of a "
                "quantization_config)");
}

std::vector<std::string> HfTensors::companions(const std::string& name) const {
  if (!fp8_quantized(name)) return {};
  return {fp8_scale_name(name)};
}

std::vector<float> HfTensors::read_elements(const std::string& name) const {
  const st::TensorInfo& t = info(name);
  const st::File& file = files_[where_.at(name).first];
  std::vector<float> out(static_cast<size_t>(t.numel()));
  // In chunks, so the raw bytes never need a second full-size buffer.
  constexpr int64_t kChunk = int64_t{1} << 22;
  std::vector<char> raw(static_cast<size_t>(std::min(t.numel(), kChunk)) * t.element_size);
  for (int64_t at = 0; at < t.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, t.numel() - at);
    file.read_bytes(t, static_cast<uint64_t>(at) * t.element_size,
                    static_cast<uint64_t>(n) * t.element_size, raw.data());
    if (t.dtype == "F8_E4M3")
      for (int64_t i = 0; i < n; ++i)
        out[size_t(at + i)] = fp8_e4m3_to_float(static_cast<uint8_t>(raw[size_t(i)]));
    else
      to_float(t.dtype, raw.data(), out.data() + at, n);
  }
  return out;
}

std::vector<float> HfTensors::dequantized(const std::string& name,
                                          const std::vector<int64_t>& shape) const {
  const std::string& path = file_of(name);
  const std::string scale = fp8_scale_name(name);
  if (shape.size() != 2)
    throw InputError(concat(path, ": tensor '", name, "' is F8_E4M3 but not a 2-D weight"));
  if (!has(scale)) throw InputError(concat(path, ": FP8 tensor '", name, "' has no '", scale, "'"));
  const std::vector<int64_t> want = {(shape[0] + fp8_.rows - 1) / fp8_.rows,
                                     (shape[1] + fp8_.cols - 1) / fp8_.cols};
  if (info(scale).shape != want || !float_dtype(info(scale).dtype))
    throw InputError(concat(
        file_of(scale), ": tensor '", scale, "' has shape ", shape_text(info(scale).shape),
        " and dtype ", info(scale).dtype, "; the weight_block_size [", fp8_.rows, ", ", fp8_.cols,
        "] of ", shape_text(shape), " needs ", shape_text(want), " in F32, BF16 or F16"));
  std::vector<float> w = read_elements(name);
  apply_fp8_block_scales(w, shape[0], shape[1], read_elements(scale), fp8_);
  return w;
}

std::vector<float> HfTensors::read(const std::string& name,
                                   const std::vector<int64_t>& shape) const {
  const st::TensorInfo& t = info(name);
  const st::File& file = files_[where_.at(name).first];
  if (t.shape != shape)
    throw InputError(concat(file.path(), ": tensor '", name, "' has shape ", shape_text(t.shape),
                            ", the model needs ", shape_text(shape)));
  if (!float_dtype(t.dtype) && !fp8_quantized(name))
    throw InputError(concat(file.path(), ": tensor '", name, "' has dtype ", t.dtype,
                            t.dtype == "F8_E4M3"
                                ? " without a block-quantized quantization_config in config.json"
                                : " (F32, BF16 or F16 convert)"));
  std::vector<float> out = fp8_quantized(name) ? dequantized(name, shape) : read_elements(name);
  // A NaN or inf weight would import silently and decode garbage (token 0 over and over); the
  // scan costs little next to the read.
  if (const int64_t bad = count_non_finite(out.data(), t.numel()); bad > 0)
    throw InputError(concat(file.path(), ": tensor '", name, "' holds ", non_finite_text(bad),
                            " of ", t.numel(),
                            "; the checkpoint is damaged or was saved after a diverged step"));
  return out;
}

namespace {
// The byte range of slab `index` of `count` along t's first dimension.
std::pair<uint64_t, uint64_t> slab_bytes(const std::string& path, const st::TensorInfo& t,
                                         int64_t index, int64_t count) {
  if (t.shape.empty() || count <= 0 || t.shape[0] % count != 0 || index < 0 || index >= count)
    throw InputError(concat(path, ": tensor '", t.name, "' of shape ", shape_text(t.shape),
                            " cannot be cut into ", count, " slabs along its first dimension"));
  const uint64_t per = t.nbytes() / static_cast<uint64_t>(count);
  return {per * static_cast<uint64_t>(index), per};
}
}  // namespace

std::vector<float> HfTensors::read_slab(const std::string& name, int64_t index,
                                        int64_t count) const {
  const st::TensorInfo& t = info(name);
  const st::File& file = files_[where_.at(name).first];
  if (!float_dtype(t.dtype))
    throw InputError(concat(file.path(), ": tensor '", name, "' has dtype ", t.dtype,
                            " (F32, BF16 or F16 convert)"));
  const auto [offset, bytes] = slab_bytes(file.path(), t, index, count);
  const int64_t n = static_cast<int64_t>(bytes / t.element_size);
  std::vector<char> raw(bytes);
  file.read_bytes(t, offset, bytes, raw.data());
  std::vector<float> out(static_cast<size_t>(n));
  to_float(t.dtype, raw.data(), out.data(), n);
  if (const int64_t bad = count_non_finite(out.data(), n); bad > 0)
    throw InputError(concat(file.path(), ": tensor '", name, "' holds ", non_finite_text(bad),
                            " in slab ", index, " of ", count,
                            "; the checkpoint is damaged or was saved after a diverged step"));
  return out;
}

std::vector<uint8_t> HfTensors::read_slab_bytes(const std::string& name, int64_t index,
                                                int64_t count) const {
  const st::TensorInfo& t = info(name);
  const st::File& file = files_[where_.at(name).first];
  if (t.dtype != "U8")
    throw InputError(concat(file.path(), ": tensor '", name, "' has dtype ", t.dtype,
                            " (MXFP4 blocks and scales are U8)"));
  const auto [offset, bytes] = slab_bytes(file.path(), t, index, count);
  std::vector<uint8_t> out(bytes);
  file.read_bytes(t, offset, bytes, out.data());
  return out;
}

std::string HfTensors::common_dtype() const {
  std::map<std::string, uint64_t> bytes;
  for (const auto& [name, w] : where_) bytes[w.second->dtype] += w.second->nbytes();
  std::string best = "F32";
  uint64_t most = 0;
  for (const auto& [d, n] : bytes)
    if (n > most && float_dtype(d)) best = d, most = n;
  return best;
}

// ---- writer ------------------------------------------------------------------------------

HfWriter::HfWriter(std::string dir, std::vector<OutTensor> tensors, uint64_t max_shard_bytes,
                   const std::string& single_file)
    : dir_(std::move(dir)) {
  std::error_code ec;
  fs::path normal = fs::path(dir_).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();
  dir_ = normal.string();
  if (fs::exists(dir_, ec) && !(fs::is_directory(dir_, ec) && fs::is_empty(dir_, ec)))
    throw InputError(concat("output directory ", dir_,
                            " already exists and is not empty (nothing is overwritten: remove "
                            "it or choose another)"));
  tmp_ = concat(dir_, ".tmp-", ::getpid());
  fs::remove_all(tmp_, ec);
  fs::create_directories(tmp_, ec);
  if (ec) throw Error(concat("cannot create ", tmp_, ": ", ec.message()));
  // Shards: tensors in the given order, a new file when the next would pass the limit.
  std::vector<st::Writer> layouts(1);
  uint64_t in_file = 0;
  for (const OutTensor& t : tensors) {
    const auto esize = st::dtype_size(t.dtype);
    MT_CHECK(esize && float_dtype(t.dtype), "HfWriter: dtype ", t.dtype, " of ", t.name);
    uint64_t bytes = *esize;
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (in_file > 0 && in_file + bytes > max_shard_bytes) layouts.emplace_back(), in_file = 0;
    MT_CHECK(!where_.count(t.name), "HfWriter: tensor ", t.name, " twice");
    where_[t.name] = {layouts.size() - 1, layouts.back().size()};
    layouts.back().add({t.name, t.dtype, t.shape, nullptr});
    in_file += bytes;
  }
  const size_t n = layouts.size();
  MT_CHECK(n == 1 || single_file == kSingleFile, "HfWriter: ", single_file, " cannot be sharded");
  for (size_t f = 0; f < n; ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, n);
    file_names_.push_back(n == 1 ? single_file : std::string(name));
    layouts[f].set_metadata("format", "pt");
    streams_.push_back(std::make_unique<st::StreamWriter>(
        std::move(layouts[f]), (fs::path(tmp_) / file_names_.back()).string()));
  }
}

HfWriter::~HfWriter() {
  if (committed_) return;
  streams_.clear();
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void HfWriter::write(const std::string& name, const float* data) { write_slab(name, 0, 1, data); }

void HfWriter::write_slab(const std::string& name, int64_t index, int64_t count,
                          const float* data) {
  const auto it = where_.find(name);
  MT_CHECK(it != where_.end(), "HfWriter: no tensor ", name);
  const auto [f, e] = it->second;
  const auto [begin, end] = streams_[f]->layout().data_offsets(e);
  const std::string& dtype = streams_[f]->layout().dtype_of(e);
  const uint64_t esize = *st::dtype_size(dtype);
  const int64_t total = static_cast<int64_t>((end - begin) / esize);
  MT_CHECK(count > 0 && total % count == 0 && index >= 0 && index < count, "HfWriter: slab ", index,
           " of ", count, " of ", name);
  const int64_t numel = total / count, first = index * numel;
  constexpr int64_t kChunk = int64_t{1} << 22;
  std::vector<char> raw(static_cast<size_t>(std::min(numel, kChunk) * esize));
  for (int64_t at = 0; at < numel; at += kChunk) {
    const int64_t m = std::min(kChunk, numel - at);
    from_float(dtype, data + at, raw.data(), m);
    streams_[f]->write_at(e, static_cast<uint64_t>(first + at) * esize, raw.data(),
                          static_cast<uint64_t>(m) * esize);
  }
}

void HfWriter::add_file(const std::string& name, const std::string& contents) {
  MT_CHECK(plain_file_name(name), "HfWriter: file name ", name);
  const std::string path = (fs::path(tmp_) / name).string();
  checkpoint::io::Fd fd = checkpoint::io::open_for_write(path);
  checkpoint::io::write_all(fd.get(), contents.data(), contents.size(), path);
  checkpoint::io::fsync_fd(fd.get(), path);
  fd.close(path);
}

void HfWriter::commit() {
  uint64_t total = 0;
  for (auto& s : streams_) {
    s->finish(/*sync=*/true);
    total += s->layout().data_offsets(s->layout().size() - 1).second;
  }
  if (streams_.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                    {"weight_map", nlohmann::ordered_json::object()}};
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& [name, fe] : where_) entries.emplace_back(name, file_names_[fe.first]);
    for (const auto& [name, file] : entries) index["weight_map"][name] = file;
    add_file(kIndexFile, index.dump(2) + "\n");
  }
  checkpoint::io::fsync_dir(tmp_);
  std::error_code ec;
  if (fs::exists(dir_, ec)) fs::remove(dir_, ec);  // the empty directory checked at the start
  if (::rename(tmp_.c_str(), dir_.c_str()) != 0)
    throw Error(concat("renaming ", tmp_, " to ", dir_, ": ", checkpoint::io::errno_text(errno)));
  fs::path parent = fs::path(dir_).parent_path();
  checkpoint::io::fsync_dir(parent.empty() ? std::string(".") : parent.string());
  committed_ = true;
}

}  // namespace megatron::hf
