#include "megatron/inference/causal_lm.h"

#include <cstring>

#include "megatron/backend/device_backends.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/core/device_memory.h"
#include "models/gpt/gpt_model.h"
#include "models/hf_checkpoint.h"

namespace megatron::inference {

namespace {

config::Recipe inference_recipe(config::Recipe r, int64_t seq_length, Device device) {
  r.training.precision = config::Precision::FP32;
  r.training.recompute = config::RecomputeGranularity::None;
  // (Picks the attention backend of the full forward as training would on that device.)
  r.training.device =
      device == Device::CUDA ? config::TrainingDevice::CUDA : config::TrainingDevice::CPU;
  r.parallel.pipeline = 1;
  r.parallel.virtual_pipeline.reset();
  r.parallel.pipeline_layers.clear();
  r.parallel.expert = 1;
  r.parallel.sequence_parallel = false;
  r.model.hidden_dropout = r.model.attention_dropout = 0.0;
  // The learned position table keeps the trained size ("auto" follows the training sequence,
  // which the generation length must not change).
  r.model.max_position_embeddings = r.model.max_positions();
  if (seq_length > 0) r.model.seq_length = seq_length;
  return r;
}

void require_device(Device device) {
  MT_INPUT_CHECK(device == Device::CPU || device == Device::CUDA, "inference runs on cpu or cuda");
  MT_INPUT_CHECK(device == Device::CPU || device_available(Device::CUDA),
                 "inference on cuda: no CUDA device is visible (or this build has no CUDA "
                 "backend: configure with -DMEGATRON_CUDA=ON)");
}

// The tensor-parallel group for the device's tensors (backend/device_backends.h): null when tp
// itself carries them (the CPU, one rank, tp already NCCL), else NCCL over tp's ranks.
std::unique_ptr<parallel::Communicator> device_group(Device device, parallel::Communicator& tp) {
  require_device(device);
  return backend::device_communicator(device, tp);
}

// Copies this rank's shard of a parameter out of the global tensor `full` (the model's global
// shape; saved rows past the checkpoint's vocabulary padding are zero), through a host copy
// when the weights live on a device.
void copy_shard(Parameter& p, const std::vector<float>& full) {
  checkpoint::TensorPiece whole, shard;
  whole.name = shard.name = p.name;
  whole.global_shape = whole.local_shape = shard.global_shape = p.global_shape;
  shard.local_shape = p.local_shape;
  shard.shard = p.shard;
  const bool host = p.weight.device() == Device::CPU;
  Tensor staged = host ? p.weight : Tensor::empty(p.weight.shape(), DType::F32);
  float* dst = staged.data<float>();
  checkpoint::for_each_overlap(whole.geometry(), shard.geometry(),
                               [&](const checkpoint::Overlap& o) {
                                 std::memcpy(dst + o.b_pos, full.data() + o.a_pos,
                                             static_cast<size_t>(o.length) * sizeof(float));
                               });
  if (!host) p.weight.copy_from(staged);
}

// Aux-loss-free balancing's expert bias steers the routing: each MoE layer's, from the checkpoint.
void load_expert_bias(checkpoint::Reader& reader, const models::ModelChunks& chunks,
                      const std::string& path) {
  if (!chunks.moe) return;
  for (auto& [layer, bias] : chunks.moe->all_expert_bias()) {
    const std::string name = "moe/expert_bias/layers." + std::to_string(layer);
    MT_INPUT_CHECK(reader.index().tensors.count(name), path, ": no tensor '", name,
                   "' (the model routes with an expert bias)");
    const std::vector<float> saved = reader.read_whole(name);
    MT_INPUT_CHECK(saved.size() == bias.size(), path, ": tensor '", name, "' has ", saved.size(),
                   " values for ", bias.size(), " experts");
    bias.assign(saved.begin(), saved.end());
  }
}

}  // namespace

LoadedModel::LoadedModel(const std::string& dir, std::optional<int64_t> iteration,
                         parallel::Communicator& tp, int64_t seq_length, Device device)
    : store(device) {
  require_device(device);
  checkpoint::Reader reader(dir, iteration);
  checkpoint_path = reader.index().path;
  recipe = inference_recipe(models::recipe_of_checkpoint(reader.index()), seq_length, device);
  recipe.parallel.tensor = tp.size();
  recipe.validate();
  chunks = models::build_model_chunks(recipe, recipe.model.vocab_size, store, tp, 0, 1);
  store.finalize();
  const int64_t vocab = chunks.vocab_size;
  const auto& tensors = reader.index().tensors;
  for (Parameter* p : store.params()) {
    const std::string name = "model/" + p->name;
    const auto it = tensors.find(name);
    MT_INPUT_CHECK(it != tensors.end(), checkpoint_path, ": no tensor '", name,
                   "' (the checkpoint does not hold the model its recipe describes)");
    std::vector<int64_t> saved = it->second.shape;
    const std::vector<int64_t> want(p->global_shape.begin(), p->global_shape.end());
    // Vocabulary tables: only the padding rows may differ.
    const bool vocab_rows = !saved.empty() && saved.size() == want.size() && saved[0] != want[0] &&
                            saved[0] >= vocab &&
                            std::equal(saved.begin() + 1, saved.end(), want.begin() + 1);
    MT_INPUT_CHECK(saved == want || vocab_rows, checkpoint_path, ": tensor '", name, "' has shape ",
                   Shape(saved.begin(), saved.end()).str(), ", the model needs ",
                   p->global_shape.str());
    int64_t row = 1;
    for (size_t i = 1; i < want.size(); ++i) row *= want[i];
    const std::vector<float> buf = reader.read_whole(name);
    std::vector<float> full(static_cast<size_t>(p->global_shape.numel()), 0.0f);
    const int64_t rows = std::min(saved.empty() ? 1 : saved[0], want.empty() ? 1 : want[0]);
    // Real rows only: padding rows of the saved table are not the model's.
    const int64_t real = vocab_rows ? std::min(rows, vocab) : rows;
    std::memcpy(full.data(), buf.data(), static_cast<size_t>(real * row) * sizeof(float));
    copy_shard(*p, full);
  }
  load_expert_bias(reader, chunks, checkpoint_path);
}

CausalLM::CausalLM(const std::string& dir, std::optional<int64_t> iteration,
                   parallel::Communicator& tp, int64_t seq_length, Device device)
    : device_tp_(device_group(device, tp)),
      tp_(device_tp_ ? device_tp_.get() : &tp),
      loaded_(dir, iteration, *tp_, seq_length, device) {
  MT_INPUT_CHECK(loaded_.recipe.model.arch != config::Arch::BERT, loaded_.checkpoint_path,
                 ": a BERT checkpoint is not a causal language model");
}

CausalLM::~CausalLM() = default;

Tensor gather_vocab_logits(const Tensor& local, parallel::Communicator& tp, int64_t vocab) {
  MT_CHECK(local.dtype() == DType::F32 && local.ndim() == 2,
           "gather_vocab_logits: logits must be fp32 [N, V/tp], got ", dtype_name(local.dtype()),
           " ", local.shape().str());
  const int64_t N = local.dim(0), Vl = local.dim(1), ranks = tp.size();
  // Gathered on the logits' device (an NCCL group takes device tensors), then one host copy.
  Tensor gathered;
  if (ranks > 1) {
    gathered = Tensor::empty({ranks, N, Vl}, DType::F32, local.device());
    tp.all_gather(local, gathered);
  } else {
    gathered = local;
  }
  gathered = gathered.to(Device::CPU);
  Tensor out = Tensor::empty({N, vocab}, DType::F32);
  const float* g = gathered.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < Vl && r * Vl + j < vocab; ++j)
        o[n * vocab + r * Vl + j] = g[(r * N + n) * Vl + j];
  return out;
}

