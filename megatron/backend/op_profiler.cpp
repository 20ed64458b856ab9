#include "megatron/backend/op_profiler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iomanip>
#include <map>
#include <sstream>

#include "megatron/core/error.h"

namespace megatron::backend {
namespace {

// One slot per device kind (Device is CPU or CUDA), like the device memory backends.
std::array<std::atomic<OpProfiler*>, 2> g_profilers{};

size_t slot(Device device) { return device == Device::CPU ? 0 : 1; }

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

std::string op_kind(const std::string& op) {
  if (op.rfind("linear_", 0) == 0) return "gemm";
  if (contains(op, "attention") || contains(op, "rope") || contains(op, "softmax"))
    return "attention";
  if (contains(op, "norm")) return "norm";
  if (contains(op, "cross_entropy") || contains(op, "loss")) return "loss";
  if (contains(op, "adamw") || contains(op, "count_outside") || contains(op, "sum_squares"))
    return "optimizer";
  if (contains(op, "dropout")) return "elementwise";  // dropout_rows is not an MoE row move
  if (contains(op, "moe") || contains(op, "rows")) return "moe";
  return "elementwise";
}

OpProfiler::OpProfiler(std::unique_ptr<OpClock> clock)
    : clock_(std::move(clock)), thread_(std::this_thread::get_id()) {
  MT_CHECK(clock_ != nullptr, "OpProfiler needs a clock");
}

void OpProfiler::begin(const char* op) {
  if (std::this_thread::get_id() != thread_ || depth_++ > 0) return;
  names_.push_back(op);
  segment_starts_.push_back(segment_break_);
  segment_break_ = false;
  clock_->mark();
}

void OpProfiler::end() {
  if (std::this_thread::get_id() != thread_ || --depth_ > 0) return;
  clock_->mark();
}

OpProfileReport OpProfiler::report() {
  MT_CHECK(depth_ == 0, "OpProfiler::report inside an op");
  const std::vector<double> t = clock_->resolve();
  MT_CHECK(t.size() == 2 * names_.size(), "OpProfiler: ", t.size(), " marks for ", names_.size(),
           " ops");
  std::map<std::string, OpTime> by_op, by_kind;
  OpProfileReport r;
  for (size_t i = 0; i < names_.size(); ++i) {
    const double s = t[2 * i + 1] - t[2 * i];
    OpTime& o = by_op[names_[i]];
    o.op = names_[i];
    o.kind = op_kind(o.op);
    ++o.calls;
    o.seconds += s;
    r.op_seconds += s;
    if (i > 0 && !segment_starts_[i]) r.between_seconds += std::max(0.0, t[2 * i] - t[2 * i - 1]);
  }
  for (const auto& [name, o] : by_op) {
    OpTime& k = by_kind[o.kind];
    k.op = k.kind = o.kind;
    k.calls += o.calls;
    k.seconds += o.seconds;
    r.ops.push_back(o);
  }
  for (const auto& [name, k] : by_kind) r.kinds.push_back(k);
  const auto longest = [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; };
  std::sort(r.ops.begin(), r.ops.end(), longest);
  std::sort(r.kinds.begin(), r.kinds.end(), longest);
  names_.clear();
  segment_starts_.clear();
  segment_break_ = false;
  return r;
}

OpProfiler* op_profiler(Device device) {
  return g_profilers[slot(device)].load(std::memory_order_relaxed);
}

OpProfiler* set_op_profiler(Device device, OpProfiler* profiler) {
  return g_profilers[slot(device)].exchange(profiler);
}

std::string format_op_profile(const OpProfileReport& r, int64_t steps, int top) {
  const double per = 1e3 / static_cast<double>(std::max<int64_t>(steps, 1));  // ms per step
  const double span = r.op_seconds + r.between_seconds;
  const auto share = [&](double s) { return span > 0 ? 100.0 * s / span : 0.0; };
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "ops " << r.op_seconds * per << " ms";
  for (const OpTime& k : r.kinds)
    out << ", " << k.kind << " " << k.seconds * per << " ms (" << share(k.seconds) << "%)";
  out << "; between ops " << r.between_seconds * per << " ms (" << share(r.between_seconds)
      << "%: copies, collectives, host work)\n";
  for (size_t i = 0; i < r.ops.size() && static_cast<int>(i) < top; ++i) {
    const OpTime& o = r.ops[i];
    out << "  " << std::setw(9) << o.seconds * per << " ms " << std::setw(6)
        << static_cast<double>(o.calls) / static_cast<double>(std::max<int64_t>(steps, 1))
        << " calls  " << o.op << " (" << o.kind << ")\n";
  }
  return out.str();
}

}  // namespace megatron::backend
