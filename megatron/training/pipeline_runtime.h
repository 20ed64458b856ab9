#pragma once
// Executes a pipeline schedule (megatron/pipeline/schedule.h) for one training step on this
// rank: forward/backward of its model chunks per micro-batch, and the point-to-point exchange
// of activations and gradients with neighbouring stages. Each maximal run of send/recv
// actions is one batched isend/irecv, waited before the next compute. Every layout runs through
// it: without pipelining it is one stage (the schedule then alternates forward and backward).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/timeline.h"
#include "megatron/transformer/weight_grads.h"
#include "models/model.h"

namespace megatron::training {

class PipelineRuntime {
 public:
  // chunks[c] is this rank's model chunk c (virtual stage c * pp + stage, or see set_placement).
  PipelineRuntime(std::vector<const models::Model*> chunks, parallel::Communicator& pp,
                  int64_t hidden_rows_per_sample_seq /* Sl */, int64_t hidden);

  // Fills micro-batch `mb` of the step (tokens, labels, info).
  using FillMicroBatch = std::function<void(int mb, models::MicroBatch& out)>;
  // Around the step's last backward action (when given): `before` runs first, and the model
  // reports its finished gradients to `grads_ready` (data-parallel reduction overlapping the
  // backward; meaningful when this rank's parameters all belong to one chunk).
  struct LastBackwardHooks {
    std::function<void()> before;
    models::Model::GradsReady grads_ready;
  };
  // Sends that do not wait for their receives (pipeline::Schedule::buffered_sends): each send is
  // posted on its own and waited for when its buffer is released or at the end of the step;
  // only receives are waited for before the next compute.
  void set_buffered_sends(bool on) { buffered_sends_ = on; }
  // Where this rank's chunks sit among the virtual stages (default interleaved: chunk c is
  // virtual stage c * pp + stage). With the V placement a chunk whose neighbouring virtual stage
  // is on this rank takes its input (or output gradient) from it by a copy, not a message.
  void set_placement(pipeline::Placement placement) { placement_ = placement; }
  // Runs the actions; returns the summed losses (non-zero only where the last virtual stage is).
  // A Backward whose (micro-batch, chunk) has a WeightGrad later in the list queues its weight
  // gradients (megatron/transformer/weight_grads.h); the WeightGrad runs them.
  models::LossSums run(const std::vector<pipeline::Action>& actions, const FillMicroBatch& fill,
                       const models::LossWeights& weights, pipeline::TimelineRecorder* timeline,
                       const LastBackwardHooks* last_backward = nullptr);
  // Forward only over all virtual stages in order (evaluation); returns the summed losses.
  models::LossSums forward_only(int num_microbatches, const FillMicroBatch& fill);

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  models::ModelActivations& acquire(const Key& k);
  void release(const Key& k);
  Tensor hidden_buffer(int mb);
  void exchange(const std::vector<pipeline::Action>& actions, size_t begin, size_t end);
  void post_send(const pipeline::Action& a, const Tensor& buffer);
  void wait_sends(const Key* of_activation);  // null: every pending send
  void run_forward(const pipeline::Action& a, models::LossSums& loss);
  void run_backward(const pipeline::Action& a, const models::LossWeights& weights,
                    const models::Model::GradsReady& grads_ready);
  // The chunk of this rank holding virtual stage v, or -1 when another rank holds it.
  int local_chunk(int v) const;
  int virtual_stage_of(int chunk) const;
  const models::MicroBatch& batch(int mb);

  std::vector<const models::Model*> chunks_;
  parallel::Communicator* pp_;
  int64_t hidden_rows_, hidden_;
  const FillMicroBatch* fill_ = nullptr;  // during run() / forward_only()
  std::map<int, models::MicroBatch> batches_;
  std::map<Key, models::ModelActivations*> live_;
  std::vector<std::unique_ptr<models::ModelActivations>> pool_, free_;
  std::map<Key, Tensor> act_in_, grad_out_, grad_in_;
  WeightGradBuffers weight_grad_buffers_;        // the queues' copies, kept between steps
  std::map<Key, WeightGradQueue> weight_grads_;  // backwards whose W is still to run
  std::set<Key> split_;                          // (micro-batch, chunk) with a WeightGrad
  bool buffered_sends_ = false;
  pipeline::Placement placement_ = pipeline::Placement::Interleaved;
  struct PendingSend {
    std::unique_ptr<parallel::Work> work;
    pipeline::ActionKind kind;
    Key key;
    Tensor buffer;  // kept alive until the send completes
  };
  std::vector<PendingSend> pending_sends_;
};

}  // namespace megatron::training
