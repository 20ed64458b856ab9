#pragma once
// Basic layers as explicit forward/backward pairs: Linear (plain, column- or row-parallel over
// a tensor-parallel communicator), LayerNorm/RMSNorm, Embedding, Dropout over [S, B, D] rows.
// Gradient rule: parameter grads +=, activation grads =.
#include <string>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/parameter.h"

namespace megatron {

enum class TPMode : uint8_t {
  None,    // replicated weight
  Column,  // output dim split: no communication forward, all-reduce of dx backward
  Row,     // input dim split: all-reduce of y forward, bias added after the reduction
};

class Linear {
 public:
  struct Ctx {
    Tensor input;  // view of the caller's input (kept alive by the caller's context)
  };
  // Weight global shape [out, in] (or `weight_shape` whose product matches, e.g. [2, F, D] for
  // gated MLPs so every shard holds its own gate and up halves).
  Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias,
         TPMode mode, parallel::Communicator& tp, float init_std, Shape weight_shape = {});

  int64_t local_in() const { return local_in_; }
  int64_t local_out() const { return local_out_; }
  void forward(Ctx& ctx, const Tensor& x, Tensor& y) const;
  // dx may be null (first layer); writes dx, accumulates weight/bias grads.
  void backward(Ctx& ctx, const Tensor& dy, Tensor* dx) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  Tensor weight_2d(const Tensor& t) const { return t.view({local_out_, local_in_}); }
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  TPMode mode_;
  parallel::Communicator* tp_;
  int64_t local_in_, local_out_;
};

class Norm {
 public:
  enum class Kind : uint8_t { LayerNorm, RMSNorm };
  struct Ctx {
    Tensor input, mean, rstd;
  };
  Norm(ParamStore& store, const std::string& name, int64_t dim, Kind kind, float eps);
  void forward(Ctx& ctx, const Tensor& x, Tensor& y) const;
  void backward(Ctx& ctx, const Tensor& dy, Tensor& dx) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Kind kind_;
  float eps_;
  int64_t dim_;
};

// Vocab-parallel embedding table [V_padded, D], split over tensor parallel along the vocab.
class Embedding {
 public:
  struct Ctx {
    Tensor ids;
  };
  Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t dim,
            parallel::Communicator& tp, float init_std);
  void forward(Ctx& ctx, const Tensor& ids, Tensor& out) const;
  void backward(Ctx& ctx, const Tensor& dout) const;
  Parameter& table() const { return *table_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t local_vocab() const { return local_vocab_; }

 private:
  Parameter* table_ = nullptr;
  parallel::Communicator* tp_;
  int64_t vocab_start_, local_vocab_;
};

// Inverted dropout on activations laid out [S, B, D] (a slice of the global batch starting at
// MicroBatchInfo::batch_offset): element (s, b, d) uses Philox index ((b_global * S + s) * D + d)
// so masks do not depend on micro-batch size or data-parallel split.
void dropout_sbd_forward(const Tensor& x, Tensor& y, float p, const DropoutSite& site,
                         int64_t batch_offset);
void dropout_sbd_backward(const Tensor& dy, Tensor& dx, float p, const DropoutSite& site,
                          int64_t batch_offset);

}  // namespace megatron
