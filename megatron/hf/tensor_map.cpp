#include "megatron/hf/tensor_map.h"

#include <algorithm>
#include <cstring>

#include "megatron/core/error.h"

namespace megatron::hf {

namespace {

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Source s viewed as rows of `width`, in native orientation.
std::vector<float> oriented(const HfSource& src, const std::vector<float>& data) {
  if (!src.transposed) return data;
  const int64_t r = src.shape[0], c = src.shape[1];  // stored [r, c]; rows are its columns
  std::vector<float> out(data.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * r + i] = data[i * c + j];
  return out;
}

std::vector<float> stored(const HfSource& src, const std::vector<float>& rows) {
  if (!src.transposed) return rows;
  const int64_t r = src.shape[0], c = src.shape[1];
  std::vector<float> out(rows.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = rows[j * r + i];
  return out;
}

}  // namespace

int64_t TensorMapping::width() const { return native_shape.size() >= 2 ? native_shape.back() : 1; }
int64_t TensorMapping::native_rows() const { return numel(native_shape) / width(); }
int64_t TensorMapping::source_rows(int s) const {
  return numel(sources.at(static_cast<size_t>(s)).shape) / width();
}

void TensorMapping::validate() const {
  auto fail = [&](const auto&... parts) {
    return Error(concat("mapping of ", native, ": ", parts...));
  };
  const int64_t w = width();
  if (w <= 0 || numel(native_shape) % w) throw fail("bad native shape");
  std::vector<std::vector<int64_t>> used(sources.size());
  int64_t rows = 0;
  for (const HfSource& s : sources) {
    if (numel(s.shape) % w) throw fail("source ", s.name, " is not whole rows of ", w);
    if (s.transposed && (s.shape.size() != 2 || s.shape[0] != w))
      throw fail("transposed source ", s.name, " must be [", w, ", rows]");
  }
  for (const RowBlock& b : blocks) {
    if (b.rows < 0) throw fail("negative block");
    if (b.source >= 0) {
      if (static_cast<size_t>(b.source) >= sources.size()) throw fail("bad source index");
      if (b.row < 0 || b.row + b.rows > source_rows(b.source)) throw fail("block out of range");
      for (int64_t r = b.row; r < b.row + b.rows; ++r) used[b.source].push_back(r);
    }
    rows += b.rows;
  }
  if (rows != native_rows()) throw fail("blocks cover ", rows, " of ", native_rows(), " rows");
  for (size_t s = 0; s < sources.size(); ++s) {
    auto& u = used[s];
    std::sort(u.begin(), u.end());
    if (static_cast<int64_t>(u.size()) != source_rows(static_cast<int>(s)) ||
        std::adjacent_find(u.begin(), u.end()) != u.end())
      throw fail("source ", sources[s].name, " rows are not each used once");
  }
}

std::vector<float> TensorMapping::import(const std::vector<std::vector<float>>& data) const {
  MT_CHECK(data.size() == sources.size(), "mapping of ", native, ": ", data.size(), " sources");
  const int64_t w = width();
  // Only transposed sources get a reoriented copy; the others are read in place (the import's
  // memory is the sources plus the native tensor).
  std::vector<std::vector<float>> transposed(sources.size());
  std::vector<const float*> rows(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    MT_CHECK(static_cast<int64_t>(data[s].size()) == numel(sources[s].shape), "mapping of ", native,
             ": source ", sources[s].name, " size");
    if (sources[s].transposed) transposed[s] = oriented(sources[s], data[s]);
    rows[s] = sources[s].transposed ? transposed[s].data() : data[s].data();
  }
  std::vector<float> out(static_cast<size_t>(numel(native_shape)), 0.0f);
  int64_t at = 0;
  for (const RowBlock& b : blocks) {
    if (b.source >= 0)
      std::memcpy(out.data() + at * w, rows[b.source] + b.row * w,
                  static_cast<size_t>(b.rows * w) * sizeof(float));
    at += b.rows;
  }
  return out;
}

std::vector<std::vector<float>> TensorMapping::export_sources(
    const std::vector<float>& native_data) const {
  MT_CHECK(static_cast<int64_t>(native_data.size()) == numel(native_shape), "mapping of ", native,
           ": native size");
  const int64_t w = width();
  std::vector<std::vector<float>> rows(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) rows[s].resize(numel(sources[s].shape));
  int64_t at = 0;
  for (const RowBlock& b : blocks) {
    if (b.source >= 0)
      std::memcpy(rows[b.source].data() + b.row * w, native_data.data() + at * w,
                  static_cast<size_t>(b.rows * w) * sizeof(float));
    at += b.rows;
  }
  for (size_t s = 0; s < sources.size(); ++s)
    if (sources[s].transposed) rows[s] = stored(sources[s], rows[s]);
  return rows;
}

TensorMapping copy_mapping(std::string native, std::vector<int64_t> shape, std::string hf) {
  TensorMapping m{std::move(native), shape, {{std::move(hf), shape, false}}, {}};
  m.blocks = {{0, 0, m.native_rows()}};
  return m;
}

TensorMapping transpose_mapping(std::string native, std::vector<int64_t> native_shape,
                                std::string hf) {
  MT_CHECK(native_shape.size() == 2, "transpose_mapping of ", native, ": 2-D only");
  TensorMapping m{std::move(native),
                  native_shape,
                  {{std::move(hf), {native_shape[1], native_shape[0]}, true}},
                  {}};
  m.blocks = {{0, 0, native_shape[0]}};
  return m;
}

TensorMapping padded_rows_mapping(std::string native, std::vector<int64_t> native_shape,
                                  std::string hf, int64_t rows) {
  std::vector<int64_t> src_shape = native_shape;
  src_shape[0] = rows;
  TensorMapping m{std::move(native), native_shape, {{std::move(hf), src_shape, false}}, {}};
  const int64_t per = m.native_rows() / native_shape[0];  // rows of width per first-dim entry
  m.blocks = {{0, 0, rows * per}};
  if (native_shape[0] > rows) m.blocks.push_back({-1, 0, (native_shape[0] - rows) * per});
  return m;
}

TensorMapping stacked_mapping(std::string native, std::vector<int64_t> native_shape,
                              std::vector<HfSource> sources) {
  TensorMapping m{std::move(native), std::move(native_shape), std::move(sources), {}};
  for (size_t s = 0; s < m.sources.size(); ++s)
    m.blocks.push_back({static_cast<int>(s), 0, m.source_rows(static_cast<int>(s))});
  return m;
}

TensorMapping qkv_mapping(std::string native, std::vector<int64_t> native_shape,
                          std::vector<HfSource> q_k_v, int64_t heads, int64_t groups,
                          int64_t head_dim) {
  MT_CHECK(q_k_v.size() == 3 && groups > 0 && heads % groups == 0, "qkv_mapping of ", native);
  TensorMapping m{std::move(native), std::move(native_shape), std::move(q_k_v), {}};
  const int64_t per = heads / groups;
  for (int64_t g = 0; g < groups; ++g) {
    m.blocks.push_back({0, g * per * head_dim, per * head_dim});
    m.blocks.push_back({1, g * head_dim, head_dim});
    m.blocks.push_back({2, g * head_dim, head_dim});
  }
  return m;
}

TensorMapping fused_qkv_mapping(std::string native, std::vector<int64_t> native_shape, HfSource qkv,
                                int64_t heads, int64_t groups, int64_t head_dim) {
  MT_CHECK(groups > 0 && heads % groups == 0, "fused_qkv_mapping of ", native);
  TensorMapping m{std::move(native), std::move(native_shape), {std::move(qkv)}, {}};
  const int64_t per = heads / groups, k0 = heads * head_dim, v0 = k0 + groups * head_dim;
  for (int64_t g = 0; g < groups; ++g) {
    m.blocks.push_back({0, g * per * head_dim, per * head_dim});
    m.blocks.push_back({0, k0 + g * head_dim, head_dim});
    m.blocks.push_back({0, v0 + g * head_dim, head_dim});
  }
  return m;
}

}  // namespace megatron::hf
