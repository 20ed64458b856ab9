#pragma once
// DualPipeV (DeepSeek's DualPipe "cut in half", from the DeepSeek-V3 report's DualPipe): the ZB-V
// placement (two chunks per stage in a V, Placement::V) run in eight phases per stage s of pp:
//   1. 2 (pp - s - 1) chunk-0 forwards;
//   2. s + 1 pairs: a chunk-0 forward, a chunk-1 forward;
//   3. pp - s - 1 times: a chunk-1 B (input gradient only), its W, a chunk-1 forward;
//   4. m - 2 pp + s + 1 times: chunk-0 forward with chunk-1 backward, then chunk-1 forward with
//      chunk-0 backward (the overlapped "F&B" pairs; whole backwards);
//   5. pp - s - 1 times: a chunk-1 backward, then chunk-1 forward with chunk-0 backward;
//   6. s + 1 pairs of a chunk-1 and a chunk-0 backward: the first half whole, the second half B
//      only (odd stages switch before a chunk-1 B, even ones before a chunk-0 B);
//   7. pp - s - 1 times: the oldest pending W, then a chunk-0 B;
//   8. the s + 1 W's left.
// Needs m >= 2 pp micro-batches. A pair's forward and backward run one after the other here (the
// overlap of one's communication with the other's compute is the GPU's). Peak activations:
// 2 min(pp, m) + 1 chunk activations on stage 0 (1F1B's pp stage activations plus half a stage).
#include <vector>

#include "megatron/pipeline/zero_bubble.h"

namespace megatron::pipeline {

// The fewest micro-batches DualPipeV runs with pp stages: 2 pp.
inline int dualpipe_v_min_microbatches(int pp) { return 2 * pp; }

// Each stage's compute order (pp >= 2, m >= 2 pp; InputError otherwise).
std::vector<ComputeOrder> dualpipe_v_order(int pp, int microbatches);

// The whole DualPipeV pipeline, with its sends and receives (buffered sends, V placement).
Schedule dualpipe_v(int pp, int microbatches);

}  // namespace megatron::pipeline
