#pragma once
// Block-quantized FP8 weights (DeepSeek-V3's released checkpoints; config.json
// quantization_config {quant_method: fp8, fmt: e4m3, weight_block_size: [br, bc]}): a weight W
// [rows, cols] is stored as F8_E4M3 values q with `<name>_scale_inv` [ceil(rows / br),
// ceil(cols / bc)], and W[i, j] = q[i, j] * scale_inv[i / br, j / bc]. The importer dequantizes
// each tensor as it streams it (hf_directory.h), so peak memory stays that of one tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "megatron/hf/hf_config.h"

namespace megatron::hf {

struct Fp8Blocks {
  int64_t rows = 0, cols = 0;  // block size; 0: no quantized weights
  bool enabled() const { return rows > 0; }
};

// From config.json's quantization_config (absent: none); InputError naming the key for another
// method, format or block shape.
Fp8Blocks fp8_blocks_of(const ConfigJson& config);

// The scale tensor of a quantized weight.
inline std::string fp8_scale_name(const std::string& weight) { return weight + "_scale_inv"; }

// IEEE-like e4m3 ("fn": no infinities, S.1111.111 is NaN) to float, exactly.
float fp8_e4m3_to_float(uint8_t bits);

// w [rows, cols] (decoded e4m3 values, in place) times the scale of its block; scale
// [ceil(rows / br), ceil(cols / bc)].
void apply_fp8_block_scales(std::vector<float>& w, int64_t rows, int64_t cols,
                            const std::vector<float>& scale, const Fp8Blocks& blocks);

}  // namespace megatron::hf