KvCache CausalLM::make_cache() const {
  return KvCache(loaded_.recipe.model.num_layers, max_length());
}

CausalLM::Output CausalLM::forward(const Tensor& tokens, const Tensor& labels,
                                   KvCache* cache) const {
  MT_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::I32,
           "CausalLM::forward: tokens must "
           "be int32 [S, B], got ",
           tokens.shape().str());
  MT_CHECK(tokens.device() == Device::CPU, "CausalLM::forward: tokens must be on the host");
  const int64_t S = tokens.dim(0), B = tokens.dim(1), V = vocab_size();
  Tensor host_labels;
  if (labels.ndim() == 2) {
    MT_CHECK(labels.shape() == tokens.shape(), "CausalLM::forward: labels shape");
    host_labels = labels.to(Device::CPU);
  } else {
    host_labels = Tensor::empty({S, B}, DType::I32);
    for (int64_t i = 0; i < S * B; ++i) host_labels.data<int32_t>()[i] = models::kIgnoreIndex;
  }
  models::MicroBatch mb;
  mb.labels = host_labels;
  const int64_t targets = models::count_lm_targets(mb);  // on the host copy: no device sync
  // The model reads its ids on its own device (to() returns host tensors as they are).
  mb.tokens = tokens.to(device());
  mb.labels = host_labels.to(device());
  mb.info.training = false;
  mb.info.kv_cache = cache;
  const models::Model& model = loaded_.model();
  auto act = model.make_activations();
  const models::LossSums sums = model.forward(*act, mb);
  const auto* a = dynamic_cast<const models::GPTModel::Activations*>(act.get());
  MT_CHECK(a != nullptr, "CausalLM: not a decoder");
  Output out;
  out.logits = gather_vocab_logits(a->logits, *tp_, V).view({S, B, V});
  if (cache != nullptr) cache->length += S;
  out.loss_sum = sums.lm;
  out.targets = targets;
  return out;
}

}  // namespace megatron::inference
