// inspect_data: statistics of a Megatron indexed dataset, and any sample of its GPTDataset,
// BERTDataset (--dataset-type bert) or SFTDataset (--dataset-type sft, a JSONL file).
// Exit codes: 0 ok, 1 bad input, 2 usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "data/bert_dataset.h"
#include "data/cli.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/sft_dataset.h"
#include "data/tokenizer.h"
#include "megatron/core/error.h"
#include "megatron/core/format.h"

namespace {

constexpr const char* kUsage =
    R"(usage: inspect_data --data-path PREFIX|FILE.jsonl [--dataset-type gpt|bert|sft]
                    [--split-weights 969,30,1]
                    [--sample I --seq-length S [--split train|valid|test] [--seed N]
                     [--num-samples N] [--cache-dir DIR]
                     [--tokenizer-type T [--tokenizer-model M] [--vocab-file V --merge-file G]]
                     [bert: --mask-prob P --short-seq-prob P --masking-max-ngram N
                            --no-binary-head] [sft: --sft-packing packed|padded
                             --sft-truncation right|left|drop --chat-template NAME]]

gpt (default): prints the statistics of PREFIX.bin/.idx: documents, sequences, tokens, dtype,
document length percentiles and a histogram, and the train/valid/test sequence ranges of
--split-weights. With --sample, prints sample I of the Megatron GPTDataset of that split
(windows of S + 1 tokens; order as Megatron's for the same seed, sequence length and
--num-samples; without --num-samples the dataset is one epoch): the token ids, the documents it
spans and, with a tokenizer, the decoded text. Indices are built in memory unless --cache-dir is
given (then they are loaded from, or saved to, that directory as training would).

bert: PREFIX is a sentence-split dataset (preprocess_data --split-sentences); the split is over
documents. --sample prints BERTDataset sample I: the pieces ([MASK] visible), the token types,
the masked positions with their labels (and whether the token shown is [MASK], a random
replacement or kept), the NSP label and the padding. Needs a WordPiece --tokenizer-type.

sft: --data-path is a JSONL file of conversations (prompt/response or messages); the split is
over conversations. Prints conversation and token counts; --sample prints SFTDataset sample I:
the ids, the loss mask and the text, with every token whose prediction is NOT trained on
(the first token, system/user text, role headers, padding) inside [[ ]]. Needs a tokenizer.
  --data-path          dataset prefix (PREFIX.bin and PREFIX.idx), or the SFT JSONL file
  --dataset-type       gpt (default), bert or sft
  --split-weights      Megatron's --split string (default 969,30,1)
  --sample             the sample index to show (in the shuffled order)
  --seq-length         sequence length S
  --split              which split (default train)
  --seed               the dataset seed (default 1234, Megatron's --seed)
  --num-samples        the samples requested of the split (e.g. train_iters x global_batch_size)
  --cache-dir          gpt: use (and fill) the index cache in DIR
  --tokenizer-type     SentencePieceTokenizer (--tokenizer-model), ByteTokenizer, ...
  --mask-prob          bert: masking probability (default 0.15)
  --short-seq-prob     bert: short sequence probability (default 0.1)
  --masking-max-ngram  bert: longest masked n-gram of words (default 3, Megatron's)
  --no-binary-head     bert: no next-sentence prediction (one segment)
  --sft-packing        sft: packed (default) or padded
  --sft-truncation     sft: right (default), left or drop (data.sft.truncation)
  --chat-template      sft: simple (default), plain, llama2, llama3 or chatml
)";

int64_t percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank.
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void print_stats(const megatron::data::IndexedDataset& ds, const std::string& split,
                 bool split_by_documents) {
  using megatron::concat;
  const auto doc_idx = ds.document_indices();
  const int64_t ndocs = ds.num_documents();
  std::vector<int64_t> doc_len(static_cast<size_t>(ndocs), 0);
  for (int64_t d = 0; d < ndocs; ++d)
    for (int64_t s = doc_idx[static_cast<size_t>(d)]; s < doc_idx[static_cast<size_t>(d) + 1]; ++s)
      doc_len[static_cast<size_t>(d)] += ds.sequence_length(s);
  std::vector<int64_t> sorted = doc_len;
  std::sort(sorted.begin(), sorted.end());
  const int64_t empty = std::count(sorted.begin(), sorted.end(), 0);
  std::error_code ec;
  const auto bin_size = std::filesystem::file_size(ds.prefix() + ".bin", ec);
  const auto idx_size = std::filesystem::file_size(ds.prefix() + ".idx", ec);

  std::cout << "dataset      " << ds.prefix() << "\n"
            << "files        .bin " << megatron::human_bytes(static_cast<double>(bin_size))
            << ", .idx " << megatron::human_bytes(static_cast<double>(idx_size)) << "\n"
            << "dtype        " << megatron::dtype_name(ds.dtype()) << " (code "
            << static_cast<int>(megatron::data::indexed_dtype_code(ds.dtype())) << ")\n"
            << "documents    " << ndocs << " (" << empty << " empty)\n"
            << "sequences    " << ds.num_sequences() << "\n"
            << "tokens       " << ds.num_tokens() << "\n";
  if (ndocs > 0) {
    const double mean = static_cast<double>(ds.num_tokens()) / static_cast<double>(ndocs);
    std::printf(
        "document length (tokens): mean %.1f, min %lld, p10 %lld, p50 %lld, p90 %lld, "
        "p99 %lld, max %lld\n",
        mean, static_cast<long long>(sorted.front()),
        static_cast<long long>(percentile(sorted, 10)),
        static_cast<long long>(percentile(sorted, 50)),
        static_cast<long long>(percentile(sorted, 90)),
        static_cast<long long>(percentile(sorted, 99)), static_cast<long long>(sorted.back()));
    std::cout.flush();
    // Power-of-two buckets: [0], [1], [2, 4), [4, 8), ...
    std::vector<int64_t> buckets(64, 0);
    for (int64_t l : doc_len) {
      int b = 0;
      if (l > 0) b = 1 + static_cast<int>(std::floor(std::log2(static_cast<double>(l))));
      ++buckets[static_cast<size_t>(b)];
    }
    const int64_t peak = *std::max_element(buckets.begin(), buckets.end());
    std::cout << "histogram of document lengths:\n";
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b] == 0) continue;
      const std::string range = b == 0 ? "0"
                                : b == 1
                                    ? "1"
                                    : concat(int64_t{1} << (b - 1), "-", (int64_t{1} << b) - 1);
      const auto bar = static_cast<size_t>(
          std::lround(40.0 * static_cast<double>(buckets[b]) / static_cast<double>(peak)));
      std::printf("  %15s %9lld %s\n", range.c_str(), static_cast<long long>(buckets[b]),
                  std::string(std::max<size_t>(bar, 1), '#').c_str());
    }
  }
  if (split_by_documents) {
    const auto ranges = megatron::data::split_document_ranges(split, ndocs);
    std::cout << "split '" << split
              << "' over documents (Megatron splits BERT data by document):\n";
    for (int s = 0; s < 3; ++s) {
      const auto& r = ranges[static_cast<size_t>(s)];
      int64_t tokens = 0;
      for (int64_t d = r.begin; d < r.end; ++d) tokens += doc_len[static_cast<size_t>(d)];
      std::printf("  %-5s documents [%lld, %lld)  sentences [%lld, %lld)  %lld tokens\n",
                  megatron::data::split_name(s), static_cast<long long>(r.begin),
                  static_cast<long long>(r.end),
                  static_cast<long long>(doc_idx[static_cast<size_t>(r.begin)]),
                  static_cast<long long>(doc_idx[static_cast<size_t>(r.end)]),
                  static_cast<long long>(tokens));
    }
    std::cout.flush();
    return;
  }
  const auto ranges = megatron::data::split_document_ranges(split, ds.num_sequences());
  std::cout << "split '" << split << "' over sequences (Megatron splits GPT data by sequence):\n";
  for (int s = 0; s < 3; ++s) {
    int64_t tokens = 0;
    for (int64_t q = ranges[static_cast<size_t>(s)].begin; q < ranges[static_cast<size_t>(s)].end;
         ++q)
      tokens += ds.sequence_length(q);
    std::printf("  %-5s sequences [%lld, %lld)  %lld tokens\n", megatron::data::split_name(s),
                static_cast<long long>(ranges[static_cast<size_t>(s)].begin),
                static_cast<long long>(ranges[static_cast<size_t>(s)].end),
                static_cast<long long>(tokens));
  }
  std::cout.flush();
}

