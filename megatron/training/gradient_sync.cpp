#include "megatron/training/gradient_sync.h"

namespace megatron::training {

GradientSync::GradientSync(ParamStore& store, const TrainerGroups& g, bool distributed,
                           int64_t bucket_elements)
    : dp_(g.dp), ep_(g.ep), expert_dp_(g.expert_dp) {
  dense_ = std::make_unique<optim::DataParallelGrads>(store, *g.dp, bucket_elements, distributed,
                                                      optim::BufferRange{0, store.expert_begin()});
  if (store.expert_begin() < store.trainable_numel())
    experts_ = std::make_unique<optim::DataParallelGrads>(
        store, *g.expert_dp, bucket_elements, distributed,
        optim::BufferRange{store.expert_begin(), store.trainable_numel()});
}

std::vector<optim::BufferRange> GradientSync::owned() const {
  std::vector<optim::BufferRange> owned = dense_->owned();
  if (experts_) owned.insert(owned.end(), experts_->owned().begin(), experts_->owned().end());
  return owned;
}

void GradientSync::finish() {
  dense_->finish();
  if (experts_) experts_->finish();
}

void GradientSync::gather_params() {
  dense_->gather_params();
  if (experts_) experts_->gather_params();
}

optim::ExpertNormGroups GradientSync::expert_norm_groups() const {
  if (!experts_) return {};
  return {ep_, experts_->distributed() ? expert_dp_ : nullptr};
}

}  // namespace megatron::training
