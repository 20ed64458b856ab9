#include "megatron/params/parameter.h"

#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "megatron/backend/ops.h"

namespace megatron {

uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t Parameter::global_index(int64_t local_index) const {
  if (shard.replicated()) return local_index;
  // Decompose the local index into coordinates, shift the split dim, recompose globally.
  int64_t remaining = local_index, global = 0, stride = 1;
  for (int d = local_shape.ndim() - 1; d >= 0; --d) {
    int64_t coord = remaining % local_shape[d];
    remaining /= local_shape[d];
    if (d == shard.dim) coord += shard.index * local_shape[d];
    global += coord * stride;
    stride *= global_shape[d];
  }
  return global;
}

Parameter& ParamStore::add(std::string name, const Shape& global_shape, ParamInit init,
                           bool weight_decay, ShardSpec shard) {
  MT_CHECK(!finalized_, "parameter '", name, "' added after the store was finalized");
  // A name index keeps registration O(1) (models with many layers register many parameters).
  MT_CHECK(!by_name_.count(name), "duplicate parameter name '", name, "'");
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->global_shape = global_shape;
  p->local_shape = global_shape;
  if (!shard.replicated()) {
    MT_CHECK(shard.dim < global_shape.ndim(), "parameter '", p->name, "': shard dim ", shard.dim,
             " out of range for ", global_shape.str());
    MT_CHECK(global_shape[shard.dim] % shard.count == 0, "parameter '", p->name, "': dim ",
             shard.dim, " of ", global_shape.str(), " does not split into ", shard.count);
    p->local_shape[shard.dim] = global_shape[shard.dim] / shard.count;
  }
  p->shard = shard;
  p->init = init;
  p->weight_decay = weight_decay;
  by_name_.emplace(p->name, params_.size());
  params_.push_back(std::move(p));
  return *params_.back();
}

void ParamStore::finalize(int64_t pad_multiple, DType model_dtype, int64_t expert_pad_multiple) {
  MT_CHECK(!finalized_, "ParamStore finalized twice");
  MT_CHECK(model_dtype == DType::F32 || model_dtype == DType::BF16 || model_dtype == DType::F16,
           "model dtype must be fp32, bf16 or fp16, got ", dtype_name(model_dtype));
  model_dtype_ = model_dtype;
  const Device device = device_;
  MT_CHECK(pad_multiple >= 1 && expert_pad_multiple >= 1, "pad multiples ", pad_multiple, ", ",
           expert_pad_multiple);
  auto round_up = [](int64_t n, int64_t m) { return (n + m - 1) / m * m; };
  // Reverse registration order = the order backward finishes gradients; the experts' region
  // (reduced over another group) follows the rest, each region padded for its own sharding.
  int64_t at = 0;
  total_ = 0;
  auto place = [&](auto&& wanted) {
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      if (!wanted(**it)) continue;
      (*it)->offset = at;
      at += (*it)->local_shape.numel();
      total_ += (*it)->local_shape.numel();
    }
  };
  place([](const Parameter& p) { return !p.frozen && !p.expert; });
  at = expert_begin_ = round_up(at, pad_multiple);
  place([](const Parameter& p) { return !p.frozen && p.expert; });
  at = trainable_end_ =
      at == expert_begin_ ? at : round_up(at - expert_begin_, expert_pad_multiple) + expert_begin_;
  place([](const Parameter& p) { return p.frozen; });
  weights_ = Tensor::zeros({at}, model_dtype, device);
  grads_ = Tensor::zeros({trainable_end_}, DType::F32, device);
  if (mixed_precision()) masters_ = Tensor::zeros({trainable_end_}, DType::F32, device);
  for (auto& p : params_) {
    p->weight = weights_.flat_view(p->offset, p->local_shape);
    p->grad = p->frozen ? Tensor() : grads_.flat_view(p->offset, p->local_shape);
    p->master = p->frozen ? Tensor() : masters().flat_view(p->offset, p->local_shape);
  }
  finalized_ = true;
}

void ParamStore::initialize(uint64_t seed) {
  MT_CHECK(finalized_, "initialize before finalize");
  // The values depend only on (seed, name, global index): compute them on the host (into the
  // master buffer itself on the CPU) and copy them to the device in one transfer.
  // Straight into the masters when they are the whole (host) buffer; else via one fp32 host
  // copy of everything (device buffers; frozen weights without masters).
  const int64_t n_all = weights_.numel(), n_master = masters().numel();
  const bool direct = device_ == Device::CPU && n_master == n_all;
  Tensor host = direct ? masters() : Tensor::zeros({n_all}, DType::F32);
  for (auto& p : params_) {
    float* v = host.data<float>() + p->offset;
    const int64_t n = p->local_shape.numel();
    switch (p->init.kind) {
      case ParamInit::Kind::Zeros:
        for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
        break;
      case ParamInit::Kind::Ones:
        for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
        break;
      case ParamInit::Kind::Normal: {
        const uint64_t stream = name_hash(p->name);
        const float std = p->init.std;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i)
          v[i] = std * philox::normal(seed, stream, static_cast<uint64_t>(p->global_index(i)));
        break;
      }
    }
  }
  if (!direct) masters().copy_from(host.flat_view(0, {n_master}));
  refresh_model_weights(0, n_master);
  if (n_all > n_master) {  // frozen weights (mixed precision): rounded straight into the buffer
    const Tensor src = host.flat_view(n_master, {n_all - n_master}).to(device_);
    Tensor dst = weights_.flat_view(n_master, {n_all - n_master});
    ops::cast(src, dst);
  }
}

void ParamStore::zero_grads() { grads_.zero_(); }

void ParamStore::refresh_model_weights(int64_t begin, int64_t end) {
  if (!mixed_precision()) return;
  MT_CHECK(0 <= begin && begin <= end && end <= masters_.numel(), "refresh range [", begin, ", ",
           end, ")");
  if (begin == end) return;
  Tensor model = weights_.flat_view(begin, {end - begin});
  ops::cast(masters_.flat_view(begin, {end - begin}), model);
}

std::vector<Parameter*> ParamStore::params() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

std::vector<const Parameter*> ParamStore::params() const {
  std::vector<const Parameter*> out;
  for (const auto& p : params_) out.push_back(p.get());
  return out;
}

Parameter& ParamStore::get(const std::string& name) {
  const auto it = by_name_.find(name);
  MT_CHECK(it != by_name_.end(), "no parameter named '", name, "'");
  return *params_[it->second];
}

}  // namespace megatron
