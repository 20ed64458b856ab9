#pragma once
// How a model announces its use of parameter units (ParamStore::begin_unit), so that fully
// sharded data parallelism (megatron/distributed/fully_sharded.h) can gather a unit's weights
// just before they are used and free them after, and give its gradients storage for the
// duration of its backward then reduce-scatter them. Models call the hooks around each unit's
// forward and backward (a unit used twice, like tied embeddings, is announced twice); without
// hooks (null) every weight and gradient is resident.
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace megatron {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // The units' weights are needed from now until the matching after_*.
  virtual void before_forward(int64_t unit) = 0;
  virtual void after_forward(int64_t unit) = 0;
  // Weights and gradient storage needed; after_backward: the unit's gradients of this
  // backward are complete.
  virtual void before_backward(int64_t unit) = 0;
  virtual void after_backward(int64_t unit) = 0;
};

// One use of some units: begin() announces them, end() releases them (explicit rather than in a
// destructor: releasing communicates and may throw). Null hooks make both no-ops.
class UnitUse {
 public:
  UnitUse(UnitHooks* hooks, std::initializer_list<int64_t> units, bool backward)
      : hooks_(hooks), units_(units), backward_(backward) {
    std::erase_if(units_, [](int64_t u) { return u < 0; });  // -1: a part this model lacks
    if (!hooks_) return;
    for (int64_t u : units_) backward_ ? hooks_->before_backward(u) : hooks_->before_forward(u);
  }
  void end() {
    if (!hooks_) return;
    for (int64_t u : units_) backward_ ? hooks_->after_backward(u) : hooks_->after_forward(u);
    hooks_ = nullptr;
  }

 private:
  UnitHooks* hooks_;
  std::vector<int64_t> units_;
  bool backward_;
};

}  // namespace megatron
