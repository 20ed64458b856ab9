#include "megatron/transformer/submodules.h"

#include "megatron/transformer/attention.h"
#include "megatron/transformer/mla.h"
#include "megatron/transformer/mlp.h"

namespace megatron {

std::unique_ptr<AttentionLayer> make_attention(const SubmoduleArgs& a,
                                               std::shared_ptr<const ContextParallelAttention> cp) {
  if (a.spec.mla.enabled()) return std::make_unique<MultiLatentAttention>(a, std::move(cp));
  return std::make_unique<SelfAttention>(a, std::move(cp));
}

BlockSubmodules dense_submodules() {
  BlockSubmodules m;
  m.attention = [](const SubmoduleArgs& a) { return make_attention(a); };
  m.mlp = [](const SubmoduleArgs& a) { return std::make_unique<DenseMLP>(a); };
  return m;
}

}  // namespace megatron
