// batch_isend_irecv: ring exchanges of odd sizes, several tags at once, uneven pairwise
// exchange with empty messages, self-messages, chunked long messages, size mismatches and bad
// arguments.
// mpirun-np: 1 2 3 4
#include <functional>

#include "parallel_test.h"

namespace mp = megatron::parallel;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using mp::P2POp;
using mp::testing::world;

namespace {

Tensor iota(int64_t n, float base) {
  Tensor t = Tensor::empty(Shape{n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + static_cast<float>(i % 4096);
  return t;
}

void expect_iota(const Tensor& t, float base) {
  for (int64_t i = 0; i < t.numel(); ++i)
    ASSERT_EQ(t.data<float>()[i], base + static_cast<float>(i % 4096)) << "i=" << i;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const megatron::Error& e) {
    return e.what();
  }
  return "<no error>";
}

void ring(mp::Communicator& c, int64_t n) {
  const int size = c.size(), me = c.rank();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  Tensor send = iota(n, 1000.f * me), recv = Tensor::zeros(Shape{n}, DType::F32);
  // Receives first on odd ranks, sends first on even ones: order must not matter.
  std::vector<P2POp> ops;
  if (me % 2) ops.push_back({P2POp::Recv, recv, prev});
  ops.push_back({P2POp::Send, send, next});
  if (me % 2 == 0) ops.push_back({P2POp::Recv, recv, prev});
  c.batch_isend_irecv(std::move(ops))->wait();
  expect_iota(recv, 1000.f * prev);
}

}  // namespace

TEST(P2P, RingExchangeOddSizes) {
  for (int64_t n : {0, 1, 7, 1023, 100003}) {
    SCOPED_TRACE(n);
    ring(world(), n);
  }
}

TEST(P2P, BothDirectionsAndSeveralTags) {
  const int size = world().size(), me = world().rank();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  // Forward activations (tag 1) and backward grads (tag 2) in one batch, posted in opposite
  // orders on the two sides; tags keep them apart.
  Tensor fwd = iota(77, 10.f * me), bwd = iota(33, -10.f * me);
  Tensor got_fwd = Tensor::zeros(Shape{77}, DType::F32),
         got_bwd = Tensor::zeros(Shape{33}, DType::F32);
  auto work = world().batch_isend_irecv({{P2POp::Recv, got_bwd, next, 2},
                                         {P2POp::Send, fwd, next, 1},
                                         {P2POp::Send, bwd, prev, 2},
                                         {P2POp::Recv, got_fwd, prev, 1}});
  work->wait();
  expect_iota(got_fwd, 10.f * prev);
  expect_iota(got_bwd, -10.f * next);
}

TEST(P2P, UnevenPairwiseExchangeWithEmptyMessages) {
  const int size = world().size(), me = world().rank();
  auto len = [](int src, int dst) -> int64_t {
    return (src + 2 * dst) % 3 == 0 ? 0 : 5 * src + dst + 1;
  };
  std::vector<Tensor> sends, recvs;
  std::vector<P2POp> ops;
  for (int r = 0; r < size; ++r) {
    sends.push_back(iota(len(me, r), 100.f * me + r));
    recvs.push_back(Tensor::zeros(Shape{len(r, me)}, DType::F32));
    ops.push_back({P2POp::Send, sends.back(), r, 3});
    ops.push_back({P2POp::Recv, recvs.back(), r, 3});
  }
  world().batch_isend_irecv(std::move(ops))->wait();
  for (int r = 0; r < size; ++r) expect_iota(recvs[r], 100.f * r + me);
}

TEST(P2P, DtypesMoveExactly) {
  const int size = world().size(), me = world().rank();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  Tensor s64 = Tensor::empty(Shape{3}, DType::I64), r64 = Tensor::zeros(Shape{3}, DType::I64);
  Tensor s8 = Tensor::empty(Shape{5}, DType::U8), r8 = Tensor::zeros(Shape{5}, DType::U8);
  for (int i = 0; i < 3; ++i) s64.data<int64_t>()[i] = (int64_t{1} << 40) * me + i;
  for (int i = 0; i < 5; ++i) s8.data<uint8_t>()[i] = static_cast<uint8_t>(200 + me + i);
  world()
      .batch_isend_irecv({{P2POp::Send, s64, next},
                          {P2POp::Send, s8, next},
                          {P2POp::Recv, r64, prev},
                          {P2POp::Recv, r8, prev}})
      ->wait();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r64.data<int64_t>()[i], (int64_t{1} << 40) * prev + i);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r8.data<uint8_t>()[i], 200 + prev + i);
}

