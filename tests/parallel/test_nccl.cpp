// mpirun-np: 2
// NcclCommunicator collectives on CUDA tensors against values computed locally (the same
// contract as test_collectives.cpp checks for MpiCommunicator): every op over odd sizes and
// empty buffers, in-place variants, uneven all-to-all, batched p2p, async overlap, sub-groups,
// the MoE dispatcher's exchanges (counts, rows with empty sides) and the errors (CPU tensors,
// 16-bit integer reductions). Needs one GPU per rank on the node; otherwise every test reports
// SKIPPED on every rank (never passed).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "parallel_test.h"

#ifdef MEGATRON_WITH_CUDA
#include "kernels/common/numeric.h"
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/nccl_communicator.h"
#include "megatron/backend/ops.h"
#include "megatron/transformer/moe/host_collectives.h"
#include "tests/support/collective_values.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(Nccl, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace mp = megatron::parallel;
using mp::testing::expected_reduce;
using mp::testing::value;
namespace mc = megatron::cuda;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using mp::ReduceOp;
using mp::testing::world;

// Every rank sees the same answer (same node, or the job gives each node the same GPU count),
// so every rank skips together and no collective is left unmatched.
bool have_gpus() {
  int enough = mc::device_count() >= mp::testing::launch().local_size ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

#define REQUIRE_GPUS()                                                                \
  if (!have_gpus())                                                                   \
  GTEST_SKIP() << "needs one CUDA device per rank (" << mc::device_count() << " for " \
               << mp::testing::launch().local_size << " local ranks)"

std::unique_ptr<mc::NcclCommunicator> g_nccl_world;

// Made on first use (after the GPU check), destroyed when the tests end: before MPI and the
// CUDA runtime shut down, not in a static destructor.
mc::NcclCommunicator& nccl_world() {
  if (!g_nccl_world) {
    mc::select_device_for_local_rank(mp::testing::launch().local_rank);
    g_nccl_world = std::make_unique<mc::NcclCommunicator>(world());
  }
  return *g_nccl_world;
}

class NcclTeardown : public ::testing::Environment {
 public:
  void TearDown() override { g_nccl_world.reset(); }
};
[[maybe_unused]] ::testing::Environment* const g_teardown =
    ::testing::AddGlobalTestEnvironment(new NcclTeardown);

// Device buffer plus a CUDA tensor view of it.
struct DeviceTensor {
  DeviceTensor(int64_t n, DType dtype)
      : mem(std::make_unique<mc::DeviceBuffer>(std::max<int64_t>(n, 1) *
                                               megatron::dtype_size(dtype))),
        buf(*mem),
        t(Tensor::wrap(mem->data(), Shape{n}, dtype, megatron::Device::CUDA)) {}
  DeviceTensor(DeviceTensor&& o) noexcept : mem(std::move(o.mem)), buf(*mem), t(o.t) {}
  std::unique_ptr<mc::DeviceBuffer> mem;
  mc::DeviceBuffer& buf;
  Tensor t;
};

template <typename T>
DeviceTensor filled(int64_t n, int r, int64_t offset = 0) {
  DeviceTensor d(n, megatron::DTypeOf<T>::value);
  std::vector<T> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = value<T>(r, i + offset);
  d.buf.copy_from_host(host.data(), n * sizeof(T));
  return d;
}

template <typename T>
std::vector<T> read(const DeviceTensor& d, int64_t n) {
  std::vector<T> host(n);
  // cudaMemcpy on the legacy default stream: after the compute stream (the default one) that
  // the communicator made wait for the collective.
  d.buf.copy_to_host(host.data(), n * sizeof(T));
  return host;
}

const int64_t kSizes[] = {0, 1, 7, 1023, 100003};

template <typename T>
void check_all_reduce(ReduceOp op) {
  mc::NcclCommunicator& c = nccl_world();
  for (int64_t n : kSizes) {
    DeviceTensor d = filled<T>(n, c.rank());
    c.all_reduce(d.t, op);
    const std::vector<T> got = read<T>(d, n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], expected_reduce<T>(op, i, c.size())) << "n=" << n << " i=" << i;
  }
}

