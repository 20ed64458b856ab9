// mpirun-np: 1 2 3
// One conformance suite for every Communicator implementation: the same cases run against the
// single-process communicator (a group of one on each rank), the MPI world and, in a CUDA build
// with a GPU per rank, the NCCL world (its buffers on the device). Each case checks the contract
// of megatron/parallel/communicator.h against values computed locally: all-reduce of every op
// (float and integer), all-gather, reduce-scatter, broadcast from every root, uneven
// all-to-all, asynchronous all-reduce, a point-to-point ring (groups of more than one) and the
// barrier. Implementation-specific behaviour stays in test_collectives.cpp and test_nccl.cpp.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "megatron/core/tensor.h"
#include "parallel_test.h"
#include "tests/support/collective_values.h"

#ifdef MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/nccl_communicator.h"
#endif

namespace {

using megatron::parallel::testing::expected_reduce;
using megatron::parallel::testing::value;

namespace mp = megatron::parallel;
using megatron::Device;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using mp::ReduceOp;

enum class Kind { Single, Mpi, Nccl };

std::string kind_name(Kind k) {
  return k == Kind::Single ? "Single" : k == Kind::Mpi ? "Mpi" : "Nccl";
}

// The communicator under test and the device its buffers live on.
struct Subject {
  mp::Communicator* comm = nullptr;
  Device device = Device::CPU;
};

std::unique_ptr<mp::Communicator> g_single;
#ifdef MEGATRON_WITH_CUDA
std::unique_ptr<mp::Communicator> g_nccl;
#endif

// The subject for `kind`, or a reason it cannot run here (then the test is skipped).
Subject subject(Kind kind, std::string& skip) {
  switch (kind) {
    case Kind::Single:
      if (!g_single) g_single = mp::make_single_process_communicator();
      return {g_single.get(), Device::CPU};
    case Kind::Mpi:
      return {&mp::testing::world(), Device::CPU};
    case Kind::Nccl:
#ifdef MEGATRON_WITH_CUDA
      if (!megatron::device_available(Device::CUDA)) {
        skip = "no CUDA device visible";
        return {};
      }
      if (!g_nccl) {
        megatron::cuda::select_device_for_local_rank(mp::testing::launch().local_rank);
        g_nccl = std::make_unique<megatron::cuda::NcclCommunicator>(mp::testing::world());
      }
      return {g_nccl.get(), Device::CUDA};
#else
      skip = "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
      return {};
#endif
  }
  return {};
}

class Teardown : public ::testing::Environment {
 public:
  void TearDown() override {
    g_single.reset();
#ifdef MEGATRON_WITH_CUDA
    g_nccl.reset();
#endif
  }
};
[[maybe_unused]] ::testing::Environment* const g_teardown =
    ::testing::AddGlobalTestEnvironment(new Teardown);

const int64_t kSizes[] = {0, 1, 7, 1023};

// A buffer on the subject's device holding host values.
template <typename T>
Tensor on_device(const Subject& s, const std::vector<T>& host) {
  const auto n = static_cast<int64_t>(host.size());
  Tensor h = Tensor::empty(Shape{n}, megatron::DTypeOf<T>::value);
  std::copy(host.begin(), host.end(), h.data<T>());
  return s.device == Device::CPU ? h : h.to(s.device);
}

template <typename T>
Tensor filled(const Subject& s, int64_t n, int rank, int64_t offset = 0) {
  std::vector<T> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = value<T>(rank, i + offset);
  return on_device(s, host);
}

template <typename T>
std::vector<T> read(const Tensor& t) {
  const Tensor h = t.to(Device::CPU);
  return std::vector<T>(h.data<T>(), h.data<T>() + h.numel());
}

class Conformance : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    std::string skip;
    s_ = subject(GetParam(), skip);
    if (s_.comm == nullptr) GTEST_SKIP() << skip;
  }
  mp::Communicator& comm() { return *s_.comm; }
  Subject s_;
};

template <typename T>
void check_all_reduce(const Subject& s, ReduceOp op) {
  for (int64_t n : kSizes) {
    Tensor t = filled<T>(s, n, s.comm->rank());
    s.comm->all_reduce(t, op);
    const std::vector<T> got = read<T>(t);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], expected_reduce<T>(op, i, s.comm->size()))
          << "n=" << n << " i=" << i;
  }
}

TEST_P(Conformance, AllReduceEveryOp) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
    SCOPED_TRACE(std::string(mp::reduce_op_name(op)));
    check_all_reduce<float>(s_, op);
    if (op != ReduceOp::Avg) check_all_reduce<int32_t>(s_, op);
  }
}

