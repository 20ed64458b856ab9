#include "data/preprocess.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
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
  // Per key, with split_sentences: the sentence lengths (summing to docs[k].size()).
  std::vector<std::vector<int32_t>> sentence_lengths;
  std::string error;  // non-empty: a bad line
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
                  bool append_eod, bool sentences, Result& r) {
  r.docs.assign(keys.size(), {});
  r.sentence_lengths.assign(keys.size(), {});
  r.error.clear();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
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
    const std::string& text = it->get_ref<const std::string&>();
    if (!sentences) {
      std::vector<int32_t> ids = tok.encode(text);
      if (append_eod && !ids.empty()) ids.push_back(tok.eod());
      r.docs[k] = std::move(ids);
      continue;
    }
    // Megatron: each sentence tokenized on its own, empty ones dropped, the EOD extends the
    // last sentence.
    std::vector<int32_t>& ids = r.docs[k];
    std::vector<int32_t>& lens = r.sentence_lengths[k];
    for (const std::string_view sentence : split_sentences(text)) {
      const std::vector<int32_t> s = tok.encode(sentence);
      if (s.empty()) continue;
      ids.insert(ids.end(), s.begin(), s.end());
      lens.push_back(static_cast<int32_t>(s.size()));
    }
    if (append_eod && !ids.empty()) {
      ids.push_back(tok.eod());
      ++lens.back();
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || is_upper(c); }

// The length of a closing quote/bracket at text[i] (0: none).
size_t closing_at(std::string_view text, size_t i) {
  const char c = text[i];
  if (c == '"' || c == '\'' || c == ')' || c == ']') return 1;
  const std::string_view rest = text.substr(i);
  if (rest.starts_with("\xE2\x80\x9D") || rest.starts_with("\xE2\x80\x99")) return 3;
  return 0;
}

// Whether text[i] may begin a sentence after a terminator.
bool opens_sentence(std::string_view text, size_t i) {
  const char c = text[i];
  if (is_upper(c) || (c >= '0' && c <= '9') || c == '"' || c == '\'' || c == '(' || c == '[')
    return true;
  const std::string_view rest = text.substr(i);
  return rest.starts_with("\xE2\x80\x9C") || rest.starts_with("\xE2\x80\x98");
}

// Whether the '.' at text[dot] ends an abbreviation or an initial.
bool is_abbreviation(std::string_view text, size_t dot) {
  size_t b = dot;
  while (b > 0 && is_letter(text[b - 1])) --b;
  const std::string_view word = text.substr(b, dot - b);
  if (word.empty()) return false;
  // An initial ("J. Smith", "e.g."), but not "I" nor the "s" of "Paul's".
  if (word.size() == 1) return word != "I" && !(b > 0 && text[b - 1] == '\'');
  static constexpr std::string_view kAbbreviations[] = {
      "Mr",  "Mrs", "Ms", "Messrs", "Dr", "St",  "Jr",  "Sr", "Prof", "Rev", "Capt",
      "Col", "Gen", "Lt", "Sgt",    "Mt", "Esq", "Hon", "vs", "viz",  "cf"};
  for (const std::string_view a : kAbbreviations)
    if (word == a) return true;
  return false;
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text) {
  std::vector<std::string_view> out;
  const size_t n = text.size();
  size_t start = 0;
  const auto emit = [&](size_t end) {  // text[start, end), trimmed
    size_t b = start, e = end;
    while (b < e && is_space(text[b])) ++b;
    while (e > b && is_space(text[e - 1])) --e;
    if (e > b) out.push_back(text.substr(b, e - b));
    start = end;
  };
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      // A blank line ends the sentence.
      size_t j = i + 1;
      while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) ++j;
      if (j < n && text[j] == '\n') {
        emit(i);
        i = j;
        continue;
      }
      ++i;
      continue;
    }
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && (text[j] == '.' || text[j] == '!' || text[j] == '?')) ++j;
    const bool single_dot = j == i + 1 && c == '.';
    for (size_t k; j < n && (k = closing_at(text, j)) > 0;) j += k;
    size_t w = j;
    while (w < n && is_space(text[w])) ++w;
    if (w > j && w < n && opens_sentence(text, w) && !(single_dot && is_abbreviation(text, i)))
      emit(j);
    i = j;
  }
  emit(n);
  return out;
}

PreprocessStats preprocess_jsonl(const PreprocessOptions& opt) {
  MT_INPUT_CHECK(!opt.inputs.empty(), "preprocess: no input file given");
  MT_INPUT_CHECK(!opt.json_keys.empty(), "preprocess: no JSON key given");
  MT_INPUT_CHECK(!opt.output_prefix.empty(), "preprocess: no output prefix given");
  MT_INPUT_CHECK(opt.workers >= 1, "preprocess: workers must be >= 1, got ", opt.workers);
  MT_INPUT_CHECK(opt.chunk_lines >= 1 && opt.chunk_bytes >= 1,
                 "preprocess: chunk sizes must be >= 1");
  for (const auto& in : opt.inputs)
    MT_INPUT_CHECK(std::filesystem::is_regular_file(in), "input file '", in,
                   "' does not exist or is not a regular file");
  const std::filesystem::path out_dir = std::filesystem::path(opt.output_prefix).parent_path();
  MT_INPUT_CHECK(out_dir.empty() || std::filesystem::is_directory(out_dir), "output directory '",
                 out_dir.string(), "' (of --output-prefix ", opt.output_prefix, ") does not exist");

  // One tokenizer shared by all workers: encode is const and thread-safe (Tokenizer's
  // contract), the files are loaded once, and GPT-2's BPE cache is shared.
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(opt.tokenizer);
  const DType dtype = optimal_token_dtype(tok->vocab_size());

  PreprocessStats stats;
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : opt.json_keys) {
    stats.output_prefixes.push_back(opt.output_prefix + "_" + key +
                                    (opt.split_sentences ? "_sentence" : "_document"));
    writers.push_back(std::make_unique<IndexedDatasetWriter>(stats.output_prefixes.back(), dtype));
  }
  stats.tokens.assign(opt.json_keys.size(), 0);
  stats.sequences.assign(opt.json_keys.size(), 0);
  if (opt.log) {
    *opt.log << "preprocess: tokenizer " << tok->describe() << ", dtype " << dtype_name(dtype)
             << ", " << opt.workers << " worker(s)"
             << (opt.split_sentences ? ", one sequence per sentence" : "") << "\n";
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
              process_line(cur[i], opt.json_keys, *tok, opt.append_eod, opt.split_sentences,
                           results[i]);
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
          const std::span<const int32_t> ids = r.docs[k];
          if (opt.split_sentences) {
            size_t offset = 0;
            for (const int32_t len : r.sentence_lengths[k]) {
              writers[k]->add_sequence(ids.subspan(offset, static_cast<size_t>(len)));
              offset += static_cast<size_t>(len);
            }
            writers[k]->end_document();
            stats.sequences[k] += static_cast<int64_t>(r.sentence_lengths[k].size());
          } else {
            writers[k]->add_document(ids);
            if (!ids.empty()) ++stats.sequences[k];
          }
          stats.tokens[k] += static_cast<int64_t>(ids.size());
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
      *opt.log << "preprocess: wrote " << stats.output_prefixes[k]
               << ".{bin,idx}: " << stats.tokens[k] << " tokens, " << stats.sequences[k]
               << (opt.split_sentences ? " sentences\n" : " sequences\n");
    *opt.log << std::flush;
  }
  return stats;
}

}  // namespace megatron::data