TEST(Nccl, AllReduceEveryOp) {
  REQUIRE_GPUS();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    check_all_reduce<float>(op);
    check_all_reduce<double>(op);
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    check_all_reduce<int32_t>(op);
    check_all_reduce<int64_t>(op);
    check_all_reduce<uint8_t>(op);
  }
}

TEST(Nccl, AllReduceBf16Natively) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int64_t n = 1000;
  DeviceTensor d(n, DType::BF16);
  std::vector<uint16_t> host(n);
  for (int64_t i = 0; i < n; ++i)
    host[i] = megatron::math::float_to_bf16_bits(float(value<float>(c.rank(), i)));
  d.buf.copy_from_host(host.data(), n * 2);
  c.all_reduce(d.t, ReduceOp::Sum);
  d.buf.copy_to_host(host.data(), n * 2);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(megatron::math::bf16_bits_to_float(host[i]),
              expected_reduce<float>(ReduceOp::Sum, i, c.size()));
}

TEST(Nccl, AllGatherAndReduceScatter) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int P = c.size();
  for (int64_t n : kSizes) {
    DeviceTensor in = filled<int32_t>(n, c.rank());
    DeviceTensor out(n * P, DType::I32);
    c.all_gather(in.t, out.t);
    std::vector<int32_t> got = read<int32_t>(out, n * P);
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], value<int32_t>(r, i));

    // In place: the input is this rank's chunk of the output.
    DeviceTensor inplace(n * P, DType::I32);
    std::vector<int32_t> init(n * P, -1);
    for (int64_t i = 0; i < n; ++i) init[c.rank() * n + i] = value<int32_t>(c.rank(), i);
    inplace.buf.copy_from_host(init.data(), init.size() * 4);
    Tensor chunk = inplace.t.flat_view(c.rank() * n, Shape{n});
    c.all_gather(chunk, inplace.t);
    got = read<int32_t>(inplace, n * P);
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], value<int32_t>(r, i));

    // reduce_scatter: rank r gets the sum of chunk r.
    DeviceTensor full = filled<float>(n * P, c.rank());
    DeviceTensor mine(n, DType::F32);
    c.reduce_scatter(full.t, mine.t, ReduceOp::Sum);
    const std::vector<float> rs = read<float>(mine, n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(rs[i], expected_reduce<float>(ReduceOp::Sum, c.rank() * n + i, P));
  }
}

TEST(Nccl, BroadcastAndBarrier) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  for (int root = 0; root < c.size(); ++root) {
    DeviceTensor d = filled<int16_t>(1023, c.rank());  // any dtype moves
    c.broadcast(d.t, root);
    const std::vector<int16_t> got = read<int16_t>(d, 1023);
    for (int64_t i = 0; i < 1023; ++i) ASSERT_EQ(got[i], value<int16_t>(root, i));
  }
  c.barrier();
  c.barrier();
}

TEST(Nccl, AllToAllUneven) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int P = c.size(), me = c.rank();
  // Rank s sends (s + d) % 3 elements to rank d (zeros included), values tagged by (s, d, k).
  auto count = [](int s, int d) { return int64_t((s + d) % 3); };
  std::vector<int64_t> send(P), recv(P);
  std::vector<float> in;
  for (int d = 0; d < P; ++d) {
    send[d] = count(me, d);
    recv[d] = count(d, me);
    for (int64_t k = 0; k < send[d]; ++k) in.push_back(float(me * 100 + d * 10 + k));
  }
  int64_t total_recv = 0;
  for (int64_t r : recv) total_recv += r;
  DeviceTensor din(int64_t(in.size()), DType::F32), dout(total_recv, DType::F32);
  din.buf.copy_from_host(in.data(), in.size() * 4);
  c.all_to_all(din.t, send, dout.t, recv);
  const std::vector<float> got = read<float>(dout, total_recv);
  int64_t off = 0;
  for (int s = 0; s < P; ++s)
    for (int64_t k = 0; k < recv[s]; ++k) ASSERT_EQ(got[off++], float(s * 100 + me * 10 + k));
}