namespace md = megatron::data;

std::string piece_of(const md::Tokenizer& tok, int32_t id) {
  if (const auto* wp = dynamic_cast<const md::BertWordPieceTokenizer*>(&tok))
    return wp->id_to_token(id);
  return tok.decode({id});
}

void show_bert_sample(const md::BERTDataset& bert, const md::Tokenizer& tok, int64_t index) {
  const md::BertSampleRange& r = bert.sample_range(index);
  const auto doc_idx = bert.dataset().document_indices();
  const auto doc = std::upper_bound(doc_idx.begin(), doc_idx.end(), r.begin) - doc_idx.begin() - 1;
  const md::BertSample s = bert.get(index);
  const auto S = static_cast<size_t>(bert.seq_length());
  size_t n = 0;
  while (n < S && s.padding_mask[n]) ++n;
  size_t n_a = 0;
  while (n_a < n && s.token_types[n_a] == 0) ++n_a;
  std::cout << "sample " << index << ": sentences [" << r.begin << ", " << r.end << ") of document "
            << doc << ", target length " << r.target_length << "\n"
            << "NSP label (is_random): " << s.is_random
            << (s.is_random ? " (segments swapped: B precedes A in the text)"
                            : (bert.config().binary_head ? " (B follows A)" : " (no NSP)"))
            << ", truncated: " << (s.truncated ? "yes" : "no") << "\n"
            << "real tokens " << n << " of " << S << " (segment A: " << n_a << " incl. [CLS] and "
            << "[SEP], segment B: " << (n - n_a) << "), padding " << (S - n) << "\n"
            << "pieces:\n ";
  for (size_t i = 0; i < n; ++i) std::cout << ' ' << piece_of(tok, s.tokens[i]);
  std::cout << "\ntoken types (real tokens): ";
  for (size_t i = 0; i < n; ++i) std::cout << s.token_types[i];
  std::cout << "\npadding mask: " << n << " x 1, " << (S - n) << " x 0\n";
  size_t masked = 0;
  for (size_t i = 0; i < S; ++i) masked += s.labels[i] != md::kBertIgnoreLabel;
  std::printf("masked: %zu of %zu real tokens (%.1f%%); labels are -100 elsewhere\n", masked, n,
              n ? 100.0 * static_cast<double>(masked) / static_cast<double>(n) : 0.0);
  std::printf("  %5s  %-18s %-18s\n", "pos", "shown", "label");
  for (size_t i = 0; i < S; ++i) {
    if (s.labels[i] == md::kBertIgnoreLabel) continue;
    const char* how = s.tokens[i] == bert.token_info().mask ? ""
                      : s.tokens[i] == s.labels[i]          ? "  (kept)"
                                                            : "  (random token)";
    std::printf("  %5zu  %-18s %-18s%s\n", i, piece_of(tok, s.tokens[i]).c_str(),
                piece_of(tok, s.labels[i]).c_str(), how);
  }
  std::cout << "ids:";
  for (size_t i = 0; i < S; ++i) std::cout << ' ' << s.tokens[i];
  std::cout << "\n";
}

