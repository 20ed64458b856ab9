#pragma once
// A Hugging Face model directory's weights: `model.safetensors`, or the shards
// `model-0000k-of-0000n.safetensors` named by `model.safetensors.index.json` ("weight_map":
// tensor name -> file). The reader opens and validates every file (safetensors.h treats each as
// hostile), checks the index against the files (every listed tensor in its file, no tensor
// twice, no file unlisted), and reads one tensor at a time converted to fp32. The writer lays
// the tensors out into shards of bounded size, streams them in any order, and commits the
// directory atomically: everything is written into DIR.tmp-<id>/ and renamed to DIR only when
// complete, so an error or a crash never leaves a DIR that looks converted.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "megatron/checkpoint/safetensors.h"
#include "megatron/hf/fp8_blocks.h"
#include "megatron/hf/tensor_source.h"

namespace megatron::hf {

inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";

class HfTensors : public TensorSource {
 public:
  explicit HfTensors(const std::string& dir);  // InputError naming the directory/file
  const std::string& dir() const { return dir_; }
  std::string description() const override { return "Hugging Face checkpoint " + dir_; }
  std::vector<std::string> names() const override;  // sorted
  bool has(const std::string& name) const override { return where_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const override { return info(name).shape; }
  std::string where(const std::string& name) const override { return file_of(name); }
  std::string unreadable(const std::string& name) const override;
  std::vector<std::string> companions(const std::string& name) const override;
  const checkpoint::safetensors::TensorInfo& info(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;  // full path
  // The tensor in fp32; its shape must be `shape` (InputError naming file, tensor and both
  // shapes) and its dtype F32, BF16 or F16, or F8_E4M3 with block scales (set_fp8_blocks:
  // dequantized by its `<name>_scale_inv`, fp8_blocks.h).
  std::vector<float> read(const std::string& name,
                          const std::vector<int64_t>& shape) const override;
  // Slab `index` of `count` equal slabs along the first dimension (one expert of a fused
  // [experts, ...] tensor) without reading the rest: in fp32 (F32, BF16, F16; non-finite values
  // refused as read() does), or as raw bytes (U8: MXFP4 blocks and scales).
  std::vector<float> read_slab(const std::string& name, int64_t index, int64_t count) const;
  std::vector<uint8_t> read_slab_bytes(const std::string& name, int64_t index, int64_t count) const;
  // config.json's block-quantized FP8 weights (quantization_config), which read() dequantizes.
  void set_fp8_blocks(const Fp8Blocks& blocks) { fp8_ = blocks; }
  // Whether `name` is an FP8 weight read() dequantizes (its scale tensor is then part of it).
  bool fp8_quantized(const std::string& name) const;
  // The dtype most tensors have (what an export keeps by default).
  std::string common_dtype() const;

 private:
  // The raw elements of tensor t (of `file`) in fp32, in chunks.
  std::vector<float> read_elements(const std::string& name) const;
  std::vector<float> dequantized(const std::string& name, const std::vector<int64_t>& shape) const;

  std::string dir_;
  Fp8Blocks fp8_;
  std::vector<checkpoint::safetensors::File> files_;
  std::map<std::string, std::pair<size_t, const checkpoint::safetensors::TensorInfo*>> where_;
};

struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "F32";
};

class HfWriter {
 public:
  // Refuses an existing non-empty `dir` (nothing already saved is overwritten). Tensors go into
  // files of at most max_shard_bytes each (a tensor larger than that gets a file of its own);
  // one file is named model.safetensors, several model-0000k-of-0000n.safetensors with the index.
  // single_file: the name of a one-file directory's weights (a PEFT adapter's
  // adapter_model.safetensors); only model.safetensors may be sharded.
  HfWriter(std::string dir, std::vector<OutTensor> tensors, uint64_t max_shard_bytes,
           const std::string& single_file = "model.safetensors");
  ~HfWriter();  // removes the temporary directory unless commit() ran
  HfWriter(const HfWriter&) = delete;
  HfWriter& operator=(const HfWriter&) = delete;

  // The tensor's elements (fp32, converted to its dtype on the way, in bounded chunks).
  void write(const std::string& name, const float* data);
  // Slab `index` of `count` equal slabs along the first dimension (one expert of a fused tensor).
  void write_slab(const std::string& name, int64_t index, int64_t count, const float* data);
  // Another file of the directory (config.json, ...).
  void add_file(const std::string& name, const std::string& contents);
  // Checks every tensor was written whole (StreamWriter::finish), writes the index, fsyncs and
  // renames into place.
  void commit();
  int num_files() const { return static_cast<int>(streams_.size()); }

 private:
  std::string dir_, tmp_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (file, entry)
  std::vector<std::string> file_names_;
  std::vector<std::unique_ptr<checkpoint::safetensors::StreamWriter>> streams_;
  bool committed_ = false;
};

}  // namespace megatron::hf