TEST(P2P, OverlapsWithCollectives) {
  const int size = world().size(), me = world().rank();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  Tensor send = iota(1023, 7.f * me), recv = Tensor::zeros(Shape{1023}, DType::F32);
  auto p2p = world().batch_isend_irecv({{P2POp::Send, send, next}, {P2POp::Recv, recv, prev}});
  Tensor sum = Tensor::empty(Shape{1}, DType::F64);
  sum.data<double>()[0] = me;
  auto red = world().all_reduce_async(sum, mp::ReduceOp::Sum);
  red->wait();
  p2p->wait();
  expect_iota(recv, 7.f * prev);
  EXPECT_EQ(sum.data<double>()[0], size * (size - 1) / 2.0);
}

TEST(P2P, LongMessagesAreChunked) {
  auto c = world().split(0, world().rank(), "chunked");
  c->set_max_chunk_elements(1000);
  ring(*c, 100003);
  ring(*c, 1000);
  ring(*c, 1001);
}

TEST(P2P, ReceiveSizeMismatchIsAnError) {
  const int size = world().size(), me = world().rank();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  // Sender sends 5, receiver expects 7: the receiver reports it.
  Tensor send = iota(5, 0.f), recv = Tensor::zeros(Shape{7}, DType::F32);
  std::string e = error_of([&] {
    world().batch_isend_irecv({{P2POp::Send, send, next}, {P2POp::Recv, recv, prev}})->wait();
  });
  EXPECT_NE(e.find("received 5 elements from rank"), std::string::npos) << e;
  // Sender sends 7, receiver has room for 5: MPI truncation, reported as an error.
  Tensor big = iota(7, 0.f), little = Tensor::zeros(Shape{5}, DType::F32);
  e = error_of([&] {
    world().batch_isend_irecv({{P2POp::Send, big, next}, {P2POp::Recv, little, prev}})->wait();
  });
  EXPECT_NE(e.find("batch_isend_irecv on group 'world' failed"), std::string::npos) << e;
  world().barrier();
}

TEST(P2P, BadArguments) {
  const int size = world().size();
  Tensor t = Tensor::zeros(Shape{4}, DType::F32);
  std::string e = error_of([&] { world().batch_isend_irecv({{P2POp::Send, t, size}}); });
  EXPECT_NE(e.find(megatron::concat("peer ", size, " outside")), std::string::npos) << e;
  EXPECT_THROW(world().batch_isend_irecv({{P2POp::Recv, t, -1}}), megatron::Error);
  e = error_of([&] { world().batch_isend_irecv({{P2POp::Send, t, 0, 40000}}); });
  EXPECT_NE(e.find("tag 40000"), std::string::npos) << e;
  float dummy[4] = {};
  Tensor cuda = Tensor::wrap(dummy, Shape{4}, DType::F32, megatron::Device::CUDA);
  e = error_of([&] { world().batch_isend_irecv({{P2POp::Send, cuda, 0}}); });
  EXPECT_NE(e.find("NCCL"), std::string::npos) << e;
  // An empty batch is a no-op.
  world().batch_isend_irecv({})->wait();
  // Single-process groups have no peers.
  auto single = mp::make_single_process_communicator("solo");
  e = error_of([&] { single->batch_isend_irecv({{P2POp::Send, t, 0}}); });
  EXPECT_NE(e.find("no peers in a group of one"), std::string::npos) << e;
}
