#pragma once
// MXFP4 weights (GPT-OSS's released expert tensors; OCP microscaling): a weight's rows are split
// in groups of 32 FP4 (e2m1) values sharing one E8M0 scale. `<name>_blocks` [..., rows, G, 16]
// uint8 holds two values a byte, the low nibble first; `<name>_scales` [..., rows, G] uint8 holds
// exponent + 127. Value = e2m1[nibble] * 2^(scale - 127). (transformers' dequantization then
// transposes GPT-OSS's [E, out, in] result to its [E, in, out] parameters: the importer's
// business, not this.) The arithmetic is exact in fp32 for every scale but the largest.
#include <cstdint>
#include <string>
#include <vector>

namespace megatron::hf {

// The 16 e2m1 values: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (-0 first).
float fp4_e2m1_to_float(uint8_t nibble);

// blocks [rows, groups, 16], scales [rows, groups] -> out [rows, groups * 32].
void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups,
                      float* out);

// InputError naming the tensors unless blocks is [..., G, 16] and scales is blocks' shape
// without its last dimension. Returns (rows: the product of the leading dimensions, G).
std::pair<int64_t, int64_t> check_mxfp4_shapes(const std::string& blocks_name,
                                               const std::vector<int64_t>& blocks_shape,
                                               const std::string& scales_name,
                                               const std::vector<int64_t>& scales_shape);

}  // namespace megatron::hf
