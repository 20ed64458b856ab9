// Per-rank memory of one GPT-2 124M-shaped transformer layer (hidden 768, 12 heads, FFN 3072,
// seq 1024, micro-batch 4) under tensor parallelism, with and without sequence parallelism.
// Run: for n in 1 2 4; do mpirun --allow-run-as-root --oversubscribe -np $n
//        build/bin/bench_tp_memory; done
// Parameters fall as 1/tp (norms and row-parallel biases stay replicated); activations saved
// for backward fall as 1/tp for the attention/MLP interior, and the [S, B, D] tensors outside
// it fall only with sequence parallelism.
#include <cstdio>

#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"
#include "megatron/transformer/block.h"

int main(int argc, char** argv) {
  using namespace megatron;
  parallel::MpiRuntime mpi(&argc, &argv);
  auto world = parallel::MpiCommunicator::world();
  const int64_t S = 1024, B = 4, D = 768;
  for (bool sp : {false, true}) {
    TransformerSpec spec;
    spec.num_layers = 12;
    spec.hidden = D;
    spec.heads = 12;
    spec.query_groups = 12;
    spec.ffn = 3072;
    spec.seq_length = S;
    spec.sequence_parallel = sp;
    ParamStore store;
    TransformerBlock block(store, "layer", 0, spec, *world);
    store.finalize();
    store.initialize(1);
    const int64_t tp = world->size(), Sl = sp && tp > 1 ? S / tp : S;
    Tensor x = Tensor::zeros({Sl, B, D}, DType::F32);
    TransformerBlock::Ctx ctx;
    MicroBatchInfo mb;
    const int64_t before = cpu_memory_stats().current_bytes;
    block.forward(ctx, x, mb);
    const int64_t activations = cpu_memory_stats().current_bytes - before;
    if (world->rank() == 0)
      std::printf(
          "tp=%lld sp=%d: parameters %.2f MiB/rank (%lld elements), activations saved "
          "for backward %.1f MiB/rank\n",
          static_cast<long long>(tp), sp ? 1 : 0, store.numel() * 4.0 / 1048576.0,
          static_cast<long long>(store.numel()), activations / 1048576.0);
  }
  return 0;
}
