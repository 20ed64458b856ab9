// The restricted unpickler (megatron/checkpoint/pickle.h) of torch.save's data.pkl, distributed
// checkpoints' .metadata and Megatron's args: anything but a clean refusal is a finding, and the
// values it returns are walked (bounded nesting, no cycles).
#include <span>

#include "megatron/checkpoint/pickle.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
size_t walk(const megatron::checkpoint::PickleValue& v, int depth) {
  if (depth > 250) __builtin_trap();  // deeper than the parser allows
  size_t n = v.describe().size();
  for (const auto& i : v.items) n += walk(*i, depth + 1);
  for (const auto& [k, x] : v.dict) n += (k ? walk(*k, depth + 1) : 0) + walk(*x, depth + 1);
  if (v.state) n += walk(*v.state, depth + 1);
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  return fuzz::refuse_or_accept([&] {
    const auto root = checkpoint::read_pickle(std::span<const uint8_t>(data, size), "fuzz.pkl");
    if (size < 4096) (void)walk(*root, 0);  // a DAG may share nodes: walk small inputs only
  });
}