TEST_P(Conformance, AllGatherPlacesEachRankInOrder) {
  const int p = comm().size();
  for (int64_t n : kSizes) {
    Tensor in = filled<float>(s_, n, comm().rank());
    Tensor out = Tensor::empty(Shape{n * p}, DType::F32, s_.device);
    comm().all_gather(in, out);
    const std::vector<float> got = read<float>(out);
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[static_cast<size_t>(r * n + i)], value<float>(r, i)) << "r=" << r;
  }
}

TEST_P(Conformance, ReduceScatterGivesEachRankItsChunk) {
  const int p = comm().size(), me = comm().rank();
  for (int64_t n : kSizes) {
    Tensor in = filled<float>(s_, n * p, me);
    Tensor out = Tensor::empty(Shape{n}, DType::F32, s_.device);
    comm().reduce_scatter(in, out, ReduceOp::Sum);
    const std::vector<float> got = read<float>(out);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], expected_reduce<float>(ReduceOp::Sum, me * n + i, p));
  }
}

TEST_P(Conformance, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm().size(); ++root) {
    Tensor t = filled<float>(s_, 1023, comm().rank());
    comm().broadcast(t, root);
    const std::vector<float> got = read<float>(t);
    for (int64_t i = 0; i < 1023; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], value<float>(root, i)) << "root " << root;
  }
}

TEST_P(Conformance, UnevenAllToAll) {
  // Rank r sends (r + d) % 3 elements to rank d, valued r * 100 + d * 10 + k.
  const int p = comm().size(), me = comm().rank();
  auto count = [](int from, int to) { return static_cast<int64_t>((from + to) % 3); };
  std::vector<int64_t> send(p), recv(p);
  std::vector<float> host;
  for (int d = 0; d < p; ++d) {
    send[d] = count(me, d);
    recv[d] = count(d, me);
    for (int64_t k = 0; k < send[d]; ++k) host.push_back(static_cast<float>(me * 100 + d * 10 + k));
  }
  int64_t total = 0;
  for (int64_t c : recv) total += c;
  Tensor in = on_device(s_, host);
  Tensor out = Tensor::empty(Shape{total}, DType::F32, s_.device);
  comm().all_to_all(in, send, out, recv);
  const std::vector<float> got = read<float>(out);
  size_t at = 0;
  for (int src = 0; src < p; ++src)
    for (int64_t k = 0; k < recv[src]; ++k)
      ASSERT_EQ(got[at++], static_cast<float>(src * 100 + me * 10 + k)) << "from " << src;
}

TEST_P(Conformance, AsyncAllReduceCompletesOnWait) {
  Tensor a = filled<float>(s_, 1023, comm().rank());
  Tensor b = filled<float>(s_, 7, comm().rank(), 5);
  auto wa = comm().all_reduce_async(a, ReduceOp::Sum);
  auto wb = comm().all_reduce_async(b, ReduceOp::Max);
  wb->wait();
  wa->wait();
  const std::vector<float> ga = read<float>(a), gb = read<float>(b);
  for (int64_t i = 0; i < 1023; ++i)
    ASSERT_EQ(ga[static_cast<size_t>(i)], expected_reduce<float>(ReduceOp::Sum, i, comm().size()));
  for (int64_t i = 0; i < 7; ++i) {
    float want = value<float>(0, i + 5);
    for (int r = 1; r < comm().size(); ++r) want = std::max(want, value<float>(r, i + 5));
    ASSERT_EQ(gb[static_cast<size_t>(i)], want);
  }
}

TEST_P(Conformance, PointToPointRing) {
  const int p = comm().size(), me = comm().rank();
  if (p == 1) GTEST_SKIP() << "a group of one has no peer";
  Tensor out = filled<float>(s_, 1023, me);
  Tensor in = Tensor::empty(Shape{1023}, DType::F32, s_.device);
  std::vector<mp::P2POp> ops = {{mp::P2POp::Send, out, (me + 1) % p, 3},
                                {mp::P2POp::Recv, in, (me + p - 1) % p, 3}};
  comm().batch_isend_irecv(std::move(ops))->wait();
  const std::vector<float> got = read<float>(in);
  for (int64_t i = 0; i < 1023; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], value<float>((me + p - 1) % p, i));
}

TEST_P(Conformance, BarrierReturnsOnEveryRank) {
  comm().barrier();
  comm().barrier();
  SUCCEED();
}

INSTANTIATE_TEST_SUITE_P(EveryCommunicator, Conformance,
                         ::testing::Values(Kind::Single, Kind::Mpi, Kind::Nccl),
                         [](const auto& info) { return kind_name(info.param); });

}  // namespace
