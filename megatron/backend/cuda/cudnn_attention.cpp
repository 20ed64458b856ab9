#include "megatron/backend/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/device.h"
#include "megatron/core/error.h"
#include "megatron/core/format.h"

// The frontend's headers come from tools/fetch_cudnn_frontend.py (kernels/CMakeLists.txt adds
// their folder to this file alone); without them the fused path reports itself unavailable.
#if __has_include(<cudnn_frontend.h>)
#include <cudnn_frontend.h>
#define MEGATRON_CUDNN_FRONTEND 1
#else
#define MEGATRON_CUDNN_FRONTEND 0
#endif

namespace megatron::cuda {
namespace {

using kernels::AttentionOptions;
using kernels::AttentionShape;

constexpr int64_t kMaxHeadDim = 128;

// What cuDNN's SDPA cannot express or what we do not hand it: checked before any graph is built.
std::string static_refusal(const AttentionShape& s, const AttentionOptions& opt, DType dtype) {
  if (!MEGATRON_CUDNN_FRONTEND)
    return "this build has no cuDNN frontend headers (tools/fetch_cudnn_frontend.py could not "
           "fetch them when CMake configured the build)";
  if (dtype != DType::BF16 && dtype != DType::F16)
    return concat("cuDNN's fused attention takes bf16 or fp16, not ", dtype_name(dtype));
  if (s.Dh % 8 != 0 || s.Dh > kMaxHeadDim)
    return concat("head dim ", s.Dh, " (cuDNN's fused attention here: a multiple of 8 up to ",
                  kMaxHeadDim, ")");
  if (s.G <= 0 || s.H % s.G != 0) return concat(s.H, " heads in ", s.G, " groups");
  if (opt.dropout_p > 0.0f)
    return "attention dropout (cuDNN's own RNG could not follow the Philox masks of the CPU)";
  if (opt.key_mask != nullptr) return "a key mask (cuDNN expresses only per-sequence lengths)";
  if (opt.segment_ids != nullptr) return "packed documents (segment ids)";
  if (opt.window > 0 && !opt.causal) return "a sliding window without the causal mask";
  return {};
}

#if MEGATRON_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

struct Key {
  int64_t S, B, H, G, Dh, window;
  bool causal;
  uint32_t scale_bits;
  DType dtype;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 0;
    for (int64_t v : {k.S, k.B, k.H, k.G, k.Dh, k.window, static_cast<int64_t>(k.causal),
                      static_cast<int64_t>(k.scale_bits), static_cast<int64_t>(k.dtype)})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

Key key_of(const AttentionShape& s, const AttentionOptions& opt, DType dtype) {
  uint32_t bits = 0;
  std::memcpy(&bits, &opt.scale, sizeof bits);
  return Key{s.S, s.B, s.H, s.G, s.Dh, opt.window, opt.causal, bits, dtype};
}

// Where Q, K, V, O and the stats lie, as cuDNN's [batch, heads, seq, dim] dims and strides (in
// elements). qkv rows are [B, G, (r + 2), Dh] with r = H / G query heads per group.
struct Layout {
  int64_t r, row;  // query heads per group; elements per sequence position
  bool pack_q;     // r > 1: the query heads are no affine stride of qkv
  std::vector<int64_t> q_dim, q_stride, kv_dim, kv_stride, o_stride, stats_dim, stats_stride;
  int64_t k_offset, v_offset;  // elements from the start of qkv
};

Layout layout_of(const Key& k) {
  Layout l;
  l.r = k.H / k.G;
  l.row = k.B * k.G * (l.r + 2) * k.Dh;
  l.pack_q = l.r > 1;
  l.q_dim = {k.B, k.H, k.S, k.Dh};
  l.o_stride = {k.H * k.Dh, k.Dh, k.B * k.H * k.Dh, 1};
  l.q_stride = l.pack_q ? l.o_stride : std::vector<int64_t>{k.G * 3 * k.Dh, 3 * k.Dh, l.row, 1};
  l.kv_dim = {k.B, k.G, k.S, k.Dh};
  l.kv_stride = {k.G * (l.r + 2) * k.Dh, (l.r + 2) * k.Dh, l.row, 1};
  l.stats_dim = {k.B, k.H, k.S, 1};
  l.stats_stride = {k.H * k.S, k.S, 1, 1};
  l.k_offset = l.r * k.Dh;
  l.v_offset = (l.r + 1) * k.Dh;
  return l;
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorPtr input(fe::graph::Graph& g, const char* name, Uid uid, const std::vector<int64_t>& dim,
                const std::vector<int64_t>& stride) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

void output(const TensorPtr& t, Uid uid, const std::vector<int64_t>& dim,
            const std::vector<int64_t>& stride) {
  t->set_output(true).set_uid(uid).set_dim(dim).set_stride(stride);
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The causal diagonal and the sliding window (query i sees key j when i - j < window).
template <typename Attributes>
void set_mask(Attributes& a, const Key& k) {
  if (k.causal) {
    a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    a.set_diagonal_band_right_bound(0);
  }
  if (k.window > 0) a.set_diagonal_band_left_bound(static_cast<int>(k.window));
}

float scale_of(const Key& k) {
  float scale = 0.0f;
  std::memcpy(&scale, &k.scale_bits, sizeof scale);
  return scale;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Key& k, const Layout& l) {
  auto g = new_graph(k.dtype);
  auto q = input(*g, "Q", kQ, l.q_dim, l.q_stride);
  auto kt = input(*g, "K", kK, l.kv_dim, l.kv_stride);
  auto v = input(*g, "V", kV, l.kv_dim, l.kv_stride);
  auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
      scale_of(k));
  set_mask(a, k);
  auto [o, stats] = g->sdpa(q, kt, v, a);
  output(o, kO, l.q_dim, l.o_stride);
  output(stats, kStats, l.stats_dim, l.stats_stride);
  stats->set_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Key& k, const Layout& l) {
  auto g = new_graph(k.dtype);
  auto q = input(*g, "Q", kQ, l.q_dim, l.q_stride);
  auto kt = input(*g, "K", kK, l.kv_dim, l.kv_stride);
  auto v = input(*g, "V", kV, l.kv_dim, l.kv_stride);
  auto o = input(*g, "O", kO, l.q_dim, l.o_stride);
  auto d_o = input(*g, "dO", kDO, l.q_dim, l.o_stride);
  auto stats = input(*g, "Stats", kStats, l.stats_dim, l.stats_stride);
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto a =
      fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale_of(k));
  set_mask(a, k);
  auto [dq, dk, dv] = g->sdpa_backward(q, kt, v, o, d_o, stats, a);
  output(dq, kDQ, l.q_dim, l.q_stride);
  output(dk, kDK, l.kv_dim, l.kv_stride);
  output(dv, kDV, l.kv_dim, l.kv_stride);
  return g;
}

// Empty when the graph built (an execution plan exists on this GPU), else cuDNN's reason.
std::string build(fe::graph::Graph& g, cudnnHandle_t handle, const char* what) {
  fe::error_t e = g.validate();
  if (e.is_good()) e = g.build_operation_graph(handle);
  if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g.check_support();
  if (e.is_good()) e = g.build_plans();
  return e.is_good() ? std::string{} : concat(what, " graph: ", e.get_message());
}

struct Plans {
  std::string refusal;  // empty: both graphs built
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t fwd_workspace = 0, bwd_workspace = 0;
};

// One cuDNN handle and the built graphs of one device (kept until exit, as gemm_context).
class Context {
 public:
  Context() { MT_CUDNN_CHECK(cudnnCreate(&handle_)); }
  cudnnHandle_t handle() const { return handle_; }
  std::mutex& mutex() { return mutex_; }

