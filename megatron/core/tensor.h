#pragma once
// Tensor = typed, shaped, contiguous memory on a device. An owning tensor holds its Storage;
// a view (Tensor::wrap, view(), slice()) only points into memory someone else keeps alive.
// Views taken from an owning tensor share its storage so they stay valid while in use.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "megatron/core/device_memory.h"
#include "megatron/core/dtype.h"
#include "megatron/core/error.h"

namespace megatron {

enum class Device : uint8_t { CPU, CUDA };
std::string_view device_name(Device d);
Device parse_device(std::string_view name);

class Shape {
 public:
  static constexpr int kMaxDims = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <typename It>
  Shape(It begin, It end) {
    for (; begin != end; ++begin) push_back(static_cast<int64_t>(*begin));
  }

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const;
  int64_t& operator[](int i);
  int64_t numel() const;
  void push_back(int64_t d);
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3, 4]"
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + ndim_; }

 private:
  int64_t dims_[kMaxDims] = {};
  int ndim_ = 0;
};

// Raw device memory. CPU memory is 64-byte aligned host memory; memory of other devices comes
// from the device's backend (device_memory.h; for CUDA the backend's stream-ordered caching
// allocator, allocated on and returned to the stream current at allocation).
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  DeviceMemoryBackend* backend_ = nullptr;  // non-CPU storage: who allocated it
  int device_index_ = 0;
};

// Bytes currently held and the peak since start, for CPU storage (for memory reports).
MemoryStats cpu_memory_stats();
// The same for any device: CPU storage, or the device backend's allocator (throws when the
// build has no backend for `device`).
MemoryStats memory_stats(Device device);
// Waits for the work queued on `device` (its backend's current stream); nothing on the CPU.
void synchronize(Device device);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  // A non-owning view of caller-managed memory.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::CPU);

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  bool owns_storage() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int ndim() const { return shape_.ndim(); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  void* raw() const { return data_; }

  template <typename T>
  T* data() const {
    MT_CHECK(DTypeOf<T>::value == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
             dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_);
  }

  // Same memory, new shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) along dim 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // Elements [offset, offset + shape.numel()) of the flattened tensor, viewed as `shape`.
  Tensor flat_view(int64_t offset, const Shape& shape) const;

  // On the CPU: at once. On a device: queued on the backend's current stream.
  void zero_();
  // Same dtype and numel; any pair of devices. Copies that read or write host memory have
  // completed on return; device-to-device copies are queued on the current stream.
  void copy_from(const Tensor& src);
  Tensor clone() const;  // same device
  // This tensor on `device`: itself (sharing memory) when it is already there, otherwise a new
  // contiguous tensor holding a copy (see copy_from for when the copy completes).
  Tensor to(Device device) const;

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

}  // namespace megatron
