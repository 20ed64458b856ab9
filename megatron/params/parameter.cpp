#include "megatron/params/parameter.h"

#include <algorithm>

#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "megatron/backend/device_backends.h"
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

ParamStore::ParamStore(Device device) : device_(device) {
  backend::device_ops(device, "the model's parameters");
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
  p->unit = current_unit_;
  by_name_.emplace(p->name, params_.size());
  params_.push_back(std::move(p));
  return *params_.back();
}

namespace {

// Initial values of p's local elements [begin, end) into out: a function of (seed, name, global
// index) only.
void initial_values(const Parameter& p, uint64_t seed, int64_t begin, int64_t end, float* out) {
  const int64_t n = end - begin;
  switch (p.init.kind) {
    case ParamInit::Kind::Zeros:
      std::fill(out, out + n, 0.0f);
      return;
    case ParamInit::Kind::Ones:
      std::fill(out, out + n, 1.0f);
      return;
    case ParamInit::Kind::Normal: {
      const uint64_t stream = name_hash(p.name);
      const float std = p.init.std;
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        out[i] =
            std * philox::normal(seed, stream, static_cast<uint64_t>(p.global_index(begin + i)));
      return;
    }
  }
}

// dst (any dtype, any device) <- the initial values of p's elements [begin, end): straight into
// an fp32 host buffer, else through an fp32 host copy (rounded by ops::cast).
void write_initial(Tensor dst, const Parameter& p, uint64_t seed, int64_t begin, int64_t end,
                   std::vector<float>& scratch) {
  if (dst.device() == Device::CPU && dst.dtype() == DType::F32) {
    initial_values(p, seed, begin, end, dst.data<float>());
    return;
  }
  scratch.resize(static_cast<size_t>(end - begin));
  initial_values(p, seed, begin, end, scratch.data());
  const Tensor host = Tensor::wrap(scratch.data(), {end - begin}, DType::F32);
  if (dst.dtype() == DType::F32) {
    dst.copy_from(host);
  } else {
    ops::cast(host.to(dst.device()), dst);
  }
}

}  // namespace

void ParamStore::initialize(uint64_t seed) {
  MT_CHECK(finalized_, "initialize before finalize");
  std::vector<float> scratch;
  // Whole weights: every parameter's local shard; sharded: the owned segments.
  if (!sharding_.weights) {
    for (auto& p : params_)
      write_initial(p->weight.view({p->local_shape.numel()}), *p, seed, 0, p->local_shape.numel(),
                    scratch);
  } else {
    for (const auto* segs : {&segments_, &frozen_segments_})
      for (const ParamSegment& s : *segs)
        write_initial(s.weight, *s.param, seed, s.begin, s.end, scratch);
  }
  // Mixed precision: the fp32 masters get the unrounded values; offloaded masters are host
  // copies even in fp32 (elsewhere the fp32 masters are the weights themselves).
  for (const ParamSegment& s : segments_)
    if (mixed_precision() || s.offloaded)
      write_initial(s.master, *s.param, seed, s.begin, s.end, scratch);
}

void ParamStore::zero_grads() { grads_.zero_(); }

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

Parameter* ParamStore::find(const std::string& name) {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : params_[it->second].get();
}

Parameter& ParamStore::get(const std::string& name) {
  const auto it = by_name_.find(name);
  MT_CHECK(it != by_name_.end(), "no parameter named '", name, "'");
  return *params_[it->second];
}

}  // namespace megatron
