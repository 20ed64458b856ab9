#include "megatron/hf/fused_experts.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "megatron/hf/mxfp4.h"

namespace megatron::hf {
namespace {

std::string shape_text(const std::vector<int64_t>& s) { return nlohmann::json(s).dump(); }

std::string blocks_of(const std::string& name) { return name + "_blocks"; }
std::string scales_of(const std::string& name) { return name + "_scales"; }

}  // namespace

std::vector<int64_t> FusedExperts::shape() const {
  std::vector<int64_t> s = {experts};
  const std::vector<int64_t>& slab = stored_shape.empty() ? expert_shape : stored_shape;
  s.insert(s.end(), slab.begin(), slab.end());
  return s;
}

std::string expert_slab_name(const std::string& fused, int64_t expert) {
  return concat(fused, "[", expert, "]");
}

std::pair<const FusedExperts*, int64_t> find_expert_slab(const std::vector<FusedExperts>& fused,
                                                         const std::string& name) {
  const size_t open = name.rfind('[');
  if (open == std::string::npos || name.back() != ']') return {nullptr, -1};
  int64_t e = -1;
  const char *first = name.data() + open + 1, *last = name.data() + name.size() - 1;
  if (std::from_chars(first, last, e).ptr != last) return {nullptr, -1};
  const std::string base = name.substr(0, open);
  for (const FusedExperts& f : fused)  // (the canonical spelling only: no "[03]")
    if (f.name == base && e >= 0 && e < f.experts && expert_slab_name(base, e) == name)
      return {&f, e};
  return {nullptr, -1};
}

FusedExpertSource::FusedExpertSource(const HfTensors& base, std::vector<FusedExperts> fused)
    : base_(base), fused_(std::move(fused)) {}

bool FusedExpertSource::quantized(const FusedExperts& f) const {
  return !base_.has(f.name) && base_.has(blocks_of(f.name));
}

bool FusedExpertSource::hidden(const std::string& name) const {
  for (const FusedExperts& f : fused_)
    if (name == f.name || name == blocks_of(f.name) || name == scales_of(f.name)) return true;
  return false;
}

std::vector<std::string> FusedExpertSource::names() const {
  std::vector<std::string> out;
  for (const std::string& n : base_.names())
    if (!hidden(n)) out.push_back(n);
  for (const FusedExperts& f : fused_)
    if (base_.has(f.name) || base_.has(blocks_of(f.name)))
      for (int64_t e = 0; e < f.experts; ++e) out.push_back(expert_slab_name(f.name, e));
  std::sort(out.begin(), out.end());
  return out;
}

bool FusedExpertSource::has(const std::string& name) const {
  const auto [f, e] = find_expert_slab(fused_, name);
  if (f == nullptr) return !hidden(name) && base_.has(name);
  return base_.has(f->name) || base_.has(blocks_of(f->name));
}

std::vector<int64_t> FusedExpertSource::shape(const std::string& name) const {
  const auto [f, e] = find_expert_slab(fused_, name);
  if (f == nullptr) return base_.shape(name);
  // What the files hold, for the engine's shape check: the slab of the dense tensor; a
  // quantized one's shape is checked when read (its blocks say the dequantized one).
  if (quantized(*f)) return f->expert_shape;
  const std::vector<int64_t> s = base_.shape(f->name);
  // The file's shape where it is not the configuration's (the engine reports the mismatch).
  return s == f->shape() ? f->expert_shape : s;
}

std::string FusedExpertSource::where(const std::string& name) const {
  const auto [f, e] = find_expert_slab(fused_, name);
  if (f == nullptr) return base_.where(name);
  return base_.where(quantized(*f) ? blocks_of(f->name) : f->name);
}

std::string FusedExpertSource::unreadable(const std::string& name) const {
  const auto [f, e] = find_expert_slab(fused_, name);
  if (f == nullptr) return base_.unreadable(name);
  if (!quantized(*f)) return base_.unreadable(f->name);
  if (!base_.has(scales_of(f->name)))
    return concat("MXFP4 blocks '", blocks_of(f->name), "' without their scales '",
                  scales_of(f->name), "'");
  for (const std::string& part : {blocks_of(f->name), scales_of(f->name)})
    if (base_.info(part).dtype != "U8")
      return concat("an MXFP4 part '", part, "' of dtype ", base_.info(part).dtype,
                    " (blocks and scales are U8)");
  try {
    mxfp4_geometry(*f);
  } catch (const InputError& e) {
    return concat("MXFP4 parts that do not fit it: ", e.what());
  }
  return {};
}

std::vector<std::string> FusedExpertSource::companions(const std::string& name) const {
  return find_expert_slab(fused_, name).first == nullptr ? base_.companions(name)
                                                         : std::vector<std::string>{};
}

std::pair<int64_t, int64_t> FusedExpertSource::mxfp4_geometry(const FusedExperts& f) const {
  const std::string blocks = blocks_of(f.name), scales = scales_of(f.name);
  const std::vector<int64_t> bs = base_.shape(blocks);
  const auto [rows, groups] = check_mxfp4_shapes(blocks, bs, scales, base_.shape(scales));
  (void)rows;
  // Quantized [E, out, in]: expert e's slab [out, in] is the transpose of [in, out].
  const int64_t out = bs.size() == 4 ? bs[1] : -1, in = groups * 32;
  if (bs.size() != 4 || bs[0] != f.experts || f.expert_shape.size() != 2 ||
      f.expert_shape[0] != in || f.expert_shape[1] != out)
    throw InputError(concat(base_.where(blocks), ": MXFP4 tensor '", blocks, "' has shape ",
                            shape_text(bs), "; the configuration needs [", f.experts, ", ",
                            f.expert_shape.size() == 2 ? f.expert_shape[1] : -1, ", ",
                            f.expert_shape.empty() ? -1 : f.expert_shape[0] / 32, ", 16]"));
  return {out, groups};
}

std::vector<float> FusedExpertSource::read_mxfp4(const FusedExperts& f, int64_t expert) const {
  const auto [out, groups] = mxfp4_geometry(f);
  const int64_t in = groups * 32;
  const std::string blocks = blocks_of(f.name), scales = scales_of(f.name);
  const std::vector<uint8_t> b = base_.read_slab_bytes(blocks, expert, f.experts);
  const std::vector<uint8_t> s = base_.read_slab_bytes(scales, expert, f.experts);
  std::vector<float> q(static_cast<size_t>(out * in));
  dequantize_mxfp4(b.data(), s.data(), out, groups, q.data());
  std::vector<float> t(q.size());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c) t[size_t(c * out + r)] = q[size_t(r * in + c)];
  return t;
}

std::vector<float> FusedExpertSource::read(const std::string& name,
                                           const std::vector<int64_t>& shape) const {
  const auto [f, e] = find_expert_slab(fused_, name);
  if (f == nullptr) return base_.read(name, shape);
  MT_CHECK(shape == f->expert_shape, "FusedExpertSource: ", name, " read as ", shape_text(shape));
  if (quantized(*f)) return read_mxfp4(*f, e);
  const std::vector<int64_t> whole = base_.shape(f->name);
  if (whole != f->shape())
    throw InputError(concat(base_.where(f->name), ": tensor '", f->name, "' has shape ",
                            shape_text(whole), ", the configuration needs ",
                            shape_text(f->shape())));
  return base_.read_slab(f->name, e, f->experts);
}

}  // namespace megatron::hf
