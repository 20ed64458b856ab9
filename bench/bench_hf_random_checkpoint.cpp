// Writes a randomly initialised Hugging Face LlamaForCausalLM directory of any size (default
// LLaMA-2-7B's shapes) through the streaming HF writer, for measuring convert_checkpoint's
// memory and speed on a full-size model without downloading one:
//   bench_hf_random_checkpoint OUT_DIR [--layers N] [--hidden D] [--ffn F] [--heads H]
//                              [--kv-heads G] [--vocab V] [--dtype bf16|fp32]
// Values are uniform in [-0.035, 0.035) from a fixed seed; the files are sharded at 5 GB like
// transformers'.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "megatron/hf/hf_directory.h"
#include "megatron/hf/hf_dtype.h"
#include "models/gpt/hf_decoder.h"

int main(int argc, char** argv) {
  using namespace megatron;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: bench_hf_random_checkpoint OUT_DIR [--layers N] [--hidden D] "
                 "[--ffn F] [--heads H] [--kv-heads G] [--vocab V] [--dtype bf16|fp32]\n");
    return 2;
  }
  config::ModelConfig m;
  m.arch = config::Arch::LLaMA;
  m.num_layers = 32, m.hidden_size = 4096, m.ffn_hidden_size = 11008;
  m.num_attention_heads = 32, m.num_query_groups = 32, m.vocab_size = 32000;
  m.seq_length = 4096, m.max_position_embeddings = 4096;
  m.normalization = config::Normalization::RMSNorm;
  m.activation = config::Activation::SwiGLU;
  m.position_embedding = config::PositionEmbedding::Rope;
  m.tie_embeddings = false, m.add_bias = false, m.layernorm_epsilon = 1e-5;
  std::string dtype = "BF16";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (f == "--layers")
      m.num_layers = v;
    else if (f == "--hidden")
      m.hidden_size = v;
    else if (f == "--ffn")
      m.ffn_hidden_size = v;
    else if (f == "--heads")
      m.num_attention_heads = v;
    else if (f == "--kv-heads")
      m.num_query_groups = v;
    else if (f == "--vocab")
      m.vocab_size = v;
    else if (f == "--dtype")
      dtype = hf::dtype_from_flag(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::string arch = "LlamaForCausalLM";
  const auto mappings = models::decoder_mappings(arch, m, m.vocab_size);
  std::vector<hf::OutTensor> tensors;
  int64_t params = 0;
  for (const auto& map : mappings)
    for (const auto& s : map.sources) {
      tensors.push_back({s.name, s.shape, dtype});
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      params += n;
    }
  hf::HfWriter writer(argv[1], tensors, uint64_t{5} << 30);
  uint64_t state = 0x9e3779b97f4a7c15ull;  // xorshift64*: fast enough for billions of values
  auto next = [&]() {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    const uint64_t r = state * 0x2545f4914f6cdd1dull;
    return static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 - 0.5) * 0.07f;
  };
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    for (float& x : data) x = next();
    writer.write(t.name, data.data());
  }
  writer.add_file("config.json",
                  models::decoder_hf_config(m, arch, dtype, nlohmann::json()).dump(2) + "\n");
  writer.commit();
  std::printf("wrote %s: %s, %.2fB parameters in %d files\n", argv[1], arch.c_str(),
              static_cast<double>(params) / 1e9, writer.num_files());
  return 0;
}
