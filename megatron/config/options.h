#pragma once
// The named options of a recipe (model.arch, training.precision, ...): enum classes from the
// parser on, read and written by their names, so the rest of the code never compares strings.
// Each enum's names are listed once, in enum order, in its OptionNames specialization.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace megatron::config {

enum class Arch : uint8_t { GPT, LLaMA, BERT };
enum class Normalization : uint8_t { LayerNorm, RMSNorm };
// gelu: tanh-approximated (GPT-2's gelu_new); gelu_exact: x Phi(x) (BERT's, PyTorch's F.gelu).
// quick_geglu: quick GELU, x sigmoid(1.702 x), as the gate of a gated unit (Megatron-Core's
// quick_gelu with gated_linear_unit; GPT-OSS's experts with glu_linear_offset 1 and
// activation_func_clamp_value 7).
enum class Activation : uint8_t { GeLU, SwiGLU, GeLUExact, GeGLU, QuickGeGLU };
enum class PositionEmbedding : uint8_t { Learned, Rope, Yarn };
// unfused: probabilities [B, H, S, S] saved for backward (kernels/cpu/attention.h);
// flash: fused kernels saving only the row log-sum-exp (kernels/*/flash_attention.h);
// fused: cuDNN's fused attention (cuda only; megatron/backend/cuda/cudnn_attention.h), an
// error where cuDNN cannot run a layer; flash there means our own kernels;
// auto: on cuda cuDNN's where it runs, our flash kernels elsewhere; on the cpu unfused below
// 1024 positions (a few % faster there), flash from 1024 on (ModelConfig::flash_attention).
enum class AttentionBackend : uint8_t { Auto, Unfused, Flash, Fused };
// The attention softmax (Megatron-Core's softmax_type): vanilla, off-by-one (a zero logit in
// every row's denominator) or learnable (a learned logit per head: attention sinks, GPT-OSS's).
enum class SoftmaxType : uint8_t { Vanilla, OffByOne, Learnable };
enum class TrainingDevice : uint8_t { CPU, CUDA };
enum class Precision : uint8_t { FP32, BF16, FP16 };
enum class RecomputeGranularity : uint8_t { None, Full, Selective };
// sgd uses beta1 as momentum; onebit_adam is AdamW until optimizer.freeze_step, then 1-bit Adam
enum class OptimizerType : uint8_t { AdamW, SGD, OnebitAdam };
enum class LrDecay : uint8_t { Cosine, Linear, Constant };
// Mixture of experts (model.moe_*; megatron/transformer/moe/router.h says what each does).
enum class MoeScoreFunction : uint8_t { Softmax, Sigmoid };
enum class MoeLoadBalancing : uint8_t { AuxLoss, SeqAuxLoss, GlobalAuxLoss, None };
enum class MoeTokenDropPolicy : uint8_t { Probs, Position };
// What each data-parallel rank keeps only its shard of (Megatron-Core's
// data_parallel_sharding_strategy): nothing, the optimizer state (ZeRO-1, the distributed
// optimizer), + the gradients (ZeRO-2), + the parameters (ZeRO-3 / FSDP).
enum class ShardingStrategy : uint8_t { NoShard, Optim, OptimGrads, OptimGradsParams };
// How context parallelism's attention reaches the other ranks' keys and values (Megatron-Core's
// cp_comm_type; megatron/transformer/context_parallel.h): a ring of point-to-point block
// transfers, one all-gather, or Ulysses all-to-alls.
enum class CpCommType : uint8_t { P2P, AllGather, A2A };
// How data-parallel gradients travel (parallel.grad_compression; optimizer/topk_compression.h):
// whole (an all-reduce), or each rank's largest entries per bucket with the rest kept as an
// error-feedback residual for the next step.
enum class GradCompression : uint8_t { None, Topk };
// The pipeline schedule (parallel.pipeline_schedule; megatron/pipeline): Megatron's 1F1B, its
// interleaved 1F1B (parallel.virtual_pipeline chunks), or the schedules that split backwards into
// input and weight gradients: zero-bubble ZB-H1 and ZB-V (pipeline/zero_bubble.h) and DeepSeek's
// DualPipeV (pipeline/dualpipe_v.h).
enum class PipelineSchedule : uint8_t { OneFOneB, Interleaved, ZbH1, ZbV, DualPipeV };
// The schedules with ZB-V's V placement of two chunks per stage (zb_v, dualpipe_v), and those
// that split backwards into input and weight gradients (zb_h1 and the V schedules).
constexpr bool v_placement(PipelineSchedule s) {
  return s == PipelineSchedule::ZbV || s == PipelineSchedule::DualPipeV;
}
constexpr bool splits_backward(PipelineSchedule s) {
  return s == PipelineSchedule::ZbH1 || v_placement(s);
}
// What a suspicious step (non-finite or spiking loss or gradient norm) triggers
// (training.rerun_mode; megatron/training/rerun.h): nothing, a re-run that stops the run (or
// skips the batch) when the fault repeats, or a re-run whose verdict is only reported.
enum class RerunMode : uint8_t { Disabled, Validate, Report };
// A fault injected on purpose (training.error_injection_type, Megatron's names): one that a
// re-run does not see again, or one that every run of the step sees (as bad data would give).
enum class ErrorInjection : uint8_t { None, Transient, Persistent };
// What one statistic of the q/k norms spans: a head (Qwen3, Gemma 3) or a token's whole
// query or key projection (OLMo-2).
enum class QkNormSpan : uint8_t { Head, Projection };
// Where the fp32 master weights and Adam moments live with training.device: cuda.
enum class OptimizerOffload : uint8_t { None, CPU };
// data.tokenizer.type and the tools' --tokenizer-type, by Megatron's --tokenizer-type names
// (data/tokenizer.h says what each reads); NullTokenizer: pre-tokenized data, a vocab size only.
enum class TokenizerType : uint8_t {
  GPT2BPE,
  SentencePiece,
  BertWordPieceLowerCase,
  BertWordPieceCase,
  Byte,
  HuggingFace,
  Null
};

