#include "data/preprocess.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/indexed_dataset.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

struct Line {
  std::string text;
  int64_t number = 0;  // 1-based line number in its file
};

struct Result {
  std::vector<std::vector<int32_t>> docs;  // per key
  std::string error;                       // non-empty: a bad line
};

// Reads up to max_lines lines / max_bytes bytes; returns false at end of file.
bool read_chunk(std::istream& in, int64_t& line_no, int64_t max_lines, int64_t max_bytes,
                int64_t& bytes, std::vector<Line>& out) {
  out.clear();
  int64_t chunk_bytes = 0;
  std::string s;
  while (static_cast<int64_t>(out.size()) < max_lines && chunk_bytes < max_bytes &&
         std::getline(in, s)) {
    ++line_no;
    chunk_bytes += static_cast<int64_t>(s.size()) + 1;
    if (s.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    out.push_back(Line{std::move(s), line_no});
    s.clear();
  }
  bytes += chunk_bytes;
  return !out.empty() || static_cast<bool>(in);
}

const char* json_type_name(const nlohmann::json& j) { return j.type_name(); }

void process_line(const Line& line, const std::vector<std::string>& keys, const Tokenizer& tok,
                  bool append_eod, Result& r) {
  r.docs.assign(keys.size(), {});
  r.error.clear();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.text);
  } catch (const nlohmann::json::parse_error& e) {
    r.error = concat("invalid JSON: ", e.what());
    return;
  }
  if (!j.is_object()) {
    r.error = concat("expected a JSON object, got ", json_type_name(j));
    return;
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto it = j.find(keys[k]);
    if (it == j.end()) {
      r.error = concat("key '", keys[k], "' is missing");
      return;
    }
    if (!it->is_string()) {
      r.error = concat("key '", keys[k], "' is not a string (got ", json_type_name(*it), ")");
      return;
    }
    std::vector<int32_t> ids = tok.encode(it->get_ref<const std::string&>());
    if (append_eod && !ids.empty()) ids.push_back(tok.eod());
    r.docs[k] = std::move(ids);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PreprocessStats preprocess_jsonl(const PreprocessOptions& opt) {
  MT_INPUT_CHECK(!opt.inputs.empty(), "preprocess: no input file given");
  MT_INPUT_CHECK(!opt.json_keys.empty(), "preprocess: no JSON key given");
  MT_INPUT_CHECK(!opt.output_prefix.empty(), "preprocess: no output prefix given");
  MT_INPUT_CHECK(opt.workers >= 1, "preprocess: workers must be >= 1, got ", opt.workers);
  MT_INPUT_CHECK(opt.chunk_lines >= 1 && opt.chunk_bytes >= 1, "preprocess: chunk sizes must be >= 1");
  for (const auto& in : opt.inputs)
    MT_INPUT_CHECK(std::filesystem::is_regular_file(in), "input file '", in,
                   "' does not exist or is not a regular file");
  const std::filesystem::path out_dir =
      std::filesystem::path(opt.output_prefix).parent_path();
  MT_INPUT_CHECK(out_dir.empty() || std::filesystem::is_directory(out_dir), "output directory '",
                 out_dir.string(), "' (of --output-prefix ", opt.output_prefix,
                 ") does not exist");

  // One tokenizer shared by all workers: encode is const and thread-safe (Tokenizer's
  // contract), the files are loaded once, and GPT-2's BPE cache is shared.
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(opt.tokenizer);
  const DType dtype = optimal_token_dtype(tok->vocab_size());

  PreprocessStats stats;
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : opt.json_keys) {
    stats.output_prefixes.push_back(opt.output_prefix + "_" + key + "_document");
    writers.push_back(std::make_unique<IndexedDatasetWriter>(stats.output_prefixes.back(), dtype));
  }
  stats.tokens.assign(opt.json_keys.size(), 0);
  if (opt.log) {
    *opt.log << "preprocess: tokenizer " << tok->describe() << ", dtype "
             << dtype_name(dtype) << ", " << opt.workers << " worker(s)\n";
  }

  const auto t0 = std::chrono::steady_clock::now();
  int64_t next_log = opt.log_interval > 0 ? opt.log_interval : -1;
  std::vector<Result> results;
  for (const auto& input : opt.inputs) {
    std::ifstream in(input, std::ios::binary);
    MT_INPUT_CHECK(in.is_open(), "cannot open input file '", input, "'");
    int64_t line_no = 0;
    std::vector<Line> cur, next;
    bool more = read_chunk(in, line_no, opt.chunk_lines, opt.chunk_bytes, stats.input_bytes, cur);
    MT_INPUT_CHECK(!in.bad(), "read error on input file '", input, "'");
    while (!cur.empty() || more) {
      results.resize(cur.size());
      std::atomic<size_t> next_index{0};
      std::vector<std::string> worker_errors(static_cast<size_t>(opt.workers));
      std::vector<std::thread> threads;
      for (int w = 0; w < opt.workers; ++w) {
        threads.emplace_back([&, w] {
          try {
            for (size_t i; (i = next_index.fetch_add(1)) < cur.size();)
              process_line(cur[i], opt.json_keys, *tok, opt.append_eod, results[i]);
          } catch (const std::exception& e) {
            worker_errors[w] = e.what();
            next_index.store(cur.size());
          }
        });
      }
      // Read the next chunk while the workers tokenize this one.
      bool read_failed = false;
      if (more) {
        more = read_chunk(in, line_no, opt.chunk_lines, opt.chunk_bytes, stats.input_bytes, next);
        read_failed = in.bad();
      } else {
        next.clear();
      }
      for (auto& t : threads) t.join();
      for (const auto& e : worker_errors)
        MT_INPUT_CHECK(e.empty(), input, ": tokenization failed: ", e);
      MT_INPUT_CHECK(!read_failed, "read error on input file '", input, "'");

      for (size_t i = 0; i < cur.size(); ++i) {
        Result& r = results[i];
        if (!r.error.empty()) {
          MT_INPUT_CHECK(opt.skip_bad_lines, input, ":", cur[i].number, ": ", r.error,
                         " (use --skip-bad-lines to skip such lines)");
          ++stats.bad_lines;
          continue;
        }
        for (size_t k = 0; k < writers.size(); ++k) {
          writers[k]->add_document(r.docs[k]);
          stats.tokens[k] += static_cast<int64_t>(r.docs[k].size());
        }
        ++stats.documents;
      }
      if (opt.log && next_log > 0 && stats.documents >= next_log) {
        const double s = seconds_since(t0);
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "preprocess: %lld documents (%.0f docs/s, %.2f MB/s, %.1f MB read)\n",
                      static_cast<long long>(stats.documents), stats.documents / s,
                      stats.input_bytes / 1e6 / s, stats.input_bytes / 1e6);
        *opt.log << buf << std::flush;
        while (next_log <= stats.documents) next_log += opt.log_interval;
      }
      std::swap(cur, next);
    }
  }
  for (auto& w : writers) w->finalize();
  stats.seconds = seconds_since(t0);
  if (opt.log) {
    const double s = std::max(stats.seconds, 1e-9);
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "preprocess: done: %lld documents, %lld bad lines skipped, %.1f MB in %.2f s "
                  "(%.0f docs/s, %.2f MB/s)\n",
                  static_cast<long long>(stats.documents), static_cast<long long>(stats.bad_lines),
                  stats.input_bytes / 1e6, stats.seconds, stats.documents / s,
                  stats.input_bytes / 1e6 / s);
    *opt.log << buf;
    for (size_t k = 0; k < writers.size(); ++k)
      *opt.log << "preprocess: wrote " << stats.output_prefixes[k] << ".{bin,idx}: "
               << stats.tokens[k] << " tokens\n";
    *opt.log << std::flush;
  }
  return stats;
}

}  // namespace megatron::data