  const Plans& plans(const Key& k) {  // (mutex held)
    auto it = plans_.find(k);
    if (it == plans_.end()) it = plans_.emplace(k, make_plans(k)).first;
    return it->second;
  }

 private:
  Plans make_plans(const Key& k) const {
    Plans p;
    const Layout l = layout_of(k);
    try {
      p.fwd = forward_graph(k, l);
      p.refusal = build(*p.fwd, handle_, "forward");
      if (p.refusal.empty()) {
        p.bwd = backward_graph(k, l);
        p.refusal = build(*p.bwd, handle_, "backward");
      }
      if (p.refusal.empty()) {
        p.fwd_workspace = p.fwd->get_workspace_size();
        p.bwd_workspace = p.bwd->get_workspace_size();
      }
    } catch (const std::exception& e) {  // the frontend throws on some malformed graphs
      p.refusal = e.what();
    }
    if (!p.refusal.empty()) p.fwd = p.bwd = nullptr;
    return p;
  }

  cudnnHandle_t handle_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<Key, Plans, KeyHash> plans_;
};

Context& context() {
  const int device = current_device();
  constexpr int kMaxDevices = 64;
  MT_CHECK(device < kMaxDevices, "cudnn attention: device ", device, " beyond ", kMaxDevices);
  static std::mutex mutex;
  static std::array<Context*, kMaxDevices> contexts{};
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts[device] == nullptr) contexts[device] = new Context();
  return *contexts[device];
}

void execute(Context& c, const fe::graph::Graph& g, int64_t workspace_bytes,
             std::unordered_map<int64_t, void*>& pack, cudaStream_t stream, const char* what) {
  DeviceMemory ws(device_allocator(), static_cast<size_t>(workspace_bytes), stream);
  MT_CUDNN_CHECK(cudnnSetStream(c.handle(), stream));
  fe::error_t e = g.execute(c.handle(), pack, workspace_bytes > 0 ? ws.get() : nullptr);
  MT_CHECK(e.is_good(), "cuDNN fused attention ", what, ": ", e.get_message());
}

// The packed query heads [S, B, H, Dh] <-> their rows inside qkv (one 2-D copy).
void copy_queries(const Layout& l, const Key& k, const void* from, void* to, bool into_qkv,
                  cudaStream_t stream) {
  const size_t el = 2, width = static_cast<size_t>(l.r * k.Dh) * el;
  const size_t qkv_pitch = static_cast<size_t>((l.r + 2) * k.Dh) * el;
  const size_t rows = static_cast<size_t>(k.S * k.B * k.G);
  MT_CUDA_CHECK(cudaMemcpy2DAsync(to, into_qkv ? qkv_pitch : width, from,
                                  into_qkv ? width : qkv_pitch, width, rows,
                                  cudaMemcpyDeviceToDevice, stream));
}

const Plans& checked_plans(Context& c, const AttentionShape& s, const AttentionOptions& opt,
                           DType dtype, Key& key) {
  const std::string refusal = static_refusal(s, opt, dtype);
  MT_CHECK(refusal.empty(), "cuDNN fused attention cannot run this problem: ", refusal);
  key = key_of(s, opt, dtype);
  const Plans& p = c.plans(key);
  MT_CHECK(p.refusal.empty(), "cuDNN fused attention cannot run this problem: ", p.refusal);
  return p;
}

char* at(const void* base, int64_t elements) {
  return static_cast<char*>(const_cast<void*>(base)) + elements * 2;
}
#endif  // MEGATRON_CUDNN_FRONTEND

}  // namespace

CudnnAttentionSupport cudnn_attention_support(const AttentionShape& s, const AttentionOptions& opt,
                                              DType dtype) {
  CudnnAttentionSupport r;
  r.reason = static_refusal(s, opt, dtype);
#if MEGATRON_CUDNN_FRONTEND
  if (r.reason.empty()) {
    Context& c = context();
    std::lock_guard<std::mutex> lock(c.mutex());
    r.reason = c.plans(key_of(s, opt, dtype)).refusal;
  }
#endif
  r.supported = r.reason.empty();
  return r;
}

int cudnn_attention_runtime_version() {
  return MEGATRON_CUDNN_FRONTEND ? static_cast<int>(cudnnGetVersion()) : 0;
}

void cudnn_attention_forward(const AttentionShape& s, const AttentionOptions& opt, DType dtype,
                             const void* qkv, void* out, float* lse, cudaStream_t stream) {
#if MEGATRON_CUDNN_FRONTEND
  Context& c = context();
  std::lock_guard<std::mutex> lock(c.mutex());
  Key key{};
  const Plans& p = checked_plans(c, s, opt, dtype, key);
  const Layout l = layout_of(key);
  DeviceMemory q(device_allocator(), l.pack_q ? static_cast<size_t>(s.S * s.B * s.H * s.Dh) * 2 : 0,
                 stream);
  if (l.pack_q) copy_queries(l, key, qkv, q.get(), false, stream);
  std::unordered_map<int64_t, void*> pack{{kQ, l.pack_q ? q.get() : at(qkv, 0)},
                                          {kK, at(qkv, l.k_offset)},
                                          {kV, at(qkv, l.v_offset)},
                                          {kO, out},
                                          {kStats, lse}};
  execute(c, *p.fwd, p.fwd_workspace, pack, stream, "forward");
#else
  (void)qkv, (void)out, (void)lse, (void)stream;
  MT_CHECK(false, "cuDNN fused attention: ", static_refusal(s, opt, dtype));
#endif
}

void cudnn_attention_backward(const AttentionShape& s, const AttentionOptions& opt, DType dtype,
                              const void* qkv, const void* out, const float* lse, const void* dout,
                              void* dqkv, cudaStream_t stream) {
#if MEGATRON_CUDNN_FRONTEND
  Context& c = context();
  std::lock_guard<std::mutex> lock(c.mutex());
  Key key{};
  const Plans& p = checked_plans(c, s, opt, dtype, key);
  const Layout l = layout_of(key);
  const size_t q_bytes = l.pack_q ? static_cast<size_t>(s.S * s.B * s.H * s.Dh) * 2 : 0;
  DeviceMemory q(device_allocator(), q_bytes, stream), dq(device_allocator(), q_bytes, stream);
  if (l.pack_q) copy_queries(l, key, qkv, q.get(), false, stream);
  std::unordered_map<int64_t, void*> pack{{kQ, l.pack_q ? q.get() : at(qkv, 0)},
                                          {kK, at(qkv, l.k_offset)},
                                          {kV, at(qkv, l.v_offset)},
                                          {kO, const_cast<void*>(out)},
                                          {kDO, const_cast<void*>(dout)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kDQ, l.pack_q ? dq.get() : at(dqkv, 0)},
                                          {kDK, at(dqkv, l.k_offset)},
                                          {kDV, at(dqkv, l.v_offset)}};
  execute(c, *p.bwd, p.bwd_workspace, pack, stream, "backward");
  if (l.pack_q) copy_queries(l, key, dq.get(), dqkv, true, stream);
#else
  (void)qkv, (void)out, (void)lse, (void)dout, (void)dqkv, (void)stream;
  MT_CHECK(false, "cuDNN fused attention: ", static_refusal(s, opt, dtype));
#endif
}

}  // namespace megatron::cuda