void show_sft_stats(const md::SFTConversations& c, const std::string& split) {
  int64_t longest = 0;
  for (int64_t i = 0; i < c.size(); ++i)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(c.tokens(i).size()));
  std::cout << "file          " << c.path() << "\n"
            << "conversations " << c.size() << "\n"
            << "tokens        " << c.num_tokens() << " (" << c.num_loss_tokens()
            << " in the loss: assistant text and EOD)\n"
            << "longest       " << longest << " tokens\n";
  const auto ranges = md::split_document_ranges(split, c.size());
  std::cout << "split '" << split << "' over conversations:\n";
  for (int s = 0; s < 3; ++s)
    std::printf("  %-5s conversations [%lld, %lld)\n", md::split_name(s),
                static_cast<long long>(ranges[static_cast<size_t>(s)].begin),
                static_cast<long long>(ranges[static_cast<size_t>(s)].end));
  std::cout.flush();
}

void show_sft_sample(const md::SFTDataset& sft, const md::Tokenizer& tok, int64_t index) {
  const md::SFTSample s = sft.get_sample(index);
  const auto S = static_cast<size_t>(sft.seq_length());
  std::cout << "sample " << index << ": " << s.conversations.size() << " conversation"
            << (s.conversations.size() == 1 ? "" : "s") << " (";
  for (size_t k = 0; k < s.conversations.size(); ++k)
    std::cout << (k ? ", " : "") << "#" << s.conversations[k] << " line "
              << sft.conversations().line(s.conversations[k]) << " at offset "
              << s.document_starts[k];
  size_t in_loss = 0;
  for (const uint8_t m : s.loss_mask) in_loss += m;
  std::cout << "), " << s.num_tokens << " real tokens of " << (S + 1) << ", padding "
            << (S + 1 - static_cast<size_t>(s.num_tokens))
            << ", truncated: " << (s.truncated ? "yes" : "no") << "\n"
            << "labels in the loss: " << in_loss << " of " << S << "\n"
            << "ids:";
  for (const int32_t id : s.tokens) std::cout << ' ' << id;
  std::cout << "\nloss mask (label t = token t+1): ";
  for (const uint8_t m : s.loss_mask) std::cout << static_cast<int>(m);
  std::cout << "\ntext ([[ ]] = not trained on):\n";
  // Runs of tokens with the same "trained on" flag (token t is trained on iff loss_mask[t-1]).
  const auto real = static_cast<size_t>(s.num_tokens);
  size_t t = 0;
  while (t < real) {
    const bool on = t > 0 && s.loss_mask[t - 1];
    size_t e = t + 1;
    while (e < real && (s.loss_mask[e - 1] != 0) == on) ++e;
    const std::string text =
        tok.decode(std::vector<int32_t>(s.tokens.begin() + static_cast<std::ptrdiff_t>(t),
                                        s.tokens.begin() + static_cast<std::ptrdiff_t>(e)));
    std::cout << (on ? "" : "[[") << text << (on ? "" : "]]");
    t = e;
  }
  if (real < S + 1) std::cout << "[[<pad id " << s.tokens[real] << " x " << (S + 1 - real) << ">]]";
  std::cout << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  return megatron::data::cli::run_tool("inspect_data", kUsage, [&]() -> int {
    const md::cli::Args args(argc, argv,
                             {{"data-path", Arity::One},
                              {"dataset-type", Arity::One},
                              {"split-weights", Arity::One},
                              {"sample", Arity::One},
                              {"seq-length", Arity::One},
                              {"split", Arity::One},
                              {"seed", Arity::One},
                              {"num-samples", Arity::One},
                              {"cache-dir", Arity::One},
                              {"tokenizer-type", Arity::One},
                              {"tokenizer-model", Arity::One},
                              {"vocab-file", Arity::One},
                              {"merge-file", Arity::One},
                              {"mask-prob", Arity::One},
                              {"short-seq-prob", Arity::One},
                              {"masking-max-ngram", Arity::One},
                              {"no-binary-head", Arity::Flag},
                              {"sft-packing", Arity::One},
                              {"sft-truncation", Arity::One},
                              {"chat-template", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    const std::string prefix = args.required("data-path");
    const std::string type = args.get("dataset-type", "gpt");
    if (type != "gpt" && type != "bert" && type != "sft")
      throw md::cli::UsageError("--dataset-type must be gpt, bert or sft, got '" + type + "'");
    const std::string split = args.get("split-weights", "969,30,1");
    if (args.has("sample") != args.has("seq-length"))
      throw md::cli::UsageError("--sample and --seq-length go together");
    for (const char* f : {"mask-prob", "short-seq-prob", "masking-max-ngram", "no-binary-head"})
      if (args.has(f) && type != "bert")
        throw md::cli::UsageError(std::string("--") + f + " is for --dataset-type bert");
    for (const char* f : {"sft-packing", "sft-truncation", "chat-template"})
      if (args.has(f) && type != "sft")
        throw md::cli::UsageError(std::string("--") + f + " is for --dataset-type sft");
    if (args.has("cache-dir") && type != "gpt")
      throw md::cli::UsageError("--cache-dir is for --dataset-type gpt");
    std::unique_ptr<md::Tokenizer> tok;
    if (args.has("tokenizer-type")) {
      tok = md::make_tokenizer({md::parse_tokenizer_type(args.get("tokenizer-type")),
                                args.get("vocab-file"), args.get("merge-file"),
                                args.get("tokenizer-model")});
    }
    const int split_id = md::split_id_from_name(args.get("split", "train"));
    const auto check_index = [&](int64_t index, int64_t n) {
      if (index >= n)
        throw megatron::InputError(megatron::concat("--sample ", index, " is out of range: the ",
                                                    md::split_name(split_id), " split has ", n,
                                                    " samples"));
    };

    if (type == "sft") {
      if (!tok) throw md::cli::UsageError("--dataset-type sft needs --tokenizer-type");
      const auto conv = md::SFTConversations::load(
          prefix, *tok, md::chat_template_from_name(args.get("chat-template", "simple")));
      show_sft_stats(*conv, split);
      if (!args.has("sample")) return 0;
      const int64_t index = args.get_int("sample", 0, 0);
      md::SFTDatasetConfig cfg;
      cfg.seq_length = args.get_int("seq-length", 0, 1);
      cfg.seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0));
      if (args.has("num-samples")) cfg.num_samples = args.get_int("num-samples", 0, 0);
      cfg.packing = md::sft_packing_from_name(args.get("sft-packing", "packed"));
      cfg.truncation = md::sft_truncation_from_name(args.get("sft-truncation", "right"));
      cfg.log = [](const std::string& line) { std::cout << "\n" << line << "\n"; };
      const auto sft = md::SFTDataset::build(conv, split_id, split, cfg);
      check_index(index, sft->num_samples());
      show_sft_sample(*sft, *tok, index);
      return 0;
    }

    auto ds = std::make_shared<const md::IndexedDataset>(prefix);
    print_stats(*ds, split, type == "bert");
    if (!args.has("sample")) return 0;
    const int64_t index = args.get_int("sample", 0, 0);

    if (type == "bert") {
      if (!tok)
        throw md::cli::UsageError(
            "--dataset-type bert needs --tokenizer-type BertWordPieceLowerCase|BertWordPieceCase "
            "--vocab-file V");
      md::BERTDatasetConfig cfg;
      cfg.seq_length = args.get_int("seq-length", 0, 1);
      cfg.seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0));
      if (args.has("num-samples")) cfg.num_samples = args.get_int("num-samples", 0, 0);
      cfg.masking_probability = args.get_double("mask-prob", 0.15);
      cfg.short_seq_probability = args.get_double("short-seq-prob", 0.1);
      cfg.masking_max_ngram = static_cast<int32_t>(args.get_int("masking-max-ngram", 3, 1));
      cfg.binary_head = !args.has("no-binary-head");
      cfg.log = [](const std::string& line) { std::cout << "\n" << line << "\n"; };
      const auto range =
          md::split_document_ranges(split, ds->num_documents())[static_cast<size_t>(split_id)];
      const auto bert =
          md::BERTDataset::build(ds, split_id, range, md::BertTokenInfo::from_tokenizer(*tok), cfg);
      check_index(index, bert->num_samples());
      show_bert_sample(*bert, *tok, index);
      return 0;
    }

    md::GPTDatasetConfig cfg;
    cfg.seq_length = args.get_int("seq-length", 0, 1);
    cfg.seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0));
    if (args.has("num-samples")) cfg.num_samples = args.get_int("num-samples", 0, 0);
    cfg.cache_dir = args.get("cache-dir");
    auto src = std::make_shared<md::IndexedSequenceSource>(ds);
    const auto range =
        md::split_document_ranges(split, ds->num_sequences())[static_cast<size_t>(split_id)];
    const auto gpt = cfg.cache_dir.empty()
                         ? md::GPTDataset::build(src, split_id, range, cfg)
                         : md::GPTDataset::build_or_load(src, split_id, range, cfg);
    std::cout << "\n"
              << gpt->describe()
              << (gpt->plan().separate_final_epoch ? ", final epoch shuffled separately" : "")
              << "\n";
    check_index(index, gpt->num_samples());
    const int64_t j = gpt->shuffle_index()[static_cast<size_t>(index)];
    const auto si = gpt->sample_index();
    const int64_t b = si[static_cast<size_t>(2 * j)], e = si[static_cast<size_t>(2 * j + 2)];
    std::cout << "sample " << index << " = window " << j << ": from sequence "
              << gpt->document_index()[static_cast<size_t>(b)] << " offset "
              << si[static_cast<size_t>(2 * j + 1)] << " to sequence "
              << gpt->document_index()[static_cast<size_t>(e)] << " offset "
              << si[static_cast<size_t>(2 * j + 3)] << " (" << (e - b + 1) << " sequence"
              << (e > b ? "s" : "") << ")\n";
    std::vector<int32_t> ids(static_cast<size_t>(cfg.seq_length + 1));
    gpt->get(index, ids.data());
    std::cout << "ids (" << ids.size() << "):";
    for (int32_t id : ids) std::cout << ' ' << id;
    std::cout << "\n";
    if (tok) std::cout << "text:\n" << tok->decode(ids) << "\n";
    return 0;
  });
}
