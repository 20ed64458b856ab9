// Context parallelism on the CPU: a small LLaMA-shaped stack (2 layers, hidden 512, 8 heads of 64,
// SwiGLU 1376, rope, flash attention, micro-batch 1) run forward + backward on one sequence of S
// tokens split over the world as the context-parallel group (the world size is cp; 1 runs the
// plain flash attention). Prints, on rank 0, one JSON line:
//   {"cp":2,"comm":"p2p","seq":16384,"threads":1,"seconds":..,"tokens_per_s":..,
//    "activation_peak_mib":..,"saved_mib":..}
// seconds: the median of --iters forward+backward passes (after one warm-up); tokens_per_s: the
// sequence's tokens over it; activation_peak_mib: this rank's peak CPU tensor bytes during a
// pass above what it held before it (weights, gradients, inputs); saved_mib: what forward keeps
// for backward. bench/run_cp_bench.sh runs it for each cp and comm type side by side.
//   mpirun -np 2 build/bin/bench_cp --seq 16384 --comm p2p [--iters 3]
//   build/bin/bench_cp --seq 16384 --attention   (the flash kernel alone, B 1 H 8 Dh 64 causal)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"
#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"
#include "megatron/transformer/block.h"
#include "megatron/transformer/context_parallel.h"
#include "models/model.h"

namespace {

using namespace megatron;

struct Args {
  int64_t seq = 8192, iters = 3;
  std::string comm = "p2p";
  bool attention = false, unfused = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      MT_INPUT_CHECK(i + 1 < argc, k, " needs a value");
      return argv[++i];
    };
    if (k == "--seq")
      a.seq = std::stoll(value());
    else if (k == "--iters")
      a.iters = std::stoll(value());
    else if (k == "--comm")
      a.comm = value();
    else if (k == "--attention")
      a.attention = true;
    else if (k == "--unfused")
      a.unfused = true;
    else
      MT_INPUT_CHECK(false, "unknown flag ", k,
                     " (--seq N --comm p2p|all_gather|a2a --iters N --attention [--unfused])");
  }
  MT_INPUT_CHECK(a.comm == "p2p" || a.comm == "all_gather" || a.comm == "a2a", "--comm ", a.comm);
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The flash kernel (or, --unfused, the kernel keeping the probabilities) alone: forward +
// backward of one causal [S, 1, 8, 64] attention.
void attention_only(const Args& a) {
  kernels::AttentionShape s{a.seq, 1, 8, 8, 64};
  kernels::AttentionOptions opt{};
  opt.scale = 0.125f;
  opt.causal = true;
  std::vector<float> qkv(s.S * 3 * 8 * 64), out(s.S * 8 * 64), dqkv(qkv.size());
  std::vector<float> saved(a.unfused ? 8 * s.S * s.S : 8 * s.S);  // probabilities or lse
  for (size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000 - 0.5f;
  std::vector<double> times;
  for (int64_t it = 0; it <= a.iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (a.unfused) {
      kernels::cpu::attention_forward(s, opt, qkv.data(), out.data(), saved.data());
      kernels::cpu::attention_backward(s, opt, qkv.data(), saved.data(), out.data(), dqkv.data());
    } else {
      kernels::cpu::flash_attention_forward(s, opt, qkv.data(), out.data(), saved.data());
      kernels::cpu::flash_attention_backward(s, opt, qkv.data(), out.data(), saved.data(),
                                             out.data(), dqkv.data());
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it > 0) times.push_back(dt);
  }
  std::printf("{\"kernel\":\"%s\",\"seq\":%lld,\"threads\":%d,\"seconds\":%.6f}\n",
              a.unfused ? "unfused" : "flash", static_cast<long long>(a.seq),
              omp_get_max_threads(), median(times));
}

ContextParallelComm comm_of(const std::string& name) {
  if (name == "all_gather") return ContextParallelComm::AllGather;
  if (name == "a2a") return ContextParallelComm::AllToAll;
  return ContextParallelComm::P2P;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  auto world = parallel::MpiCommunicator::world();
  const Args a = parse(argc, argv);
  if (a.attention) {
    if (world->rank() == 0) attention_only(a);
    return 0;
  }
  auto single = parallel::make_single_process_communicator("tp");
  const int64_t cp = world->size(), S = a.seq, D = 512, layers = 2;
  TransformerSpec spec;
  spec.num_layers = layers;
  spec.hidden = D;
  spec.heads = 8;
  spec.query_groups = 8;
  spec.ffn = 1376;
  spec.seq_length = S;
  spec.norm = Norm::Kind::RMSNorm;
  spec.swiglu = true;
  spec.rope = true;
  spec.bias = false;
  spec.flash_attention = true;
  BlockSubmodules subs = dense_submodules();
  if (cp > 1) subs = with_context_parallel(subs, *world, comm_of(a.comm));
  ParamStore store;
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  for (int64_t l = 0; l < layers; ++l)
    blocks.push_back(std::make_unique<TransformerBlock>(store, "layers." + std::to_string(l), l,
                                                        spec, *single, nullptr, subs));
  store.finalize();
  store.initialize(1);
  const int64_t Sl = S / cp;
  MicroBatchInfo mb;
  mb.cp = kernels::ContextChunks::of(S, cp, world->rank());
  Tensor pos = Tensor::empty({Sl, 1}, DType::I32);
  for (int64_t t = 0; t < Sl; ++t) pos.data<int32_t>()[t] = static_cast<int32_t>(mb.cp.global(t));
  mb.position_ids = &pos;
  Tensor x = Tensor::zeros({Sl, 1, D}, DType::F32), dx = Tensor::zeros({Sl, 1, D}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i % 97);
  Tensor dy = Tensor::zeros({Sl, 1, D}, DType::F32);
  dy.data<float>()[0] = 1.0f;
  std::vector<TransformerBlock::Ctx> ctx(layers);
  std::vector<double> times;
  double peak_mib = 0, saved_mib = 0;
  for (int64_t it = 0; it <= a.iters; ++it) {
    world->barrier();
    const int64_t before = cpu_memory_stats().current_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor* h = &x;
    for (int64_t l = 0; l < layers; ++l) h = &blocks[l]->forward(ctx[l], *h, mb);
    if (it == 0) saved_mib = (cpu_memory_stats().current_bytes - before) / 1048576.0;
    Tensor g = dy;
    for (int64_t l = layers - 1; l >= 0; --l) {
      blocks[l]->backward(ctx[l], g, dx, mb);
      g = dx.clone();
    }
    world->barrier();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it > 0) times.push_back(dt);
    if (it == 0) peak_mib = (cpu_memory_stats().peak_bytes - before) / 1048576.0;
  }
  // Each rank's own peak; rank 0 reports the largest.
  double peaks[2] = {peak_mib, saved_mib};
  Tensor t = Tensor::wrap(peaks, {2}, DType::F64);
  world->all_reduce(t, parallel::ReduceOp::Max);
  const double sec = median(times);
  if (world->rank() == 0)
    std::printf(
        "{\"cp\":%lld,\"comm\":\"%s\",\"seq\":%lld,\"threads\":%d,\"seconds\":%.4f,"
        "\"tokens_per_s\":%.1f,\"activation_peak_mib\":%.1f,\"saved_mib\":%.1f}\n",
        static_cast<long long>(cp), cp > 1 ? a.comm.c_str() : "none", static_cast<long long>(S),
        omp_get_max_threads(), sec, static_cast<double>(S) / sec, peaks[0], peaks[1]);
  return 0;
}
