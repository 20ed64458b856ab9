// generate: continues a prompt with a trained or converted decoder.
//   generate --checkpoint DIR|HF_DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]
// Under mpirun -np N the model is split over N tensor-parallel ranks (rank 0 prints); with
// --device cuda each rank uses the GPU of its node-local rank and tp collectives go over NCCL.
// Exit codes: 0 ok, 1 bad input, 2 usage.
#include "megatron/inference/generate.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/sft_dataset.h"
#include "data/tokenizer.h"
#include "kernels/cpu/cpu_features.h"
#include "megatron/backend/device_backends.h"
#include "megatron/core/error.h"
#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"
#include "megatron/training/pretrained.h"
#include "models/hf_checkpoint.h"
#include "tools/cli_flags.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;

constexpr const char* kUsage =
    R"(usage: generate --checkpoint DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]
  --checkpoint DIR      a native checkpoint (its root or one iter_NNNNNNN) or a Hugging Face
                        directory (config.json + safetensors; converted on the fly)
  --iteration N         a native checkpoint's iteration instead of its latest
  --prompt TEXT         text, encoded with the checkpoint's tokenizer (its recipe's
                        data.tokenizer; --tokenizer-model/--vocab-file/--merge-file override);
                        a Hugging Face tokenizer puts its BOS first, as transformers does
  --prompt-ids IDS      token ids, comma-separated, used as given (BOS included if wanted)
  --max-new-tokens N    tokens to generate (default 32)
  --temperature T       0 (default): greedy; > 0: sample from softmax(logits / T)
  --top-k K             sample among the K most likely tokens (0: all)
  --top-p P             sample among the most likely tokens holding mass P (default 1)
  --seed S              sampling seed (default 1234)
  --stop-id ID          stop after generating this id (repeatable)
  --chat-template NAME  wrap --prompt as a user message in this chat template (simple, plain,
                        llama2, llama3, chatml, qwen3, gemma, phi3; data/chat_template.h) and
                        stop at the end of the assistant's turn
  --prompts-file F      evaluate a JSONL file of conversations ({"prompt", "response"} or
                        {"messages"} ending with the assistant's answer): greedy answers to
                        each, printed beside the expected ones, then the exact-match rate
                        (--chat-template defaults to simple; --show N prints N, default 10)
  --print-ids           print the generated ids on one line, space-separated
  --no-cache            recompute the whole sequence every step (no KV cache; for checking)
  --device D            cpu (default) or cuda: weights, activations and KV caches on the GPU
                        of this rank's node-local rank (a CUDA build and a visible GPU needed)
  --tokenizer-type T, --tokenizer-model F, --vocab-file F, --merge-file F
                        the tokenizer for --prompt and for printing text
Prints the continuation (text when a tokenizer is known), then tokens/s on stderr.
)";

