#include "megatron/training/pipeline_runtime.h"

#include <algorithm>

namespace megatron::training {

using pipeline::ActionKind;

PipelineRuntime::PipelineRuntime(std::vector<const models::Model*> chunks,
                                 parallel::Communicator& pp, int64_t hidden_rows, int64_t hidden)
    : chunks_(std::move(chunks)), pp_(&pp), hidden_rows_(hidden_rows), hidden_(hidden) {
  MT_CHECK(!chunks_.empty(), "pipeline runtime without model chunks");
}

models::ModelActivations& PipelineRuntime::acquire(const Key& k) {
  MT_CHECK(!live_.count(k), "micro-batch ", k.first, " chunk ", k.second, " is already in flight");
  // Every chunk is the same model class, so pooled activations fit any of them.
  if (free_.empty()) free_.push_back(chunks_[static_cast<size_t>(k.second)]->make_activations());
  pool_.push_back(std::move(free_.back()));
  free_.pop_back();
  live_[k] = pool_.back().get();
  return *pool_.back();
}

void PipelineRuntime::release(const Key& k) {
  wait_sends(&k);  // its output may still be on its way (buffered sends)
  auto it = live_.find(k);
  MT_CHECK(it != live_.end(), "release of micro-batch ", k.first, " chunk ", k.second,
           " not in flight");
  for (auto p = pool_.begin(); p != pool_.end(); ++p) {
    if (p->get() == it->second) {  // keep the buffers for the next micro-batch
      free_.push_back(std::move(*p));
      pool_.erase(p);
      break;
    }
  }
  live_.erase(it);
}

Tensor PipelineRuntime::hidden_buffer(int mb) {
  return Tensor::empty({hidden_rows_, batch(mb).tokens.dim(1), hidden_},
                       chunks_.front()->activation_dtype(), chunks_.front()->device());
}

const models::MicroBatch& PipelineRuntime::batch(int mb) {
  auto it = batches_.find(mb);
  if (it != batches_.end()) return it->second;
  models::MicroBatch& b = batches_[mb];
  (*fill_)(mb, b);
  return b;
}

void PipelineRuntime::exchange(const std::vector<pipeline::Action>& actions, size_t begin,
                               size_t end) {
  std::vector<parallel::P2POp> ops;
  for (size_t i = begin; i < end; ++i) {
    const pipeline::Action& a = actions[i];
    const Key k{a.microbatch, a.chunk};
    const int tag = pipeline::p2p_tag(a.kind);
    switch (a.kind) {
      case ActionKind::SendActivation:
      case ActionKind::SendGrad: {
        const Tensor& buffer = a.kind == ActionKind::SendGrad
                                   ? grad_in_.at(k)
                                   : chunks_[a.chunk]->output(*live_.at(k));
        if (buffered_sends_)
          post_send(a, buffer);
        else
          ops.push_back({parallel::P2POp::Send, buffer, a.peer_stage, tag});
        break;
      }
      case ActionKind::RecvActivation:
        act_in_[k] = hidden_buffer(k.first);
        ops.push_back({parallel::P2POp::Recv, act_in_[k], a.peer_stage, tag});
        break;
      case ActionKind::RecvGrad:
        grad_out_[k] = hidden_buffer(k.first);
        ops.push_back({parallel::P2POp::Recv, grad_out_[k], a.peer_stage, tag});
        break;
      default:
        MT_CHECK(false, "compute action inside a communication batch");
    }
  }
  if (!ops.empty()) pp_->batch_isend_irecv(std::move(ops))->wait();
  for (size_t i = begin; i < end; ++i)  // a sent gradient is no longer needed here
    if (actions[i].kind == ActionKind::SendGrad)
      grad_in_.erase({actions[i].microbatch, actions[i].chunk});
}

void PipelineRuntime::post_send(const pipeline::Action& a, const Tensor& buffer) {
  auto work = pp_->batch_isend_irecv(
      {{parallel::P2POp::Send, buffer, a.peer_stage, pipeline::p2p_tag(a.kind)}});
  pending_sends_.push_back({std::move(work), a.kind, {a.microbatch, a.chunk}, buffer});
}

void PipelineRuntime::wait_sends(const Key* of_activation) {
  for (auto it = pending_sends_.begin(); it != pending_sends_.end();) {
    if (of_activation && !(it->kind == ActionKind::SendActivation && it->key == *of_activation)) {
      ++it;
      continue;
    }
    it->work->wait();
    it = pending_sends_.erase(it);
  }
}

int PipelineRuntime::virtual_stage_of(int chunk) const {
  return pipeline::virtual_stage(pp_->size(), pp_->rank(), chunk, placement_);
}

int PipelineRuntime::local_chunk(int v) const {
  const int pp = pp_->size(), vpp = static_cast<int>(chunks_.size());
  if (v < 0 || v >= pp * vpp || pipeline::stage_of(pp, v, placement_) != pp_->rank()) return -1;
  return pipeline::chunk_of(pp, v, placement_);
}

void PipelineRuntime::run_forward(const pipeline::Action& a, models::LossSums& loss) {
  const Key k{a.microbatch, a.chunk};
  const models::Model& chunk = *chunks_[a.chunk];
  const Tensor* in = nullptr;
  if (!chunk.stage().pre_process) {
    // The previous virtual stage on this rank (V placement): its output, copied.
    if (const int prev = local_chunk(virtual_stage_of(a.chunk) - 1); prev >= 0) {
      act_in_[k] = hidden_buffer(k.first);
      act_in_[k].copy_from(chunks_[prev]->output(*live_.at({a.microbatch, prev})));
    }
    in = &act_in_.at(k);
  }
  models::ModelActivations& act = acquire(k);
  loss += chunk.forward(act, batch(a.microbatch), in);
}

void PipelineRuntime::run_backward(const pipeline::Action& a, const models::LossWeights& weights,
                                   const models::Model::GradsReady& grads_ready) {
  const Key k{a.microbatch, a.chunk};
  const models::Model& chunk = *chunks_[a.chunk];
  models::MicroBatch mb = batch(a.microbatch);  // a shallow copy: tensors are shared
  if (split_.count(k))
    mb.info.weight_grads = &weight_grads_.try_emplace(k, &weight_grad_buffers_).first->second;
  models::ModelActivations& act = *live_.at(k);
  // The next virtual stage on this rank (V placement): its input gradient is this output's.
  if (const int next = local_chunk(virtual_stage_of(a.chunk) + 1);
      next >= 0 && !chunk.stage().post_process) {
    auto it = grad_in_.find({a.microbatch, next});
    MT_CHECK(it != grad_in_.end(), "pipeline runtime: backward of micro-batch ", a.microbatch,
             " chunk ", a.chunk, " before the backward of its next chunk on this stage");
    grad_out_[k] = std::move(it->second);
    grad_in_.erase(it);
  }
  const Tensor* d_out = chunk.stage().post_process ? nullptr : &grad_out_.at(k);
  Tensor* d_in = nullptr;
  if (!chunk.stage().pre_process) {
    grad_in_[k] = hidden_buffer(k.first);
    d_in = &grad_in_[k];
  }
  chunk.backward(act, mb, weights, grads_ready, d_out, d_in);
  // Queued weight gradients read copies, or this micro-batch's activations: those stay until
  // its W (WeightGradInputs::Stable).
  if (!split_.count(k)) release(k);
  act_in_.erase(k);
  grad_out_.erase(k);
}

models::LossSums PipelineRuntime::run(const std::vector<pipeline::Action>& actions,
                                      const FillMicroBatch& fill,
                                      const models::LossWeights& weights,
                                      pipeline::TimelineRecorder* timeline,
                                      const LastBackwardHooks* last_backward) {
  models::LossSums loss;
  batches_.clear();
  fill_ = &fill;
  size_t last_backward_at = actions.size();
  split_.clear();
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].kind == ActionKind::Backward) last_backward_at = i;
    if (actions[i].kind == ActionKind::WeightGrad)
      split_.insert({actions[i].microbatch, actions[i].chunk});
  }
  MT_CHECK(split_.empty() || last_backward == nullptr,
           "pipeline runtime: the last-backward hooks need every weight gradient computed in the "
           "backward (no WeightGrad actions)");
  for (size_t i = 0; i < actions.size();) {
    const pipeline::Action& a = actions[i];
    if (!pipeline::is_compute(a.kind)) {
      size_t end = i;
      while (end < actions.size() && !pipeline::is_compute(actions[end].kind)) ++end;
      exchange(actions, i, end);
      i = end;
      continue;
    }
    const Key k{a.microbatch, a.chunk};
    std::optional<pipeline::TimelineRecorder::Scope> scope;
    if (timeline) scope.emplace(*timeline, a.kind, a.microbatch, a.chunk);
    if (a.kind == ActionKind::Forward) {
      run_forward(a, loss);
    } else if (a.kind == ActionKind::Backward) {
      const bool hooked = last_backward != nullptr && i == last_backward_at;
      if (hooked && last_backward->before) last_backward->before();
      run_backward(a, weights, hooked ? last_backward->grads_ready : models::Model::GradsReady{});
    } else {
      auto q = weight_grads_.find(k);
      MT_CHECK(q != weight_grads_.end(), "pipeline runtime: weight gradients of micro-batch ",
               k.first, " chunk ", k.second, " before its backward");
      q->second.drain();
      weight_grads_.erase(q);
      release(k);
    }
    ++i;
  }
  wait_sends(nullptr);
  MT_CHECK(weight_grads_.empty(), "pipeline step ended with ", weight_grads_.size(),
           " backwards whose weight gradients never ran");
  MT_CHECK(live_.empty() && grad_in_.empty(), "pipeline step ended with ", live_.size(),
           " micro-batches in flight");
  return loss;
}

