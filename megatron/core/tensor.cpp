#include "megatron/core/tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "megatron/core/host_memory.h"

namespace megatron {

namespace {
// Process-wide allocation counters: monitoring only, never read by the numerics.
std::atomic<int64_t> g_cpu_current{0};
std::atomic<int64_t> g_cpu_peak{0};

void note_alloc(int64_t bytes) {
  const int64_t now = g_cpu_current.fetch_add(bytes) + bytes;
  int64_t peak = g_cpu_peak.load();
  while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
  }
}

// The backend of a non-CPU device, or an error saying the build lacks it.
DeviceMemoryBackend& backend_for(Device device, const char* what) {
  DeviceMemoryBackend* backend = device_memory_backend(device);
  MT_CHECK(backend != nullptr, what, " on ", device_name(device), ": this build has no ",
           device_name(device),
           " backend (configure with -DMEGATRON_CUDA=ON on a machine with the CUDA toolkit, or "
           "use device cpu)");
  return *backend;
}
}  // namespace

MemoryStats cpu_memory_stats() { return {g_cpu_current.load(), g_cpu_peak.load()}; }

MemoryStats memory_stats(Device device) {
  if (device == Device::CPU) return cpu_memory_stats();
  return backend_for(device, "memory_stats").memory_stats();
}

void synchronize(Device device) {
  if (device == Device::CPU) return;  // host work is done when the call returns
  backend_for(device, "synchronize").synchronize();
}

std::string_view device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::CPU;
  if (name == "cuda" || name == "gpu") return Device::CUDA;
  throw InputError(concat("unknown device '", name, "' (expected cpu or cuda)"));
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::operator[](int i) const {
  MT_CHECK(i >= 0 && i < ndim_, "dim ", i, " out of range for shape ", str());
  return dims_[i];
}

int64_t& Shape::operator[](int i) {
  MT_CHECK(i >= 0 && i < ndim_, "dim ", i, " out of range for shape ", str());
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  MT_CHECK(ndim_ < kMaxDims, "shape has more than ", kMaxDims, " dims");
  MT_CHECK(d >= 0, "negative dimension ", d);
  dims_[ndim_++] = d;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << "]";
  return os.str();
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device != Device::CPU) {
    backend_ = &backend_for(device, "allocating a tensor");
    if (bytes == 0) return;
    const DeviceAllocation block = backend_->allocate(bytes);
    data_ = block.ptr;
    device_index_ = block.device_index;
    return;
  }
  data_ = bytes ? host_allocate(bytes) : nullptr;
  MT_CHECK(bytes == 0 || data_ != nullptr, "out of host memory allocating ", bytes, " bytes");
  note_alloc(static_cast<int64_t>(bytes));
}

Storage::~Storage() {
  if (device_ != Device::CPU) {
    if (data_ != nullptr) backend_->deallocate(DeviceAllocation{data_, device_index_});
    return;
  }
  host_deallocate(data_, bytes_);
  g_cpu_current.fetch_sub(static_cast<int64_t>(bytes_));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ =
      std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  t.data_ = t.storage_->data();
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  MT_CHECK(data != nullptr || shape.numel() == 0, "wrapping a null pointer as ", shape.str());
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  MT_CHECK(shape.numel() == numel(), "cannot view ", shape_.str(), " as ", shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  MT_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ",
           end, ") out of range for ", shape_.str());
  Shape s = shape_;
  s[0] = end - begin;
  const int64_t row = ndim() ? numel() / std::max<int64_t>(shape_[0], 1) : 0;
  return flat_view(begin * row, s);
}

Tensor Tensor::flat_view(int64_t offset, const Shape& shape) const {
  MT_CHECK(offset >= 0 && offset + shape.numel() <= numel(), "flat view [", offset, ", +",
           shape.numel(), ") out of range for ", numel(), " elements");
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(offset) * dtype_size(dtype_);
  return t;
}

void Tensor::zero_() {
  if (device_ != Device::CPU) {
    DeviceMemoryBackend& backend = backend_for(device_, "zero_");
    if (nbytes()) backend.zero(data_, nbytes());
    return;
  }
  if (nbytes()) std::memset(data_, 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  MT_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy from ", dtype_name(src.dtype_),
           src.shape_.str(), " into ", dtype_name(dtype_), shape_.str());
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    if (nbytes()) std::memmove(data_, src.data_, nbytes());
    return;
  }
  // One backend moves the bytes; both sides must be its device or the host.
  const Device device = device_ != Device::CPU ? device_ : src.device_;
  MT_CHECK((device_ == Device::CPU || device_ == device) &&
               (src.device_ == Device::CPU || src.device_ == device),
           "copy from ", device_name(src.device_), " into ", device_name(device_),
           ": no backend copies between these devices");
  DeviceMemoryBackend& backend = backend_for(device, "copy_from");
  if (nbytes()) backend.copy(data_, device_, src.data_, src.device_, nbytes());
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

}  // namespace megatron