struct Args {
  std::string checkpoint, prompt, prompt_ids, tokenizer_model, vocab_file, merge_file,
      chat_template, prompts_file;
  std::optional<config::TokenizerType> tokenizer_type;  // else the checkpoint recipe's
  int64_t show = 10;
  std::optional<int64_t> iteration;
  inference::SamplingOptions sampling;
  bool print_ids = false, have_prompt = false;
  Device device = Device::CPU;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "generate: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  tools::FlagReader flags("generate", kUsage, argc, argv);
  while (flags.next()) {
    const std::string& f = flags.flag();
    if (f == "--checkpoint")
      a.checkpoint = flags.value();
    else if (f == "--iteration")
      a.iteration = flags.integer(0);
    else if (f == "--prompt")
      a.prompt = flags.value(), a.have_prompt = true;
    else if (f == "--prompt-ids")
      a.prompt_ids = flags.value();
    else if (f == "--max-new-tokens")
      a.sampling.max_new_tokens = flags.integer();
    else if (f == "--temperature")
      a.sampling.temperature = flags.number();
    else if (f == "--top-k")
      a.sampling.top_k = flags.integer();
    else if (f == "--top-p")
      a.sampling.top_p = flags.number();
    else if (f == "--seed")
      a.sampling.seed = static_cast<uint64_t>(flags.integer(0));
    else if (f == "--stop-id")
      a.sampling.stop_ids.push_back(static_cast<int32_t>(flags.integer(0)));
    else if (f == "--chat-template")
      a.chat_template = flags.value();
    else if (f == "--prompts-file")
      a.prompts_file = flags.value();
    else if (f == "--show")
      a.show = flags.integer(0);
    else if (f == "--print-ids")
      a.print_ids = true;
    else if (f == "--no-cache")
      a.sampling.use_cache = false;
    else if (f == "--device") {
      const std::string d = flags.value();
      if (d != "cpu" && d != "cuda") usage_error("--device must be cpu or cuda, got '" + d + "'");
      a.device = d == "cuda" ? Device::CUDA : Device::CPU;
    } else if (f == "--tokenizer-type") {
      const std::string t = flags.value();
      a.tokenizer_type = config::parse_option<config::TokenizerType>(t);
      if (!a.tokenizer_type)
        usage_error("--tokenizer-type must be one of " +
                    config::option_list<config::TokenizerType>() + ", got '" + t + "'");
    } else if (f == "--tokenizer-model")
      a.tokenizer_model = flags.value();
    else if (f == "--vocab-file")
      a.vocab_file = flags.value();
    else if (f == "--merge-file")
      a.merge_file = flags.value();
    else
      flags.fail("unexpected argument '" + f + "'");
  }
  if (a.checkpoint.empty()) usage_error("--checkpoint is required");
  const int prompt_kinds =
      int(a.have_prompt) + int(!a.prompt_ids.empty()) + int(!a.prompts_file.empty());
  if (prompt_kinds != 1)
    usage_error("give exactly one of --prompt, --prompt-ids and --prompts-file");
  if (!a.chat_template.empty() && !a.prompt_ids.empty())
    usage_error("--chat-template wraps text prompts, not --prompt-ids");
  if (!a.prompts_file.empty() && a.chat_template.empty()) a.chat_template = "simple";
  if (!a.chat_template.empty()) {
    try {
      data::chat_template_from_name(a.chat_template);
    } catch (const InputError& e) {
      usage_error(concat("--chat-template: ", e.what()));
    }
  }
  try {
    a.sampling.validate();
  } catch (const InputError& e) {
    usage_error(e.what());
  }
  return a;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      usage_error("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// A path the recipe wrote relative to the repository (or the current directory).
std::string existing(const config::Recipe& r, const std::string& p) {
  if (p.empty() || fs::exists(p)) return p;
  return config::resolve_path(r, p);
}

std::unique_ptr<data::Tokenizer> tokenizer_for(const Args& a, const config::Recipe& r) {
  const std::optional<config::TokenizerType> type =
      a.tokenizer_type ? a.tokenizer_type : r.data.tokenizer.type;
  if (!type || *type == config::TokenizerType::Null) return nullptr;
  const data::TokenizerSpec spec{
      *type, a.vocab_file.empty() ? existing(r, r.data.tokenizer.vocab_file) : a.vocab_file,
      a.merge_file.empty() ? existing(r, r.data.tokenizer.merge_file) : a.merge_file,
      a.tokenizer_model.empty() ? existing(r, r.data.tokenizer.model) : a.tokenizer_model};
  return data::make_tokenizer(spec);
}

// Trims ASCII whitespace at both ends (answers are compared without it).
std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string::npos ? std::string()
                                : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// --prompts-file: a greedy answer to every conversation of the file, against its last
// (assistant) message; rank 0 prints --show of them and the exact-match rate.
int evaluate_prompts(const Args& a, const std::string& checkpoint, const config::Recipe& recipe,
                     const data::Tokenizer& tokenizer, parallel::Communicator& world) {
  const data::ChatTemplate tmpl = data::chat_template_from_name(a.chat_template);
  std::ifstream in(a.prompts_file);
  MT_INPUT_CHECK(in.is_open(), "cannot open --prompts-file '", a.prompts_file, "'");
  struct Item {
    std::string question, expected;
    std::vector<int32_t> prompt;
    int32_t end_of_turn = -1;
  };
  std::vector<Item> items;
  std::string line;
  int64_t line_no = 0, longest = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = concat(a.prompts_file, ":", line_no);
    std::vector<data::SFTMessage> messages = data::parse_sft_line(line, where);
    MT_INPUT_CHECK(messages.back().role == "assistant", where,
                   ": the conversation must end with the expected (assistant) answer");
    Item item;
    item.expected = messages.back().content;
    messages.pop_back();
    item.question = messages.back().content;
    item.prompt = data::generation_prompt(tmpl, messages, tokenizer, item.end_of_turn);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(item.prompt.size()));
    items.push_back(std::move(item));
  }
  MT_INPUT_CHECK(!items.empty(), "--prompts-file '", a.prompts_file, "' holds no conversation");
  const int64_t length = longest + a.sampling.max_new_tokens;
  if (recipe.model.position_embedding == config::PositionEmbedding::Learned)
    MT_INPUT_CHECK(length <= recipe.model.max_positions(), "the longest prompt (", longest,
                   " tokens) and --max-new-tokens ", a.sampling.max_new_tokens, " need ", length,
                   " positions; the model has ", recipe.model.max_positions());
  const inference::CausalLM lm(checkpoint, std::nullopt, world, length, a.device);
  int64_t exact = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    inference::SamplingOptions sampling = a.sampling;
    sampling.stop_ids.push_back(items[k].end_of_turn);
    std::vector<int32_t> answer = inference::generate(lm, items[k].prompt, sampling).tokens;
    if (!answer.empty() && answer.back() == items[k].end_of_turn) answer.pop_back();
    const std::string got = trimmed(tokenizer.decode(answer));
    const bool match = got == trimmed(items[k].expected);
    exact += match;
    if (world.rank() == 0 && static_cast<int64_t>(k) < a.show)
      std::printf("[%zu] %s\n    got:      %s\n    expected: %s%s\n", k + 1,
                  items[k].question.c_str(), got.c_str(), trimmed(items[k].expected).c_str(),
                  match ? "  (exact)" : "");
  }
  if (world.rank() == 0)
    std::printf("exact match: %lld of %zu (%.1f%%)\n", static_cast<long long>(exact), items.size(),
                100.0 * static_cast<double>(exact) / static_cast<double>(items.size()));
  return 0;
}

