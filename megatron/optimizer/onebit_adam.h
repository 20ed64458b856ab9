#pragma once
// 1-bit Adam (optimizer.type: onebit_adam; Tang et al., 2021, as DeepSpeed's OnebitAdam): AdamW
// with full-precision gradient all-reduces for optimizer.freeze_step steps; then the variance is
// frozen and the gradients stay on their rank. Each rank forms its local momentum
// beta1 m + (1 - beta1) * ranks * g (its gradient is its share of the sum over `ranks`), and the
// momenta are averaged through the compressed all-reduce (optimizer/onebit_compression.h) with
// error feedback: a bit plus 4/256 bytes of scale per element, sent twice over in part (the
// all-to-all, then this rank's chunk to the gather): 1/19 of the all-reduce's bytes at dp 2.
//
// The update after the freeze: w -= lr * (clamp(m / (1 - beta1^t) / (sqrt(v / (1 - beta2^T)) +
// eps), +-adam_step_bound) + wd * w), T = freeze_step: the warm-up's last bias-corrected
// variance, so the step size carries on from the warm-up's. The momentum travels divided by that
// denominator (the same average; the sign compression's error lands where the update is uniform,
// not on entries about to be divided by a tiny variance). The clamp holds each element to the
// largest step AdamW's own moments allow: a frozen variance cannot grow with a gradient that
// arrives late (an input embedding's rows of tokens first seen after the freeze reached
// |m / sqrt(v)| ~ 1400 in llama_tiny, and its loss went 5.5 -> 8 within 40 steps; with the
// clamp it follows AdamW's). Entries whose variance froze at exactly 0 (a gradient that was
// always zero: unused vocabulary rows, padding) keep a zero momentum — a sign cannot say 0, and
// the compression error divided by eps would move them (DeepSpeed's momentum mask, found here).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "megatron/optimizer/onebit_compression.h"
#include "megatron/optimizer/optimizer.h"

namespace megatron::optim {

// The largest |m / sqrt(v)| AdamW's own moments allow (Cauchy-Schwarz over the two running sums,
// beta1^2 < beta2): (1 - beta1) / sqrt((1 - beta2) (1 - beta1^2 / beta2)); 1.165 for (0.9, 0.95),
// 7.27 for (0.9, 0.999). Infinite when beta1^2 >= beta2.
float adam_step_bound(double beta1, double beta2);

// The momentum exchange of the store's parameters: dense ones averaged over `dense`, experts over
// `experts` (MoE's expert data parallel; null without experts).
class OnebitMomentumExchange final : public MomentumExchange {
 public:
  OnebitMomentumExchange(ParamStore& store, parallel::Communicator& dense,
                         parallel::Communicator* experts);
  int ranks(const Parameter& p) const override;
  void average(const std::vector<ParamSegment>& segments) override;
  // Error feedback, this rank's own, by name ("onebit.dense.worker", ...).
  std::vector<std::pair<std::string, Tensor>> error_buffers() const;
  int64_t take_bytes();

 private:
  struct Region {
    std::string name;
    parallel::Communicator* group;
    std::vector<const Parameter*> params;  // in segment order
    std::unique_ptr<OnebitAllReduce> reduce;
  };
  std::vector<Region> regions_;
};

}  // namespace megatron::optim
