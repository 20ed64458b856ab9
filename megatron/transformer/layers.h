#pragma once
// Basic layers as explicit forward/backward pairs: Linear (plain, column- or row-parallel over
// a tensor-parallel communicator), LayerNorm/RMSNorm, Embedding, Dropout over [S, B, D] rows.
// Gradient rule: parameter grads +=, activation grads =.
#include <memory>
#include <string>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/lora.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron {

enum class TPMode : uint8_t {
  None,    // replicated weight
  Column,  // output dim split: no communication forward, all-reduce of dx backward
  Row,     // input dim split: all-reduce of y forward, bias added after the reduction
};

// A parameter split along `dim` over the tensor-parallel ranks (none for one rank).
ShardSpec tp_shard(int dim, const parallel::Communicator& tp);

// Sequence parallelism (Megatron's): outside Column..Row regions activations are [S/tp, B, D]
// sequence slices. A sequence-parallel Column layer all-gathers its input along the sequence
// (and reduce-scatters its input gradient); a Row layer reduce-scatters its output (and
// all-gathers the output gradient).
class Linear {
 public:
  struct Ctx {
    Tensor input;  // view of the caller's input (a sequence slice with sequence parallelism)
    Tensor lora_h, lora_scratch, lora_x;  // LoRA: scale * A x, backward scratch, dropped input
  };
  // Weight global shape [out, in] (or `weight_shape` whose product matches, e.g. [2, F, D] for
  // gated MLPs so every shard holds its own gate and up halves).
  // lora.rank > 0 adds a LoRA adapter (megatron/transformer/lora.h) to the weight.
  Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias,
         TPMode mode, parallel::Communicator& tp, float init_std, Shape weight_shape = {},
         bool sequence_parallel = false, const LoraSpec& lora = {});
  ~Linear();

  int64_t local_in() const { return local_in_; }
  int64_t local_out() const { return local_out_; }
  // mb: the micro-batch (its LoRA dropout mask); null: no dropout.
  void forward(Ctx& ctx, const Tensor& x, Tensor& y, const MicroBatchInfo* mb = nullptr) const;
  // dx may be null (first layer); writes dx, accumulates weight/bias grads (queued for the
  // schedule's W when mb carries a weight-gradient queue: megatron/transformer/weight_grads.h).
  // dy_is_state: dy is a buffer of the caller's per-micro-batch state, not rewritten before
  // the W (with MicroBatchInfo::layer_states_kept the queue then reads it in place).
  void backward(Ctx& ctx, const Tensor& dy, Tensor* dx, const MicroBatchInfo* mb = nullptr,
                bool dy_is_state = false) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  Tensor weight_2d(const Tensor& t) const { return t.view({local_out_, local_in_}); }
  // Row-parallel LoRA: the full update of rows h, added to y (all rows, or this rank's
  // sequence slice under sequence parallelism).
  void add_row_lora(Ctx& ctx, const Tensor& x, Tensor& y, const MicroBatchInfo* mb) const;
  // The weight and bias gradients of input x and output gradient dy (full sequence), each read
  // in place or copied when queued.
  void weight_grads(const Tensor& x, const Tensor& dy, const MicroBatchInfo* mb,
                    WeightGradInputs x_kind, WeightGradInputs dy_kind) const;
  std::unique_ptr<LoRAAdapter> lora_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  TPMode mode_;
  parallel::Communicator* tp_;
  int64_t local_in_, local_out_;
  bool sp_;  // sequence parallel (only meaningful with tp > 1)
};

// Where a backward accumulates p's gradient: p.grad, or for a frozen p (LoRA's base) `scratch`,
// zeroed, whose (small) contents are dropped.
Tensor& grad_or_scratch(Parameter& p, Tensor& scratch, Device device);

