// inspect_data: statistics of a Megatron indexed dataset, and any sample of its GPTDataset.
// Exit codes: 0 ok, 1 bad input, 2 usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "data/cli.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "megatron/core/error.h"

namespace {

constexpr const char* kUsage = R"(usage: inspect_data --data-path PREFIX [--split-weights 969,30,1]
                    [--sample I --seq-length S [--split train|valid|test] [--seed N]
                     [--num-samples N] [--cache-dir DIR]
                     [--tokenizer-type T [--tokenizer-model M] [--vocab-file V --merge-file G]]]

Prints the statistics of PREFIX.bin/.idx: documents, sequences, tokens, dtype, document length
percentiles and a histogram, and the train/valid/test sequence ranges of --split-weights.
With --sample, prints sample I of the Megatron GPTDataset of that split (windows of S + 1
tokens; order as Megatron's for the same seed, sequence length and --num-samples; without
--num-samples the dataset is one epoch): the token ids, the documents it spans and, with a
tokenizer, the decoded text. Indices are built in memory unless --cache-dir is given (then
they are loaded from, or saved to, that directory as training would).
  --data-path        dataset prefix (PREFIX.bin and PREFIX.idx)
  --split-weights    Megatron's --split string (default 969,30,1)
  --sample           the sample index to show (in the shuffled order)
  --seq-length       sequence length S
  --split            which split (default train)
  --seed             the dataset seed (default 1234, Megatron's --seed)
  --num-samples      the samples requested of the split (e.g. train_iters x global_batch_size)
  --cache-dir        use (and fill) the index cache in DIR
  --tokenizer-type   SentencePieceTokenizer (--tokenizer-model), ByteTokenizer, ...
)";

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

int64_t percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank.
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void print_stats(const megatron::data::IndexedDataset& ds, const std::string& split) {
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
            << "files        .bin " << human_bytes(static_cast<double>(bin_size)) << ", .idx "
            << human_bytes(static_cast<double>(idx_size)) << "\n"
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

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  namespace md = megatron::data;
  try {
    const md::cli::Args args(argc, argv,
                             {{"data-path", Arity::One},
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
                              {"merge-file", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    const std::string prefix = args.required("data-path");
    const std::string split = args.get("split-weights", "969,30,1");
    if (args.has("sample") != args.has("seq-length"))
      throw md::cli::UsageError("--sample and --seq-length go together");
    auto ds = std::make_shared<const md::IndexedDataset>(prefix);
    print_stats(*ds, split);
    if (!args.has("sample")) return 0;

    const int64_t index = args.get_int("sample", 0, 0);
    md::GPTDatasetConfig cfg;
    cfg.seq_length = args.get_int("seq-length", 0, 1);
    cfg.seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0));
    if (args.has("num-samples")) cfg.num_samples = args.get_int("num-samples", 0, 0);
    cfg.cache_dir = args.get("cache-dir");
    const int split_id = md::split_id_from_name(args.get("split", "train"));
    std::unique_ptr<md::Tokenizer> tok;
    if (args.has("tokenizer-type")) {
      tok = md::make_tokenizer({args.get("tokenizer-type"), args.get("vocab-file"),
                                args.get("merge-file"), args.get("tokenizer-model")});
    }
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
    if (index >= gpt->num_samples())
      throw megatron::InputError(megatron::concat("--sample ", index, " is out of range: the ",
                                                  md::split_name(split_id), " split has ",
                                                  gpt->num_samples(), " samples"));
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
  } catch (const md::cli::UsageError& e) {
    std::cerr << "inspect_data: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const megatron::InputError& e) {
    std::cerr << "inspect_data: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "inspect_data: internal error: " << e.what() << "\n";
    return 3;
  }
}
