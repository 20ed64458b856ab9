#include "megatron/transformer/submodules.h"

#include "megatron/transformer/attention.h"
#include "megatron/transformer/mlp.h"

namespace megatron {

BlockSubmodules dense_submodules() {
  BlockSubmodules m;
  m.attention = [](const SubmoduleArgs& a) { return std::make_unique<SelfAttention>(a); };
  m.mlp = [](const SubmoduleArgs& a) { return std::make_unique<DenseMLP>(a); };
  return m;
}

}  // namespace megatron