// The MoE token dispatcher's exchanges (megatron/transformer/moe/token_dispatcher.cpp): int64
// counts per local expert through the host helpers (staged through the device), then bf16 rows
// in counts x hidden elements where rank 0 sends nothing at all and the last rank receives
// nothing (empty buffers, zero counts everywhere on their side); the routing gathers and the
// balancing counts' fp64 sum through the same helpers.
TEST(Nccl, AllToAllAsTheMoeDispatcherUsesIt) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int P = c.size(), me = c.rank();
  const int64_t El = 2, D = 5;
  const megatron::Device cuda = megatron::Device::CUDA;
  // Rows from s to local expert j of d: none from rank 0 or to rank P - 1, else (s + d + j) % 3.
  auto rows = [&](int s, int d, int64_t j) {
    return s == 0 || d == P - 1 ? int64_t{0} : int64_t((s + d + j) % 3);
  };
  std::vector<int64_t> counts, recv_expert(static_cast<size_t>(P * El), -1);
  for (int d = 0; d < P; ++d)
    for (int64_t j = 0; j < El; ++j) counts.push_back(rows(me, d, j));
  const std::vector<int64_t> el(static_cast<size_t>(P), El);
  megatron::moe::all_to_all_host(c, Tensor::wrap(counts.data(), Shape{P * El}, DType::I64), el,
                                 Tensor::wrap(recv_expert.data(), Shape{P * El}, DType::I64), el,
                                 cuda);
  for (int s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j) ASSERT_EQ(recv_expert[s * El + j], rows(s, me, j));

  std::vector<int64_t> send(P, 0), recv(P, 0);
  std::vector<float> in;
  for (int d = 0; d < P; ++d)
    for (int64_t j = 0; j < El; ++j)
      for (int64_t r = 0; r < rows(me, d, j); ++r) {
        send[d] += D;
        for (int64_t k = 0; k < D; ++k) in.push_back(float(me * 64 + d * 16 + j * 4 + k % 4));
      }
  for (int s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j) recv[s] += rows(s, me, j) * D;
  int64_t total = 0;
  for (int64_t r : recv) total += r;
  Tensor h = Tensor::empty(Shape{int64_t(in.size())}, DType::F32);
  std::copy(in.begin(), in.end(), h.data<float>());
  Tensor d_in = Tensor::empty(h.shape(), DType::BF16, cuda);
  Tensor d_out = Tensor::empty(Shape{total}, DType::BF16, cuda);
  megatron::ops::cast(h.to(cuda), d_in);  // small integers: exact in bf16
  c.all_to_all(d_in, send, d_out, recv);
  Tensor out32 = Tensor::empty(Shape{total}, DType::F32, cuda);
  megatron::ops::cast(d_out, out32);
  const Tensor got = out32.to(megatron::Device::CPU);
  int64_t at = 0;
  for (int s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j)
      for (int64_t r = 0; r < rows(s, me, j); ++r)
        for (int64_t k = 0; k < D; ++k)
          ASSERT_EQ(got.data<float>()[at++], float(s * 64 + me * 16 + j * 4 + k % 4));

  std::vector<int32_t> mine{me, 10 + me}, all(static_cast<size_t>(2 * P));
  megatron::moe::all_gather_host(c, Tensor::wrap(mine.data(), Shape{2}, DType::I32),
                                 Tensor::wrap(all.data(), Shape{2 * P}, DType::I32), cuda);
  for (int r = 0; r < P; ++r) ASSERT_TRUE(all[2 * r] == r && all[2 * r + 1] == 10 + r);
  std::vector<double> sums{0.5 * me, 1.0};
  megatron::moe::all_reduce_host(c, Tensor::wrap(sums.data(), Shape{2}, DType::F64), ReduceOp::Sum,
                                 cuda);
  EXPECT_EQ(sums[0], 0.25 * P * (P - 1));
  EXPECT_EQ(sums[1], double(P));
}