template <typename E>
struct OptionNames;
#define MT_OPTION_NAMES(E, ...)                        \
  template <>                                          \
  struct OptionNames<E> {                              \
    static constexpr std::array names = {__VA_ARGS__}; \
  }
MT_OPTION_NAMES(Arch, "gpt", "llama", "bert");
MT_OPTION_NAMES(Normalization, "layernorm", "rmsnorm");
MT_OPTION_NAMES(Activation, "gelu", "swiglu", "gelu_exact", "geglu", "quick_geglu");
MT_OPTION_NAMES(PositionEmbedding, "learned", "rope", "yarn");
MT_OPTION_NAMES(AttentionBackend, "auto", "unfused", "flash", "fused");
MT_OPTION_NAMES(SoftmaxType, "vanilla", "off-by-one", "learnable");
MT_OPTION_NAMES(TrainingDevice, "cpu", "cuda");
MT_OPTION_NAMES(Precision, "fp32", "bf16", "fp16");
MT_OPTION_NAMES(RecomputeGranularity, "none", "full", "selective");
MT_OPTION_NAMES(OptimizerType, "adamw", "sgd", "onebit_adam");
MT_OPTION_NAMES(LrDecay, "cosine", "linear", "constant");
MT_OPTION_NAMES(MoeScoreFunction, "softmax", "sigmoid");
MT_OPTION_NAMES(MoeLoadBalancing, "aux_loss", "seq_aux_loss", "global_aux_loss", "none");
MT_OPTION_NAMES(MoeTokenDropPolicy, "probs", "position");
MT_OPTION_NAMES(ShardingStrategy, "no_shard", "optim", "optim_grads", "optim_grads_params");
MT_OPTION_NAMES(OptimizerOffload, "none", "cpu");
MT_OPTION_NAMES(CpCommType, "p2p", "all_gather", "a2a");
MT_OPTION_NAMES(GradCompression, "none", "topk");
MT_OPTION_NAMES(PipelineSchedule, "1f1b", "interleaved", "zb_h1", "zb_v", "dualpipe_v");
MT_OPTION_NAMES(RerunMode, "disabled", "validate", "report");
MT_OPTION_NAMES(ErrorInjection, "none", "transient_error", "persistent_error");
MT_OPTION_NAMES(QkNormSpan, "head", "projection");
MT_OPTION_NAMES(TokenizerType, "GPT2BPETokenizer", "SentencePieceTokenizer",
                "BertWordPieceLowerCase", "BertWordPieceCase", "ByteTokenizer",
                "HuggingFaceTokenizer", "NullTokenizer");
#undef MT_OPTION_NAMES

template <typename E>
concept Option = requires {
  OptionNames<E>::names;
};

template <Option E>
constexpr std::string_view option_name(E e) {
  return OptionNames<E>::names[static_cast<size_t>(e)];
}

template <Option E>
std::optional<E> parse_option(std::string_view name) {
  const auto& names = OptionNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

// "a, b, c": the names, for messages.
template <Option E>
std::string option_list() {
  std::string s;
  for (const char* n : OptionNames<E>::names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace megatron::config
