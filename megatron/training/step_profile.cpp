#include "megatron/training/step_profile.h"

#include <iomanip>
#include <sstream>

namespace megatron::training {

StepProfile::StepProfile(const config::LoggingConfig& logging, Device device)
    : start_(logging.profile_step_start), end_(logging.profile_step_end), device_(device) {}

StepProfile::~StepProfile() {
  if (profiler_) backend::set_op_profiler(device_, nullptr);
}

void StepProfile::before_step(int64_t iteration) {
  if (iteration != start_) return;
  profiler_ = std::make_unique<backend::OpProfiler>(backend::make_op_clock(device_));
  backend::set_op_profiler(device_, profiler_.get());
}

std::string StepProfile::after_step(int64_t iteration, double step_seconds) {
  if (!profiler_) return {};
  wall_seconds_ += step_seconds;
  if (iteration != end_ - 1) {
    profiler_->end_segment();
    return {};
  }
  backend::set_op_profiler(device_, nullptr);
  const backend::OpProfileReport r = profiler_->report();
  profiler_.reset();
  const int64_t steps = end_ - start_;
  const double per = 1e3 / static_cast<double>(steps);
  const double outside = wall_seconds_ - r.op_seconds - r.between_seconds;
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "profile of ";
  if (steps == 1)
    out << "step " << start_;
  else
    out << "steps " << start_ << "-" << end_ - 1;
  out << " on " << device_name(device_) << ": " << wall_seconds_ * per << " ms per step; "
      << backend::format_op_profile(r, steps) << "  " << outside * per
      << " ms per step outside the ops (host work before the first op and after the last)\n";
  return out.str();
}

}  // namespace megatron::training