class Norm {
 public:
  enum class Kind : uint8_t { LayerNorm, RMSNorm };
  struct Ctx {
    Tensor input, mean, rstd;
    Tensor frozen_dw, frozen_db;  // scratch gradients of frozen weights (dropped)
    Tensor gain, ones;            // zero-centered gamma: 1 + weight (fp32)
  };
  // sequence_parallel: the norm sees sequence slices, so its gradients are tensor-parallel
  // partial sums (Parameter::tp_partial_grad). zero_centered_gamma (Megatron-Core's
  // layernorm_zero_centered_gamma; Gemma's RMSNorm): the weight starts at 0 and the norm scales
  // by 1 + weight.
  Norm(ParamStore& store, const std::string& name, int64_t dim, Kind kind, float eps,
       bool sequence_parallel = false, bool zero_centered_gamma = false);
  void forward(Ctx& ctx, const Tensor& x, Tensor& y) const;
  void backward(Ctx& ctx, const Tensor& dy, Tensor& dx) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Kind kind_;
  float eps_;
  int64_t dim_;
  bool zero_centered_;
  Device device_;  // the store's: where the statistics live
};

// What a norm scales by: `w` itself, or with zero-centered gamma 1 + w, computed into `gain`
// (fp32; `ones` is scratch). The weight's gradient is the gain's either way.
const Tensor& norm_gain(const Tensor& w, bool zero_centered, Tensor& gain, Tensor& ones);

// Vocab-parallel embedding table [V_padded, D], split over tensor parallel along the vocab.
class Embedding {
 public:
  struct Ctx {
    Tensor ids;
  };
  // sequence_parallel: forward reduce-scatters the vocab-partial lookups into [S/tp, B, D]
  // slices (instead of all-reducing), backward all-gathers the slice gradients.
  // share_existing: when the store already holds the table (a tied output layer in a later
  // chunk of the same rank: ZB-V's V placement), use that one (gradients sum in place).
  Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t dim,
            parallel::Communicator& tp, float init_std, bool sequence_parallel = false,
            bool share_existing = false);
  void forward(Ctx& ctx, const Tensor& ids, Tensor& out) const;
  // The table's gradient (queued for W when mb carries a weight-gradient queue).
  void backward(Ctx& ctx, const Tensor& dout, const MicroBatchInfo* mb = nullptr) const;
  Parameter& table() const { return *table_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t local_vocab() const { return local_vocab_; }

 private:
  Parameter* table_ = nullptr;
  parallel::Communicator* tp_;
  int64_t vocab_start_, local_vocab_;
  bool sp_;
  Device device_;           // the store's
  mutable Tensor scratch_;  // full-sequence partial lookups / gathered gradient
};

// Where a [S_local, B, D] activation sits in the global [S, global batch, D] tensor.
struct ActivationSlice {
  int64_t batch_offset = 0;            // global sample index of local sample 0
  int64_t seq_offset = 0;              // global position of local row 0 (sequence parallel)
  int64_t seq_total = 0;               // full sequence length (0 = the tensor's own S)
  kernels::ContextChunks chunks = {};  // context parallelism: local rows -> global positions
};

// The slice of micro-batch mb whose local sequence is local_seq rows: all of it, or with
// sequence parallelism over tp this rank's part of the local_seq * tp positions (of the
// context-parallel rank's rows under context parallelism).
ActivationSlice activation_slice(const MicroBatchInfo& mb, int64_t local_seq,
                                 const parallel::Communicator& tp, bool sequence_parallel);

// Inverted dropout on activations laid out [S, B, D]: element (s, b, d) uses Philox index
// ((b_global * S_total + s_global) * D + d), so masks depend neither on micro-batch size,
// data-parallel split nor sequence-parallel split.
void dropout_sbd_forward(const Tensor& x, Tensor& y, float p, const DropoutSite& site,
                         const ActivationSlice& slice);
void dropout_sbd_backward(const Tensor& dy, Tensor& dx, float p, const DropoutSite& site,
                          const ActivationSlice& slice);

}  // namespace megatron
