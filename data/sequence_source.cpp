// The sequence sources of GPTDataset: an indexed dataset, and synthetic sequences (tests, mock
// data).
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

namespace megatron::data {

IndexedSequenceSource::IndexedSequenceSource(std::shared_ptr<const IndexedDataset> dataset)
    : dataset_(std::move(dataset)) {
  MT_CHECK(dataset_ != nullptr, "IndexedSequenceSource needs a dataset");
}

IndexedSequenceSource::IndexedSequenceSource(const std::string& prefix)
    : dataset_(std::make_shared<const IndexedDataset>(prefix)) {}

MockSequenceSource::MockSequenceSource(const Spec& spec) : spec_(spec) {
  MT_INPUT_CHECK(spec.num_sequences >= 0, "mock dataset: num_sequences must be >= 0, got ",
                 spec.num_sequences);
  MT_INPUT_CHECK(spec.max_length >= 1 && spec.max_length <= std::numeric_limits<int32_t>::max(),
                 "mock dataset: max_length must be in [1, 2^31), got ", spec.max_length);
  MT_INPUT_CHECK(spec.vocab_size >= 1, "mock dataset: vocab_size must be >= 1, got ",
                 spec.vocab_size);
  MT_INPUT_CHECK(spec.eod >= 0 && spec.eod < spec.vocab_size, "mock dataset: eod ", spec.eod,
                 " is not in [0, vocab_size = ", spec.vocab_size, ")");
  NumpyRandomState rng(spec.seed);
  lengths_.resize(static_cast<size_t>(spec.num_sequences));
  for (auto& l : lengths_)
    l = static_cast<int32_t>(1 + rng.random_interval(static_cast<uint64_t>(spec.max_length - 1)));
}

int64_t MockSequenceSource::sequence_length(int64_t i) const {
  MT_CHECK(i >= 0 && i < num_sequences(), "sequence ", i, " out of range [0, ", num_sequences(),
           ")");
  return lengths_[static_cast<size_t>(i)];
}

void MockSequenceSource::read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(sequence);
  MT_CHECK(offset >= 0 && count >= 0 && offset + count <= len, "read [", offset, ", ",
           offset + count, ") outside sequence ", sequence, " of length ", len);
  for (int64_t j = offset; j < offset + count; ++j)
    *out++ = j == len - 1 ? spec_.eod
                          : static_cast<int32_t>((sequence * 7919 + j + 1) % spec_.vocab_size);
}

std::string MockSequenceSource::name() const {
  return concat("mock(seed ", spec_.seed, ", ", spec_.num_sequences, " sequences, max length ",
                spec_.max_length, ")");
}

}  // namespace megatron::data