models::LossSums PipelineRuntime::forward_only(int num_microbatches, const FillMicroBatch& fill) {
  const int pp = pp_->size(), stage = pp_->rank();
  const int vpp = static_cast<int>(chunks_.size()), virtual_stages = pp * vpp;
  models::LossSums loss;
  batches_.clear();
  fill_ = &fill;
  for (int mb = 0; mb < num_microbatches; ++mb) {
    const models::MicroBatch& b = batch(mb);
    Tensor local;  // the previous virtual stage's output when it ran here
    for (int v = 0; v < virtual_stages; ++v) {
      const int c = local_chunk(v);
      if (c < 0) continue;
      const Key k{mb, c};
      const int prev = pipeline::stage_of(pp, std::max(v - 1, 0), placement_);
      const int next = pipeline::stage_of(pp, std::min(v + 1, virtual_stages - 1), placement_);
      if (v > 0) {
        act_in_[k] = hidden_buffer(k.first);
        if (prev == stage)
          act_in_[k].copy_from(local);
        else
          pp_->batch_isend_irecv({{parallel::P2POp::Recv, act_in_[k], prev, 0}})->wait();
      }
      models::ModelActivations& act = acquire(k);
      loss += chunks_[c]->forward(act, b, v > 0 ? &act_in_[k] : nullptr);
      if (v + 1 < virtual_stages) {
        if (next == stage)
          local = chunks_[c]->output(act).clone();
        else
          pp_->batch_isend_irecv({{parallel::P2POp::Send, chunks_[c]->output(act), next, 0}})
              ->wait();
      }
      release(k);
      act_in_.erase(k);
    }
  }
  return loss;
}

}  // namespace megatron::training
