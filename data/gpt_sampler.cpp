#include "data/gpt_sampler.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <random>

#include "data/numpy_random.h"
#include "megatron/core/error.h"

namespace megatron::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<double> parse_split(const std::string& split) {
  std::vector<double> w;
  size_t pos = 0;
  const auto bad = [&](const std::string& why) {
    return InputError(concat("data split '", split, "' is invalid: ", why,
                             " (expected 1 to 3 non-negative weights for train,valid,test, "
                             "e.g. \"969,30,1\")"));
  };
  while (true) {
    const size_t next = split.find_first_of(",/", pos);
    std::string part =
        split.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    const auto b = part.find_first_not_of(" \t");
    const auto e = part.find_last_not_of(" \t");
    part = b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
    if (part.empty()) throw bad("empty weight");
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    if (end != part.c_str() + part.size()) throw bad(concat("'", part, "' is not a number"));
    if (!std::isfinite(v) || v < 0)
      throw bad(concat("weight ", part, " is not a finite value >= 0"));
    w.push_back(v);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  if (w.size() > 3) throw bad(concat(w.size(), " weights"));
  w.resize(3, 0.0);
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) throw bad("the weights sum to 0");
  for (double& x : w) x /= sum;
  return w;
}

std::vector<DocumentRange> split_document_ranges(const std::string& split, int64_t num_documents) {
  const std::vector<double> w = parse_split(split);
  std::vector<DocumentRange> out(3);
  // Megatron: bookends e_i = running sums; beg = int(round(e_i * D)), end = int(round(e_{i+1} *
  // D)), Python round = half to even = nearbyint under the default FE_TONEAREST mode.
  const int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double e = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double e_next = e + w[i];
    if (e_next > e) {
      out[i].begin = static_cast<int64_t>(std::nearbyint(e * static_cast<double>(num_documents)));
      out[i].end =
          static_cast<int64_t>(std::nearbyint(e_next * static_cast<double>(num_documents)));
    }  // a zero weight leaves the split empty (Megatron: None)
    e = e_next;
  }
  std::fesetround(saved);
  return out;
}

int split_id_from_name(std::string_view name) {
  if (name == "train") return 0;
  if (name == "valid" || name == "validation") return 1;
  if (name == "test") return 2;
  throw InputError(concat("unknown data split name '", name, "' (expected train, valid or test)"));
}

GPTSampler::GPTSampler(std::shared_ptr<const IndexedDataset> dataset, std::string_view split_name,
                       const std::string& split, int64_t seq_length, uint64_t seed)
    : dataset_(std::move(dataset)), seq_length_(seq_length), seed_(seed) {
  MT_CHECK(dataset_ != nullptr, "GPTSampler needs a dataset");
  const std::string& prefix = dataset_->prefix();
  split_id_ = split_id_from_name(split_name);
  MT_INPUT_CHECK(seq_length > 0, "seq_length must be positive, got ", seq_length);
  const int64_t ndocs = dataset_->num_documents();
  const auto ranges = split_document_ranges(split, ndocs);
  docs_ = ranges[split_id_];
  MT_INPUT_CHECK(docs_.size() > 0, "dataset '", prefix, "': data split '", split, "' leaves the ",
                 split_name, " split empty (", ndocs, " documents: train [", ranges[0].begin, ", ",
                 ranges[0].end, "), valid [", ranges[1].begin, ", ", ranges[1].end, "), test [",
                 ranges[2].begin, ", ", ranges[2].end,
                 ")); use more documents or give this split a larger weight");

  const auto doc_idx = dataset_->document_indices();
  seq_begin_ = doc_idx[docs_.begin];
  const int64_t seq_end = doc_idx[docs_.end];
  cum_.resize(static_cast<size_t>(seq_end - seq_begin_) + 1);
  cum_[0] = 0;
  for (int64_t s = seq_begin_; s < seq_end; ++s)
    cum_[s - seq_begin_ + 1] = cum_[s - seq_begin_] + dataset_->sequence_length(s);
  stream_tokens_ = cum_.back();
  num_windows_ = stream_tokens_ > 0 ? (stream_tokens_ - 1) / seq_length_ : 0;
  MT_INPUT_CHECK(
      num_windows_ > 0, "dataset '", prefix, "': the ", split_name, " split (documents [",
      docs_.begin, ", ", docs_.end, ") of split '", split, "') has ", stream_tokens_,
      " tokens, fewer than seq_length + 1 = ", seq_length_ + 1, ", so it holds no sample");
}

std::shared_ptr<const std::vector<int64_t>> GPTSampler::permutation(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < 2; ++k)
      if (cached_epoch_[k] == epoch) return cached_perm_[k];
  }
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(num_windows_));
  for (int64_t i = 0; i < num_windows_; ++i) (*perm)[i] = i;
  std::mt19937_64 rng(splitmix64(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(split_id_)) ^
                                 static_cast<uint64_t>(epoch)));
  for (int64_t i = num_windows_ - 1; i >= 1; --i) {
    const auto max = static_cast<uint64_t>(i);
    const uint64_t mask = covering_mask(max);
    uint64_t j;
    do {
      j = rng() & mask;
    } while (j > max);
    std::swap((*perm)[i], (*perm)[j]);
  }
  std::lock_guard<std::mutex> lock(mu_);
  cached_epoch_[cache_next_] = epoch;
  cached_perm_[cache_next_] = perm;
  cache_next_ ^= 1;
  return perm;
}

int64_t GPTSampler::window_of(int64_t sample_index) const {
  MT_CHECK(sample_index >= 0, "sample index must be >= 0, got ", sample_index);
  const int64_t epoch = sample_index / num_windows_;
  return (*permutation(epoch))[sample_index % num_windows_];
}

void GPTSampler::read_window(int64_t window, int32_t* out) const {
  MT_CHECK(window >= 0 && window < num_windows_, "window ", window, " out of range [0, ",
           num_windows_, ")");
  int64_t pos = window * seq_length_;
  int64_t remaining = seq_length_ + 1;
  // The sequence holding stream offset pos: last k with cum_[k] <= pos (skips empty ones).
  auto it = std::upper_bound(cum_.begin(), cum_.end(), pos);
  auto k = static_cast<int64_t>(it - cum_.begin()) - 1;
  while (remaining > 0) {
    MT_CHECK(k + 1 < static_cast<int64_t>(cum_.size()), "window read past the split's stream");
    const int64_t in_seq = pos - cum_[k];
    const int64_t avail = cum_[k + 1] - pos;
    const int64_t take = std::min(avail, remaining);
    if (take > 0) {
      dataset_->read(seq_begin_ + k, in_seq, take, out);
      out += take;
      remaining -= take;
      pos += take;
    }
    ++k;
  }
}

void GPTSampler::get(int64_t sample_index, int32_t* tokens_seq_plus_1) const {
  read_window(window_of(sample_index), tokens_seq_plus_1);
}

}  // namespace megatron::data
