#include "megatron/optimizer/onebit_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "megatron/core/error.h"

namespace megatron::optim {

float sign_compress(const float* x, float* error, int64_t n, uint8_t* bits) {
  double squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    error[i] += x[i];
    squares += static_cast<double>(error[i]) * error[i];
  }
  const float scale =
      n > 0 ? static_cast<float>(std::sqrt(squares / static_cast<double>(n))) : 0.0f;
  // Byte by byte (eight lanes each, vectorisable); sign(0) = +.
  for (int64_t byte = 0; byte * 8 < n; ++byte) {
    const int64_t lanes = std::min<int64_t>(8, n - byte * 8);
    float* e = error + byte * 8;
    unsigned packed = 0;
    for (int64_t k = 0; k < lanes; ++k) {
      const bool positive = e[k] >= 0.0f;
      packed |= static_cast<unsigned>(positive) << k;
      e[k] -= positive ? scale : -scale;
    }
    bits[byte] = static_cast<uint8_t>(packed);
  }
  return scale;
}

void sign_accumulate(const uint8_t* bits, float scale, int64_t n, float* out) {
  for (int64_t byte = 0; byte * 8 < n; ++byte) {
    const int64_t lanes = std::min<int64_t>(8, n - byte * 8);
    const unsigned packed = bits[byte];
    float* o = out + byte * 8;
    for (int64_t k = 0; k < lanes; ++k)
      o[k] += static_cast<float>(2 * static_cast<int>((packed >> k) & 1u) - 1) * scale;
  }
}

namespace {

constexpr int64_t kBlockBytes = sizeof(float) + kOnebitBlock / 8;  // scale, then bits

// One block: its scale and bits at `out` (error feedback through error).
void compress_block(const float* x, float* error, uint8_t* out) {
  const float scale = sign_compress(x, error, kOnebitBlock, out + sizeof(float));
  std::memcpy(out, &scale, sizeof(float));
}

void accumulate_block(const uint8_t* in, float* out) {
  float scale;
  std::memcpy(&scale, in, sizeof(float));
  sign_accumulate(in + sizeof(float), scale, kOnebitBlock, out);
}

}  // namespace

OnebitAllReduce::OnebitAllReduce(parallel::Communicator& group, std::vector<int64_t> sizes)
    : group_(&group), sizes_(std::move(sizes)) {
  const int64_t w = group.size(), unit = kOnebitBlock * w;
  padded_at_.push_back(0);
  for (int64_t n : sizes_) {
    MT_CHECK(n > 0, "OnebitAllReduce: a vector of ", n, " elements");
    padded_at_.push_back(padded_at_.back() + (n + unit - 1) / unit * unit);
  }
  chunk_elements_ = padded_at_.back() / w;
  message_ = chunk_elements_ / kOnebitBlock * kBlockBytes;
  worker_error_ = Tensor::zeros({padded_at_.back()}, DType::F32);
  server_error_ = Tensor::zeros({chunk_elements_}, DType::F32);
  if (w == 1) return;
  send_ = Tensor::zeros({w * message_}, DType::U8);
  recv_ = Tensor::zeros({w * message_}, DType::U8);
  gathered_ = Tensor::zeros({w * message_}, DType::U8);
}

// Every vector's blocks compressed; chunk r of each (in vector order) into the message to rank r.
void OnebitAllReduce::compress_workers(const std::vector<float*>& xs) {
  const int w = group_->size();
  uint8_t* send = send_.data<uint8_t>();
  float* error = worker_error_.data<float>();
  int64_t at = 0;  // bytes into each rank's message
  for (size_t j = 0; j < sizes_.size(); ++j) {
    const int64_t padded = padded_at_[j + 1] - padded_at_[j], chunk = padded / w;
    buffer_.assign(static_cast<size_t>(padded), 0.0f);  // the padding stays 0
    std::copy_n(xs[j], sizes_[j], buffer_.begin());
    for (int r = 0; r < w; ++r)
      for (int64_t b = 0; b < chunk / kOnebitBlock; ++b) {
        const int64_t e = r * chunk + b * kOnebitBlock;
        compress_block(buffer_.data() + e, error + padded_at_[j] + e,
                       send + r * message_ + at + b * kBlockBytes);
      }
    at += chunk / kOnebitBlock * kBlockBytes;
  }
}

// This rank's chunks: the average of the ranks' decompressed blocks (rank order), compressed
// again with the server error into the first message of send_ (then all-gathered).
void OnebitAllReduce::serve_chunks() {
  const int w = group_->size();
  const uint8_t* recv = recv_.data<uint8_t>();
  uint8_t* out = send_.data<uint8_t>();
  float* error = server_error_.data<float>();
  buffer_.assign(static_cast<size_t>(kOnebitBlock), 0.0f);
  for (int64_t b = 0; b < chunk_elements_ / kOnebitBlock; ++b) {
    std::fill(buffer_.begin(), buffer_.end(), 0.0f);
    for (int r = 0; r < w; ++r)
      accumulate_block(recv + r * message_ + b * kBlockBytes, buffer_.data());
    for (float& a : buffer_) a /= static_cast<float>(w);
    compress_block(buffer_.data(), error + b * kOnebitBlock, out + b * kBlockBytes);
  }
}

void OnebitAllReduce::decompress(const std::vector<float*>& xs) {
  const int w = group_->size();
  const uint8_t* all = gathered_.data<uint8_t>();
  int64_t at = 0;
  for (size_t j = 0; j < sizes_.size(); ++j) {
    const int64_t padded = padded_at_[j + 1] - padded_at_[j], chunk = padded / w;
    buffer_.assign(static_cast<size_t>(padded), 0.0f);
    for (int r = 0; r < w; ++r)
      for (int64_t b = 0; b < chunk / kOnebitBlock; ++b)
        accumulate_block(all + r * message_ + at + b * kBlockBytes,
                         buffer_.data() + r * chunk + b * kOnebitBlock);
    std::copy_n(buffer_.begin(), sizes_[j], xs[j]);
    at += chunk / kOnebitBlock * kBlockBytes;
  }
}

void OnebitAllReduce::average(const std::vector<float*>& xs) {
  MT_CHECK(xs.size() == sizes_.size(), "OnebitAllReduce: ", xs.size(), " vectors, built for ",
           sizes_.size());
  const int w = group_->size();
  if (w == 1) return;
  compress_workers(xs);
  const std::vector<int64_t> counts(static_cast<size_t>(w), message_);
  group_->all_to_all(send_, counts, recv_, counts);
  serve_chunks();
  Tensor mine = send_.flat_view(0, {message_});
  group_->all_gather(mine, gathered_);
  bytes_ += send_.numel() + mine.numel();
  decompress(xs);
}

int64_t OnebitAllReduce::take_bytes() { return std::exchange(bytes_, 0); }

}  // namespace megatron::optim
