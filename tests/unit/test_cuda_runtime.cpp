// CUDA runtime plumbing: checked-call macros, device selection, streams/events and the caching
// allocator. The macro and size-class tests need no GPU (they exercise host code of the CUDA
// library); everything that touches a device reports SKIPPED (never passed) without one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#ifdef MEGATRON_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/stream.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaRuntime, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace mc = megatron::cuda;

#define REQUIRE_GPU() \
  if (mc::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const megatron::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaChecks, CudaErrorNamesCallStatusAndLocation) {
  const std::string msg = error_of([] { MT_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cuda_runtime.cpp"), std::string::npos) << msg;
}

TEST(CudaChecks, CublasErrorNamesStatus) {
  const std::string msg = error_of([] { MT_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  EXPECT_NE(msg.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cuda_runtime.cpp"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { MT_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS); }), "");
}

TEST(CudaChecks, CudnnErrorNamesStatus) {
  const std::string msg = error_of([] { MT_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); });
  EXPECT_NE(msg.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { MT_CUDNN_CHECK(CUDNN_STATUS_SUCCESS); }), "");
}

TEST(CudaChecks, NcclErrorNamesStatus) {
  const std::string msg = error_of([] { MT_NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_NE(msg.find("NCCL error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid argument"), std::string::npos) << msg;
  EXPECT_EQ(error_of([] { MT_NCCL_CHECK(ncclSuccess); }), "");
  EXPECT_EQ(error_of([] { MT_NCCL_CHECK(ncclInProgress); }), "");  // not an error
}

TEST(CudaAllocator, SizeClassesBoundWaste) {
  using A = mc::CachingAllocator;
  EXPECT_EQ(A::size_class(1), 512u);
  EXPECT_EQ(A::size_class(512), 512u);
  EXPECT_EQ(A::size_class(513), 1024u);
  EXPECT_EQ(A::size_class(4096), 4096u);
  EXPECT_EQ(A::size_class(4097), 5120u);
  EXPECT_EQ(A::size_class(size_t(100) << 20), size_t(100) << 20);  // 2 MiB multiple
  EXPECT_EQ(A::size_class((size_t(100) << 20) + 1), size_t(102) << 20);
  for (size_t b = 1; b < (size_t(80) << 20); b = b * 3 / 2 + 7) {
    const size_t c = A::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(double(c), 1.25 * double(b) + 512.0) << b;
    EXPECT_EQ(A::size_class(c), c) << "classes are fixed points";
  }
}

TEST(CudaDevice, SelectDeviceForLocalRank) {
  const int n = mc::device_count();
  if (n == 0) {
    const std::string msg = error_of([] { mc::select_device_for_local_rank(0); });
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
    GTEST_SKIP() << "no CUDA device on this machine (checked the error only)";
  }
  EXPECT_EQ(mc::select_device_for_local_rank(n + 1), (n + 1) % n);
  EXPECT_EQ(mc::current_device(), (n + 1) % n);
  EXPECT_EQ(mc::select_device_for_local_rank(0), 0);
  EXPECT_FALSE(error_of([] { mc::select_device_for_local_rank(-1); }).empty());
  EXPECT_GE(mc::compute_capability(0), 50);
}

TEST(CudaAllocator, RepeatedSameSizeAllocationsReuseOneBlock) {
  REQUIRE_GPU();
  mc::CachingAllocator alloc;
  mc::Stream stream;
  for (int i = 0; i < 100; ++i) {
    void* p = alloc.allocate(1000000, stream);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    MT_CUDA_CHECK(cudaMemsetAsync(p, i, 1000000, stream));
    alloc.free(p);
  }
  mc::AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.device_allocs, 1);
  EXPECT_EQ(s.cache_hits, 99);
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, mc::CachingAllocator::size_class(1000000));
  EXPECT_EQ(s.reserved_bytes, mc::CachingAllocator::size_class(1000000));

  // A training-step-like pattern: the same set of sizes every step, no growth after step 1.
  const std::vector<size_t> sizes{4096, 123456, 1 << 20, 3 << 20, 100, 77777777};
  int64_t allocs_after_first = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<void*> live;
    for (size_t b : sizes) live.push_back(alloc.allocate(b, stream));
    for (void* p : live) alloc.free(p);
    if (step == 0) allocs_after_first = alloc.stats().device_allocs;
  }
  EXPECT_EQ(alloc.stats().device_allocs, allocs_after_first);
  EXPECT_EQ(alloc.current_bytes(), 0u);
  stream.synchronize();
  alloc.empty_cache();
  EXPECT_EQ(alloc.reserved_bytes(), 0u);
  EXPECT_EQ(alloc.stats().device_frees, alloc.stats().device_allocs);
}

TEST(CudaAllocator, PeakAndCurrentBytes) {
  REQUIRE_GPU();
  mc::CachingAllocator alloc;
  void* a = alloc.allocate(1 << 20, nullptr);
  void* b = alloc.allocate(2 << 20, nullptr);
  EXPECT_EQ(alloc.current_bytes(), size_t(3) << 20);
  alloc.free(a);
  EXPECT_EQ(alloc.current_bytes(), size_t(2) << 20);
  EXPECT_EQ(alloc.peak_bytes(), size_t(3) << 20);
  alloc.reset_peak();
  EXPECT_EQ(alloc.peak_bytes(), size_t(2) << 20);
  alloc.free(b);
  EXPECT_EQ(alloc.allocate(0, nullptr), nullptr);
  alloc.free(nullptr);
  int x = 0;
  EXPECT_FALSE(error_of([&] { alloc.free(&x); }).empty());
}

TEST(CudaAllocator, FreeListsArePerStreamAndRecordStreamDefersReuse) {
  REQUIRE_GPU();
  mc::CachingAllocator alloc;
  mc::Stream s1, s2;
  void* p = alloc.allocate(1 << 16, s1);
  alloc.free(p);
  void* q = alloc.allocate(1 << 16, s2);  // another stream: not served from s1's list
  EXPECT_NE(p, q);
  EXPECT_EQ(alloc.stats().device_allocs, 2);
  alloc.free(q);
  void* r = alloc.allocate(1 << 16, s1);
  EXPECT_EQ(r, p);  // s1's block again
  alloc.record_stream(r, s2);
  alloc.free(r);  // pending until s2's work queued so far is done
  s2.synchronize();
  void* again = alloc.allocate(1 << 16, s1);
  EXPECT_EQ(again, p);
  alloc.free(again);
  {
    mc::DeviceMemory m(alloc, 12345, s1);
    EXPECT_NE(m.get(), nullptr);
    EXPECT_GT(alloc.current_bytes(), 0u);
  }
  EXPECT_EQ(alloc.current_bytes(), 0u);
}

TEST(CudaStream, EventsOrderStreamsAndTime) {
  REQUIRE_GPU();
  mc::Stream a, b;
  mc::DeviceBuffer buf(1 << 20);
  mc::Event start(true), stop(true);
  start.record(a);
  MT_CUDA_CHECK(cudaMemsetAsync(buf.data(), 7, 1 << 20, a));
  stop.record(a);
  b.wait(stop);  // b's later work runs after the memset
  std::vector<unsigned char> host(1 << 20);
  MT_CUDA_CHECK(cudaMemcpyAsync(host.data(), buf.data(), host.size(), cudaMemcpyDeviceToHost, b));
  b.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_EQ(host[0], 7);
  EXPECT_EQ(host.back(), 7);
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  mc::Stream moved = std::move(a);
  EXPECT_NE(moved.get(), nullptr);
  EXPECT_EQ(&mc::device_allocator(), &mc::device_allocator(mc::current_device()));
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
