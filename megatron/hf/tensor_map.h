#pragma once
// How one native tensor is made of Hugging Face tensors, as a list of row blocks: the native
// tensor is viewed as rows of its last dimension (a 1-D tensor as rows of one element), each
// source likewise (after a transpose for GPT-2's Conv1D weights, which HF stores [in, out]), and
// the native rows are, in order, row ranges of the sources or zero rows (vocabulary padding).
// That one description covers every layout change the converters need (a fused QKV weight
// interleaved per query group from separate q/k/v or from GPT-2's [q|k|v], SwiGLU's gate and
// up stacked, padded vocabulary tables, plain copies and transposes), and runs both ways:
// import builds the native tensor, export cuts the sources back out, exactly.
#include <cstdint>
#include <string>
#include <vector>

namespace megatron::hf {

struct HfSource {
  std::string name;
  std::vector<int64_t> shape;  // as stored in the HF file
  bool transposed = false;     // a 2-D tensor stored as the transpose of its rows
};

struct RowBlock {
  int source = -1;  // index into TensorMapping::sources; -1: zero rows (padding)
  int64_t row = 0, rows = 0;
};

struct TensorMapping {
  std::string native;                 // native parameter name, e.g. "layers.0.attention.qkv.weight"
  std::vector<int64_t> native_shape;  // global shape
  std::vector<HfSource> sources;
  std::vector<RowBlock> blocks;

  int64_t width() const;        // elements per row
  int64_t native_rows() const;  // native numel / width
  int64_t source_rows(int s) const;
  // Checks the blocks tile the native rows and use every source row exactly once; Error naming
  // the mapping otherwise (a converter bug, not bad input).
  void validate() const;
  // sources[s] holds source s's elements as stored (fp32).
  std::vector<float> import(const std::vector<std::vector<float>>& sources) const;
  // Source s's elements as stored, cut from the native tensor.
  std::vector<std::vector<float>> export_sources(const std::vector<float>& native) const;
};

// ---- the mappings converters use ----------------------------------------------------------

// native == source, same elements (shapes may differ only in how they are written, e.g. a
// router [E, D]).
TensorMapping copy_mapping(std::string native, std::vector<int64_t> shape, std::string hf);
// native [out, in] == transpose of the HF [in, out] (GPT-2's Conv1D).
TensorMapping transpose_mapping(std::string native, std::vector<int64_t> native_shape,
                                std::string hf);
// native [padded_rows, ...] == the HF [rows, ...] followed by zero rows.
TensorMapping padded_rows_mapping(std::string native, std::vector<int64_t> native_shape,
                                  std::string hf, int64_t rows);
// native rows = the sources' rows one after another (SwiGLU [2, F, D] from gate and up).
TensorMapping stacked_mapping(std::string native, std::vector<int64_t> native_shape,
                              std::vector<HfSource> sources);
// Fused QKV, rows grouped per query group [G, H/G + 2, Dh] (x width): from separate q [H*Dh],
// k [G*Dh], v [G*Dh] row sources (weights or biases), or from one [q|k|v] source (GPT-2,
// `fused`, possibly transposed).
TensorMapping qkv_mapping(std::string native, std::vector<int64_t> native_shape,
                          std::vector<HfSource> q_k_v, int64_t heads, int64_t groups,
                          int64_t head_dim);
TensorMapping fused_qkv_mapping(std::string native, std::vector<int64_t> native_shape, HfSource qkv,
                                int64_t heads, int64_t groups, int64_t head_dim);

}  // namespace megatron::hf