TEST(Nccl, BatchedP2PRingAndAsyncOverlap) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int P = c.size(), me = c.rank();
  if (P > 1) {
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    DeviceTensor sendbuf = filled<float>(4097, me), recvbuf(4097, DType::F32);
    std::vector<mp::P2POp> ops;
    ops.push_back({mp::P2POp::Recv, recvbuf.t, prev});
    ops.push_back({mp::P2POp::Send, sendbuf.t, next});
    auto work = c.batch_isend_irecv(std::move(ops));
    work->wait();
    const std::vector<float> got = read<float>(recvbuf, 4097);
    for (int64_t i = 0; i < 4097; ++i) ASSERT_EQ(got[i], value<float>(prev, i));
  }
  // Two async all-reduces in flight at once, waited in reverse order.
  DeviceTensor a = filled<float>(100003, me), b = filled<float>(777, me, 5);
  auto wa = c.all_reduce_async(a.t, ReduceOp::Sum);
  auto wb = c.all_reduce_async(b.t, ReduceOp::Max);
  wb->wait();
  wa->wait();
  const std::vector<float> ga = read<float>(a, 100003), gb = read<float>(b, 777);
  for (int64_t i = 0; i < 100003; ++i)
    ASSERT_EQ(ga[i], expected_reduce<float>(ReduceOp::Sum, i, P));
  for (int64_t i = 0; i < 777; ++i) {
    float want = value<float>(0, i + 5);
    for (int r = 1; r < P; ++r) want = std::max(want, value<float>(r, i + 5));
    ASSERT_EQ(gb[i], want);
  }
  c.set_blocking_wait(true);  // the host-blocking variant of the same
  auto wc = c.all_reduce_async(a.t, ReduceOp::Min);
  wc->wait();
  c.set_blocking_wait(false);
}

TEST(Nccl, SubGroupsFromSplitMpiCommunicators) {
  REQUIRE_GPUS();
  nccl_world();  // the device is selected
  // Every rank alone in its group: collectives are the identity.
  std::unique_ptr<mp::MpiCommunicator> solo = world().split(world().rank(), 0, "solo");
  mc::NcclCommunicator c(*solo);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "solo");
  EXPECT_EQ(c.world_rank_of(0), world().rank());
  DeviceTensor d = filled<float>(33, 3);
  c.all_reduce(d.t, ReduceOp::Sum);
  const std::vector<float> got = read<float>(d, 33);
  for (int64_t i = 0; i < 33; ++i) ASSERT_EQ(got[i], value<float>(3, i));
  c.barrier();
}

TEST(Nccl, RejectsCpuTensorsAndInt16Reductions) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  Tensor cpu = Tensor::zeros(Shape{4}, DType::F32);
  EXPECT_THROW(c.all_reduce(cpu, ReduceOp::Sum), megatron::Error);
  DeviceTensor i16(8, DType::I16);
  EXPECT_THROW(c.all_reduce(i16.t, ReduceOp::Sum), megatron::Error);
  DeviceTensor ints(8, DType::I32);
  EXPECT_THROW(c.all_reduce(ints.t, ReduceOp::Avg), megatron::Error);
  c.barrier();  // nothing was left half-posted: the group still works
}

// Owning CUDA tensors (Tensor::empty on Device::CUDA: the caching allocator) and ops:: on the
// backend's current stream, which is also the communicator's default compute stream: ops before
// a collective are seen by it, ops after it see its result, with no explicit synchronisation;
// an async collective keeps its tensors alive after the caller dropped them.
TEST(Nccl, OwningCudaTensorsAndOpsOnTheCurrentStream) {
  REQUIRE_GPUS();
  mc::NcclCommunicator& c = nccl_world();
  const int P = c.size(), me = c.rank();
  const int64_t n = 10007;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = value<float>(me, i);
  Tensor h = Tensor::empty(Shape{n}, DType::F32);
  std::memcpy(h.raw(), host.data(), n * sizeof(float));
  Tensor d = h.to(megatron::Device::CUDA);
  megatron::ops::scale_inplace(d, 2.0f);  // queued before the all-reduce
  c.all_reduce(d, ReduceOp::Sum);
  megatron::ops::add_inplace(d, d);  // queued after it: doubles the sum
  const Tensor back = d.to(megatron::Device::CPU);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(back.data<float>()[i], 4.0f * expected_reduce<float>(ReduceOp::Sum, i, P)) << i;

  std::unique_ptr<mp::Work> work;
  {
    Tensor t = h.to(megatron::Device::CUDA);
    work = c.all_reduce_async(t, ReduceOp::Max);
  }  // t is gone; the Work keeps its storage until the collective is done
  Tensor after = Tensor::zeros(Shape{n}, DType::F32, megatron::Device::CUDA);
  work->wait();
  work.reset();
  EXPECT_EQ(megatron::ops::sum_squares(after), 0.0);
  c.barrier();
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