// --device cuda: refused up front (before any conversion or loading) without a usable GPU;
// else this rank's GPU is picked by its node-local rank.
void select_device(const Args& a, int local_rank) {
  if (a.device == Device::CPU) return;
  MT_INPUT_CHECK(device_available(Device::CUDA),
                 "--device cuda: no CUDA device is visible (or this build has no CUDA backend: "
                 "configure with -DMEGATRON_CUDA=ON); use --device cpu");
  backend::select_device_for_local_rank(a.device, local_rank);
}

int run(const Args& a, parallel::Communicator& world, int local_rank) {
  select_device(a, local_rank);
  std::string dir = a.checkpoint;
  fs::path converted;
  if (fs::exists(fs::path(dir) / "config.json")) {  // a Hugging Face directory: convert first
    converted = training::agreed_temp_dir(world, "megatron_generate_");
    if (world.rank() == 0) fs::remove_all(converted);
    training::convert_hf_on_rank0(dir, converted.string(), nullptr, world);
    dir = converted.string();
  }
  struct Cleanup {
    fs::path p;
    bool owner;
    ~Cleanup() {
      std::error_code ec;
      if (owner && !p.empty()) fs::remove_all(p, ec);
    }
  } cleanup{converted, world.rank() == 0};
  const checkpoint::CheckpointIndex index = checkpoint::read_index(dir, a.iteration);
  const config::Recipe recipe = models::recipe_of_checkpoint(index);
  // The tokenizer is needed for --prompt; otherwise it only turns the output into text, so a
  // tokenizer that does not load costs the text, not the run.
  std::unique_ptr<data::Tokenizer> tokenizer;
  try {
    tokenizer = tokenizer_for(a, recipe);
  } catch (const InputError& e) {
    if (a.have_prompt) throw;
    if (world.rank() == 0)
      std::fprintf(stderr, "generate: no tokenizer (%s); printing ids\n", e.what());
  }
  if (!a.prompts_file.empty()) {
    MT_INPUT_CHECK(tokenizer != nullptr, "--prompts-file needs a tokenizer, and ", index.path,
                   " records none (NullTokenizer): pass --tokenizer-type and its files");
    return evaluate_prompts(a, index.path, recipe, *tokenizer, world);
  }
  std::vector<int32_t> prompt;
  inference::SamplingOptions sampling = a.sampling;
  int32_t end_of_turn = -1;  // --chat-template: the token closing the answer (not printed)
  if (a.have_prompt) {
    MT_INPUT_CHECK(tokenizer != nullptr, "--prompt needs a tokenizer, and ", index.path,
                   " records none (NullTokenizer): pass --prompt-ids, or --tokenizer-type and "
                   "its files");
    if (!a.chat_template.empty()) {
      const std::vector<data::SFTMessage> user = {{"user", a.prompt}};
      prompt = data::generation_prompt(data::chat_template_from_name(a.chat_template), user,
                                       *tokenizer, end_of_turn);
      sampling.stop_ids.push_back(end_of_turn);
    } else {
      // A Hugging Face tokenizer encodes as transformers does by default (its BOS first, when
      // it adds one); the others as the training data was (no BOS).
      if (recipe.data.tokenizer.type == config::TokenizerType::HuggingFace &&
          tokenizer->prompt_bos() >= 0)
        prompt.push_back(tokenizer->prompt_bos());
      const auto ids = tokenizer->encode(a.prompt);
      prompt.insert(prompt.end(), ids.begin(), ids.end());
    }
  } else {
    prompt = parse_ids(a.prompt_ids);
  }
  const int64_t length = static_cast<int64_t>(prompt.size()) + a.sampling.max_new_tokens;
  if (recipe.model.position_embedding == config::PositionEmbedding::Learned)
    MT_INPUT_CHECK(length <= recipe.model.max_positions(), "the prompt (", prompt.size(),
                   " tokens) and --max-new-tokens ", a.sampling.max_new_tokens, " need ", length,
                   " positions; the model has ", recipe.model.max_positions());
  const inference::CausalLM lm(index.path, std::nullopt, world, length, a.device);
  inference::Generation g = inference::generate(lm, prompt, sampling);
  if (!g.tokens.empty() && g.tokens.back() == end_of_turn) g.tokens.pop_back();
  if (world.rank() != 0) return 0;
  if (a.print_ids) {
    for (size_t i = 0; i < g.tokens.size(); ++i) std::printf("%s%d", i ? " " : "", g.tokens[i]);
    std::printf("\n");
  } else if (tokenizer) {
    // A chat answer goes on its own line after the question.
    std::printf("%s%s%s\n", a.have_prompt ? a.prompt.c_str() : "",
                a.chat_template.empty() ? "" : "\n", tokenizer->decode(g.tokens).c_str());
  } else {
    for (size_t i = 0; i < g.tokens.size(); ++i) std::printf("%s%d", i ? " " : "", g.tokens[i]);
    std::printf("\n");
  }
  if (g.tokens.empty()) {  // nothing ran: no rate to report (it read 2e9 tokens/s)
    std::fprintf(stderr, "prompt %zu tokens; no token generated (--max-new-tokens 0)\n",
                 prompt.size());
    return 0;
  }
  std::fprintf(stderr,
               "prompt %zu tokens, prefill %.1f ms (%.0f tokens/s); %lld more tokens in %.1f ms "
               "(%.1f tokens/s, %s, %s, tp %d)\n",
               prompt.size(), g.prefill_seconds * 1e3,
               static_cast<double>(prompt.size()) / std::max(g.prefill_seconds, 1e-9),
               static_cast<long long>(g.decode_steps), g.decode_seconds * 1e3,
               static_cast<double>(g.decode_steps) / std::max(g.decode_seconds, 1e-9),
               a.sampling.use_cache ? "KV cache" : "no cache",
               a.device == Device::CUDA ? "cuda" : "cpu", world.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  std::string message;
  try {
    megatron::kernels::cpu::check_compiled_isa();
    megatron::parallel::MpiRuntime mpi(&argc, &argv);
    const Args args = parse(argc, argv);
    auto world = megatron::parallel::MpiCommunicator::world();
    try {
      return run(args, *world, mpi.info().local_rank);
    } catch (const megatron::InputError& e) {
      message = std::string("generate: ") + e.what();
      code = 1;
    } catch (const std::exception& e) {
      message = std::string("generate: fatal: ") + e.what();
      code = 2;
    }
    if (mpi.info().world_size > 1) megatron::parallel::MpiRuntime::abort(code, message);
  } catch (const std::exception& e) {
    message = std::string("generate: fatal: ") + e.what();
    code = 2;
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  return code;
}
