#pragma once
// Dynamic loss scaling for fp16 training (Megatron's DynamicGradScaler): the loss gradient is
// multiplied by `scale`; a step whose gradients contain inf/NaN is skipped and, after
// `hysteresis` such steps, the scale backs off; after `growth_interval` clean steps in a row it
// grows. bf16 and fp32 use a constant scale of 1 (no overflow risk worth the cost).
#include <cstdint>
#include <nlohmann/json.hpp>

namespace megatron::optim {

struct LossScalerConfig {
  double initial_scale = 4294967296.0;  // 2^32, Megatron's default
  double min_scale = 1.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
  bool clipping = false;  // whether gradients are clipped (optimizer.clip_grad > 0): the advice
  void validate() const;
};

class LossScaler {
 public:
  // dynamic = false: a constant scale of 1.
  LossScaler(bool dynamic, const LossScalerConfig& config = {});
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Call once per step with whether any gradient was non-finite (on any rank). Throws Error
  // after kMaxSkipsAtMinScale overflowing steps in a row at the minimum scale: the run cannot
  // make progress (the gradients overflow at any scale the recipe allows).
  void update(bool found_non_finite);
  static constexpr int64_t kMaxSkipsAtMinScale = 10;
  int64_t skipped_steps() const { return skipped_; }
  nlohmann::json state() const;  // for checkpoints
  void load_state(const nlohmann::json& state);

 private:
  bool dynamic_;
  LossScalerConfig config_;
  double scale_;
  int64_t clean_steps_ = 0, hysteresis_left_, skipped_ = 0;
  int64_t skips_at_min_ = 0;  // consecutive overflowing steps at min_scale
};

}  // namespace megatron::optim
