#pragma once
// The Hugging Face tokenizer files of a model trained here, for its export (convert_checkpoint
// --to-hf), so that transformers' AutoTokenizer loads the exported directory and gives the ids
// the model was trained on:
//   SentencePieceTokenizer  the model file as tokenizer.model, with a tokenizer_config.json for
//                           LlamaTokenizer (its <unk>/<s>/</s> pieces, the end-of-document piece
//                           as eos_token, add_prefix_space as the model's add_dummy_prefix, no
//                           automatic BOS/EOS, legacy false)
//   GPT2BPETokenizer        vocab.json and merges.txt, with a tokenizer_config.json for
//                           GPT2Tokenizer (<|endoftext|> as bos/eos/unk)
// Files are name -> bytes. InputError naming the file when one cannot be read.
#include <map>
#include <string>

namespace megatron::data {

std::map<std::string, std::string> sentencepiece_hf_files(const std::string& model_path);
std::map<std::string, std::string> gpt2_hf_files(const std::string& vocab_path,
                                                 const std::string& merges_path);

}  // namespace megatron::data
