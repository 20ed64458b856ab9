#include "megatron/optimizer/onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace megatron::optim {

namespace {

// Each parameter's gradient as one vector: with no_shard a parameter cut by bucket boundaries is
// several segments, adjacent in the gradient buffer.
std::vector<std::pair<const Parameter*, float*>> param_vectors(
    const std::vector<ParamSegment>& segments) {
  std::vector<std::pair<const Parameter*, float*>> out;
  const float* next = nullptr;
  for (const ParamSegment& s : segments) {
    float* g = s.grad.data<float>();
    if (!out.empty() && out.back().first == s.param) {
      MT_CHECK(g == next, "1-bit Adam: the segments of '", s.param->name, "' are not adjacent");
    } else {
      out.emplace_back(s.param, g);
    }
    next = g + s.size();
  }
  return out;
}

}  // namespace

OnebitMomentumExchange::OnebitMomentumExchange(ParamStore& store, parallel::Communicator& dense,
                                               parallel::Communicator* experts) {
  MT_CHECK(store.finalized(), "1-bit Adam's exchange built before the store was finalized");
  MT_INPUT_CHECK(store.device() == Device::CPU,
                 "optimizer.type onebit_adam runs on the CPU backend only so far");
  MT_CHECK(!store.sharding().optimizer || dense.size() == 1,
           "1-bit Adam needs whole parameters (the no_shard strategy)");
  Region regions[2] = {{"dense", &dense, {}, nullptr}, {"expert", experts, {}, nullptr}};
  std::vector<int64_t> sizes[2];
  for (const auto& [param, grad] : param_vectors(store.segments())) {
    const int r = param->expert ? 1 : 0;
    MT_CHECK(regions[r].group != nullptr, "expert parameter '", param->name,
             "' without an expert data-parallel group");
    regions[r].params.push_back(param);
    sizes[r].push_back(param->local_shape.numel());
  }
  for (int r = 0; r < 2; ++r) {
    if (sizes[r].empty()) continue;
    regions[r].reduce = std::make_unique<OnebitAllReduce>(*regions[r].group, sizes[r]);
    regions_.push_back(std::move(regions[r]));
  }
}

int OnebitMomentumExchange::ranks(const Parameter& p) const {
  for (const Region& r : regions_)
    if ((r.name == "expert") == p.expert) return r.group->size();
  MT_CHECK(false, "parameter '", p.name, "' is in no region of the momentum exchange");
  return 1;
}

void OnebitMomentumExchange::average(const std::vector<ParamSegment>& segments) {
  const auto vectors = param_vectors(segments);
  for (Region& r : regions_) {
    std::vector<float*> xs;
    for (const auto& [param, grad] : vectors)
      if (param->expert == (r.name == "expert")) {
        MT_CHECK(xs.size() < r.params.size() && r.params[xs.size()] == param,
                 "1-bit Adam: the segments changed since the exchange was built ('", param->name,
                 "')");
        xs.push_back(grad);
      }
    MT_CHECK(xs.size() == r.params.size(), "1-bit Adam: ", xs.size(), " ", r.name,
             " parameters, built for ", r.params.size());
    r.reduce->average(xs);
  }
}

std::vector<std::pair<std::string, Tensor>> OnebitMomentumExchange::error_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Region& r : regions_) {
    out.emplace_back("onebit." + r.name + ".worker", r.reduce->worker_error());
    out.emplace_back("onebit." + r.name + ".server", r.reduce->server_error());
  }
  return out;
}

int64_t OnebitMomentumExchange::take_bytes() {
  int64_t bytes = 0;
  for (Region& r : regions_) bytes += r.reduce->take_bytes();
  return bytes;
}

float adam_step_bound(double beta1, double beta2) {
  const double r = beta1 * beta1 / beta2;
  if (r >= 1.0) return std::numeric_limits<float>::infinity();
  return static_cast<float>((1.0 - beta1) / std::sqrt((1.0 - beta2) * (1.0 - r)));
}

bool Optimizer::compressing() const {
  return settings_.type == config::OptimizerType::OnebitAdam && steps_ >= settings_.freeze_step;
}

void Optimizer::step_compressed(double lr) {
  MT_CHECK(exchange_ != nullptr, "onebit_adam past its freeze step without a momentum exchange");
  MT_CHECK(offload_ == nullptr, "onebit_adam with offloaded optimizer state");
  ++steps_;
  const float beta1 = static_cast<float>(settings_.beta1), eps = static_cast<float>(settings_.eps);
  const auto bias_correction1 = static_cast<float>(1.0 - std::pow(settings_.beta1, steps_));
  const auto bias_correction2 =
      static_cast<float>(1.0 - std::pow(settings_.beta2, settings_.freeze_step));
  // Each rank's momentum in the frozen variance's units, in its gradient's place.
  for (const Segment& s : segments_) {
    float* g = s.grad.data<float>();
    float* m = m_.data<float>() + s.state_offset;
    const float* v = v_.data<float>() + s.state_offset;
    const float share = static_cast<float>(exchange_->ranks(*s.param)) * (1.0f - beta1);
    for (int64_t i = 0; i < s.size(); ++i) {
      const float denom = std::sqrt(v[i] / bias_correction2) + eps;
      g[i] = v[i] == 0.0f ? 0.0f : (beta1 * m[i] + share * g[i]) / denom;  // the momentum mask
      m[i] = denom;  // kept for the update (m is replaced there)
    }
  }
  exchange_->average(segments_);
  const auto rate = static_cast<float>(lr);
  const float limit = adam_step_bound(settings_.beta1, settings_.beta2);
  for (const Segment& s : segments_) {
    const float* u = s.grad.data<float>();
    float* m = m_.data<float>() + s.state_offset;
    const float* v = v_.data<float>() + s.state_offset;
    float* w = s.master.data<float>();
    const float wd = s.param->weight_decay ? static_cast<float>(settings_.weight_decay) : 0.0f;
    for (int64_t i = 0; i < s.size(); ++i) {
      const float denom = m[i];
      m[i] = v[i] == 0.0f ? 0.0f : u[i] * denom;
      const float step = std::clamp(u[i] / bias_correction1, -limit, limit);
      w[i] -= rate * ((v[i] == 0.0f ? 0.0f : step) + wd * w[i]);
    }
    store_->refresh_model_weights(s);
  }
}

}  // namespace megatron::optim
