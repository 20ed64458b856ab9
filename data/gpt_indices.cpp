// GPTDataset's index arithmetic: the epoch plan and the document, sample and shuffle indices
// (Megatron's _build_document_index, helpers.cpp build_sample_idx, _build_shuffle_index).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/gpt_dataset.h"
#include "data/numpy_random.h"
#include "megatron/core/error.h"

namespace megatron::data {

GPTIndexPlan plan_gpt_indices(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                              int64_t seq_length, const std::string& what) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  MT_INPUT_CHECK(seq_length >= 1, what, ": seq_length must be >= 1, got ", seq_length);
  MT_INPUT_CHECK(tokens_per_epoch >= 2, what, " has ", tokens_per_epoch,
                 " tokens; a GPT dataset needs at least 2 (one input and one label)");
  MT_INPUT_CHECK(!num_samples || *num_samples >= 0, what, ": num_samples must be >= 0, got ",
                 *num_samples);
  GPTIndexPlan p;
  p.tokens_per_epoch = tokens_per_epoch;
  p.num_epochs = 1;
  if (num_samples) {
    MT_INPUT_CHECK(*num_samples <= (kMax - 1) / seq_length, what, ": num_samples ", *num_samples,
                   " x seq_length ", seq_length, " overflows");
    const int64_t requested = *num_samples * seq_length + 1;  // + the extra label token
    p.num_epochs = std::max<int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
  }
  MT_INPUT_CHECK(p.num_epochs <= kMax / tokens_per_epoch, what, ": ", p.num_epochs, " epochs of ",
                 tokens_per_epoch, " tokens overflow");
  p.num_samples_total = (p.num_epochs * tokens_per_epoch - 1) / seq_length;
  if (p.num_epochs > 1) {
    p.num_samples_sans_final_epoch = ((p.num_epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t from_final = *num_samples - p.num_samples_sans_final_epoch;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
    MT_CHECK(from_final >= 0 && from_final <= per_epoch + 1, "final epoch sample count ",
             from_final, " outside [0, ", per_epoch + 1, "]");
    // Megatron: separate when the final epoch supplies fewer than int(0.80 * per_epoch).
    const auto threshold = static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
    p.separate_final_epoch = from_final < threshold;
  }
  return p;
}

std::vector<int32_t> build_document_index(int64_t begin, int64_t end, int64_t num_epochs,
                                          bool separate_final_epoch, NumpyRandomState& rng) {
  MT_CHECK(begin >= 0 && end >= begin && end - 1 <= std::numeric_limits<int32_t>::max(),
           "sequence range [", begin, ", ", end, ") does not fit the int32 document index");
  MT_CHECK(num_epochs >= 1, "num_epochs ", num_epochs);
  const int64_t n = end - begin;
  std::vector<int32_t> doc(static_cast<size_t>(n * num_epochs));
  for (int64_t e = 0; e < num_epochs; ++e)
    for (int64_t i = 0; i < n; ++i)
      doc[static_cast<size_t>(e * n + i)] = static_cast<int32_t>(begin + i);
  std::span<int32_t> all(doc);
  if (!separate_final_epoch || num_epochs == 1) {
    rng.shuffle(all);
  } else {
    rng.shuffle(all.first(static_cast<size_t>((num_epochs - 1) * n)));
    rng.shuffle(all.subspan(static_cast<size_t>((num_epochs - 1) * n)));
  }
  return doc;
}

std::vector<int64_t> build_sample_index(const std::function<int64_t(int64_t)>& length_of,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_samples) {
  std::vector<int64_t> out(static_cast<size_t>(2 * (num_samples + 1)));
  out[0] = 0;
  out[1] = 0;
  const auto last = static_cast<int64_t>(document_index.size()) - 1;
  int64_t pos = 0, offset = 0;
  for (int64_t k = 1; k <= num_samples; ++k) {
    // Walk S + 1 tokens from (pos, offset); the next sample starts at the last token taken
    // (consecutive windows overlap by the one extra label token).
    int64_t need = seq_length + 1;
    while (true) {
      MT_CHECK(pos <= last, "sample index ran past the document index");
      const int64_t available = length_of(document_index[static_cast<size_t>(pos)]) - offset;
      if (need <= available) {
        offset += need - 1;
        break;
      }
      need -= available;
      // drop_last_partial_sequence: num_samples never asks beyond the last document.
      MT_CHECK(pos < last, "sample index ran past the document index");
      ++pos;
      offset = 0;
    }
    out[static_cast<size_t>(2 * k)] = pos;
    out[static_cast<size_t>(2 * k + 1)] = offset;
  }
  return out;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& rng) {
  MT_CHECK(num_samples >= 0 && num_samples <= total_size, "shuffle sizes ", num_samples, ", ",
           total_size);
  std::vector<int64_t> out(static_cast<size_t>(total_size));
  for (int64_t i = 0; i < total_size; ++i) out[static_cast<size_t>(i)] = i;
  std::span<int64_t> all(out);
  rng.shuffle(all.first(static_cast<size_t>(num_samples)));
  if (num_samples < total_size) rng.shuffle(all.subspan(static_cast<size_t>(num_samples)));
  return out;
}

}  // namespace megatron::data
