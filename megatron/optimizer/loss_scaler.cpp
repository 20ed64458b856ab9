#include "megatron/optimizer/loss_scaler.h"

#include <algorithm>

#include "megatron/core/error.h"

namespace megatron::optim {

void LossScalerConfig::validate() const {
  MT_CHECK(initial_scale >= min_scale && min_scale > 0.0, "loss scale: initial ", initial_scale,
           " min ", min_scale);
  MT_CHECK(growth_factor > 1.0 && backoff_factor > 0.0 && backoff_factor < 1.0,
           "loss scale: growth ", growth_factor, " backoff ", backoff_factor);
  MT_CHECK(growth_interval > 0 && hysteresis > 0, "loss scale: growth interval ", growth_interval,
           " hysteresis ", hysteresis);
}

LossScaler::LossScaler(bool dynamic, const LossScalerConfig& config)
    : dynamic_(dynamic),
      config_(config),
      scale_(dynamic ? config.initial_scale : 1.0),
      hysteresis_left_(config.hysteresis) {
  config.validate();
}

void LossScaler::update(bool found_non_finite) {
  if (found_non_finite) ++skipped_;
  if (!dynamic_) return;
  if (found_non_finite) {
    clean_steps_ = 0;
    skips_at_min_ = scale_ <= config_.min_scale ? skips_at_min_ + 1 : 0;
    // The user's run, not a bug: no source location (InputError); the advice fits the recipe.
    MT_INPUT_CHECK(skips_at_min_ < kMaxSkipsAtMinScale, skips_at_min_,
                   " consecutive fp16 steps overflowed at the minimum loss scale ",
                   config_.min_scale,
                   " (training.min_loss_scale): the gradients are not finite at any allowed "
                   "scale; ",
                   config_.clipping ? "lower optimizer.lr or train in bf16 (the gradients are "
                                      "already clipped: optimizer.clip_grad)"
                                    : "lower optimizer.lr, enable clipping (optimizer.clip_grad) "
                                      "or train in bf16");
    // As Megatron: once hysteresis is used up, every further overflow backs off until the
    // next growth restores it.
    if (--hysteresis_left_ <= 0)
      scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    return;
  }
  skips_at_min_ = 0;
  if (++clean_steps_ >= config_.growth_interval) {
    scale_ *= config_.growth_factor;
    clean_steps_ = 0;
    hysteresis_left_ = config_.hysteresis;
  }
}

}  // namespace megatron::optim

namespace megatron::optim {

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"clean_steps", clean_steps_},
          {"hysteresis_left", hysteresis_left_},
          {"skipped", skipped_}};
}

void LossScaler::load_state(const nlohmann::json& s) {
  MT_INPUT_CHECK(s.is_object() && s.contains("scale") && s.contains("clean_steps") &&
                     s.contains("hysteresis_left"),
                 "checkpoint loss_scaler state is malformed: ", s.dump());
  if (!dynamic_) return;  // a constant scale stays 1
  scale_ = s["scale"].get<double>();
  clean_steps_ = s["clean_steps"].get<int64_t>();
  hysteresis_left_ = s["hysteresis_left"].get<int64_t>();
  skipped_ = s.value("skipped", int64_t{0});
}

}  // namespace megatron::optim
