#pragma once
// The reductions of a training step between backward and the optimizer: gradients that
// several ranks hold partial sums of (sequence-parallel norms, tied embeddings), the fp16
// overflow vote, and the losses of the step.
#include <memory>
#include <vector>

#include "megatron/optimizer/optimizer.h"
#include "megatron/params/parameter.h"
#include "models/model.h"

namespace megatron::training {

// Norms (and position embeddings) saw only this rank's sequence slice: sum their partial
// gradients over tensor parallelism, in one call over a packed copy (scratch: reused buffer).
void reduce_sequence_parallel_grads(ParamStore& store, const std::vector<optim::Segment>& segments,
                                    parallel::Communicator& tp, Tensor& scratch);

// First and last pipeline stage each hold the word embeddings (input table and tied LM head):
// sum their gradients over the embedding group so both copies take the same step. Whole
// gradients: before the data-parallel reduction (the two stages' buckets, hence their owned
// slices, differ); sharded gradients: after it, on the owned slices (the table is a unit of its
// own on both stages, cut alike). Called at both points; acts at the one that applies.
void reduce_tied_embedding_grads(const std::vector<std::unique_ptr<models::Model>>& chunks,
                                 ParamStore& store, parallel::Communicator& pp,
                                 parallel::Communicator& embedding, bool tied,
                                 bool after_dp_reduction);

// fp16: whether any rank's main gradients overflowed (inf/NaN or beyond fp16's range); every
// rank of the model group (and of dp with the distributed optimizer, and of ep when experts
// differ over it) gets the same answer.
bool fp16_gradient_overflow(ParamStore& store, const std::vector<optim::Segment>& segments,
                            parallel::Communicator& model_group, parallel::Communicator* dp,
                            Device device, parallel::Communicator* ep = nullptr);

// The step's loss sums: present on the last pipeline stage, summed over pp, then dp.
models::LossSums reduce_losses(const models::LossSums& local, parallel::Communicator& pp,
                               parallel::Communicator& dp, Device device);

}  // namespace megatron::training
