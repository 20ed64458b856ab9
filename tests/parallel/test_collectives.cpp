// MpiCommunicator collectives against values computed locally: every op and dtype over odd
// sizes and empty buffers, in-place variants, uneven all-to-all, async overlap, chunking of
// long messages, bf16/fp16 reductions (through fp32), and the errors (CUDA tensors, avg of
// ints, bad sizes).
// mpirun-np: 1 2 3 4
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <type_traits>

#include "kernels/common/numeric.h"
#include "parallel_test.h"
#include "tests/support/collective_values.h"

namespace mp = megatron::parallel;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using mp::ReduceOp;
using mp::testing::world;

namespace {

using mp::testing::expected_reduce;
using mp::testing::value;

const int64_t kSizes[] = {0, 1, 7, 1023, 100003};

template <typename T>
Tensor filled(int64_t n, int r, int64_t offset = 0) {
  Tensor t = Tensor::empty(Shape{n}, megatron::DTypeOf<T>::value);
  for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = value<T>(r, i + offset);
  return t;
}

template <typename T>
void check_all_reduce(mp::Communicator& c, ReduceOp op) {
  for (int64_t n : kSizes) {
    Tensor t = filled<T>(n, c.rank());
    c.all_reduce(t, op);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(p[i], expected_reduce<T>(op, i, c.size()))
          << megatron::dtype_name(t.dtype()) << " " << mp::reduce_op_name(op) << " n=" << n
          << " i=" << i;
  }
}

template <typename T>
void check_reduce_scatter(mp::Communicator& c, ReduceOp op) {
  for (int64_t n : kSizes) {
    Tensor in = filled<T>(n * c.size(), c.rank());
    Tensor out = Tensor::empty(Shape{n}, in.dtype());
    c.reduce_scatter(in, out, op);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out.data<T>()[i], expected_reduce<T>(op, c.rank() * n + i, c.size()))
          << mp::reduce_op_name(op) << " n=" << n << " i=" << i;
    // In place: the output is this rank's own chunk of the input.
    Tensor in2 = filled<T>(n * c.size(), c.rank());
    Tensor own = in2.flat_view(c.rank() * n, Shape{n});
    c.reduce_scatter(in2, own, op);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(own.data<T>()[i], expected_reduce<T>(op, c.rank() * n + i, c.size()));
  }
}

template <typename T>
void check_all_gather(mp::Communicator& c) {
  for (int64_t n : kSizes) {
    Tensor in = filled<T>(n, c.rank());
    Tensor out = Tensor::zeros(Shape{n * c.size()}, in.dtype());
    c.all_gather(in, out);
    for (int r = 0; r < c.size(); ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.data<T>()[r * n + i], value<T>(r, i));
    // In place: the input is this rank's chunk of the output.
    Tensor out2 = Tensor::zeros(Shape{n * c.size()}, in.dtype());
    Tensor own = out2.flat_view(c.rank() * n, Shape{n});
    own.copy_from(in);
    c.all_gather(own, out2);
    for (int r = 0; r < c.size(); ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out2.data<T>()[r * n + i], value<T>(r, i));
  }
}

template <typename T>
void check_broadcast(mp::Communicator& c) {
  for (int64_t n : kSizes)
    for (int root = 0; root < c.size(); ++root) {
      Tensor t = filled<T>(n, c.rank());
      c.broadcast(t, root);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(t.data<T>()[i], value<T>(root, i));
    }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const megatron::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(Collectives, WorldMatchesMpi) {
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(world().rank(), rank);
  EXPECT_EQ(world().size(), size);
  EXPECT_EQ(world().name(), "world");
  for (int r = 0; r < size; ++r) EXPECT_EQ(world().world_rank_of(r), r);
  EXPECT_THROW(world().world_rank_of(size), megatron::Error);
  EXPECT_DOUBLE_EQ(world().timeout_s(), mp::resolve_comm_timeout_s());
}

TEST(Collectives, AllReduceEveryOpAndDtype) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    check_all_reduce<float>(world(), op);
    check_all_reduce<double>(world(), op);
    if (op == ReduceOp::Avg) continue;
    check_all_reduce<int32_t>(world(), op);
    check_all_reduce<int64_t>(world(), op);
    check_all_reduce<uint8_t>(world(), op);
    check_all_reduce<int16_t>(world(), op);
  }
}

TEST(Collectives, AvgDividesTheSum) {
  Tensor t = Tensor::empty(Shape{3}, DType::F32);
  for (int i = 0; i < 3; ++i) t.data<float>()[i] = static_cast<float>(world().rank() + i);
  world().all_reduce(t, ReduceOp::Avg);
  const int n = world().size();
  for (int i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(t.data<float>()[i], static_cast<float>((n - 1) * n / 2 + i * n) / n);
}

TEST(Collectives, ReduceScatterEveryOpAndDtype) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    check_reduce_scatter<float>(world(), op);
    check_reduce_scatter<double>(world(), op);
    if (op == ReduceOp::Avg) continue;
    check_reduce_scatter<int32_t>(world(), op);
    check_reduce_scatter<int64_t>(world(), op);
    check_reduce_scatter<uint8_t>(world(), op);
  }
}

TEST(Collectives, AllGatherEveryDtype) {
  check_all_gather<float>(world());
  check_all_gather<double>(world());
  check_all_gather<int32_t>(world());
  check_all_gather<int64_t>(world());
  check_all_gather<uint8_t>(world());
  check_all_gather<uint16_t>(world());  // same path as bf16/fp16 bits
}

TEST(Collectives, Bf16IsMovedBitExact) {
  Tensor in = Tensor::empty(Shape{5}, DType::BF16);
  for (int i = 0; i < 5; ++i)
    in.data<megatron::bf16_t>()[i].bits = static_cast<uint16_t>(0x3f80 + world().rank() * 8 + i);
  Tensor out = Tensor::empty(Shape{5 * world().size()}, DType::BF16);
  world().all_gather(in, out);
  for (int r = 0; r < world().size(); ++r)
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(out.data<megatron::bf16_t>()[r * 5 + i].bits, 0x3f80 + r * 8 + i);
  world().broadcast(in, world().size() - 1);
  EXPECT_EQ(in.data<megatron::bf16_t>()[0].bits, 0x3f80 + (world().size() - 1) * 8);
}

// 16-bit floats reduce as fp32 and are rounded once: the sum of exactly representable values
// is exact, and a sum that is not representable is rounded to nearest even.
TEST(Collectives, Bf16AndFp16ReduceThroughFp32) {
  const int n = world().size(), r = world().rank();
  for (DType dt : {DType::BF16, DType::F16}) {
    auto set = [&](Tensor& t, int64_t i, float v) {
      static_cast<uint16_t*>(t.raw())[i] = dt == DType::BF16
                                               ? megatron::math::float_to_bf16_bits(v)
                                               : megatron::math::float_to_fp16_bits(v);
    };
    auto get = [&](const Tensor& t, int64_t i) {
      const uint16_t b = static_cast<const uint16_t*>(t.raw())[i];
      return dt == DType::BF16 ? megatron::math::bf16_bits_to_float(b)
                               : megatron::math::fp16_bits_to_float(b);
    };
    Tensor t = Tensor::empty(Shape{3}, dt);
    for (int64_t i = 0; i < 3; ++i) set(t, i, 0.25f * static_cast<float>(r + 1) + i);
    world().all_reduce(t, ReduceOp::Sum);
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(get(t, i), 0.125f * n * (n + 1) + static_cast<float>(i) * n) << dtype_name(dt);
    Tensor in = Tensor::empty(Shape{2 * n}, dt), out = Tensor::empty(Shape{2}, dt);
    for (int64_t i = 0; i < 2 * n; ++i) set(in, i, static_cast<float>(i + r));
    world().reduce_scatter(in, out, ReduceOp::Sum);
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t g = 2 * r + i;
      EXPECT_EQ(get(out, i), static_cast<float>(g * n + n * (n - 1) / 2)) << dtype_name(dt);
    }
    // 1 + 2^-8 is not a bf16 (8 mantissa bits): one fp32 sum then one rounding gives 1 (even).
    if (dt == DType::BF16 && n == 2) {
      Tensor h = Tensor::empty(Shape{1}, dt);
      static_cast<uint16_t*>(h.raw())[0] =
          megatron::math::float_to_bf16_bits(r == 0 ? 1.0f : 0.00390625f);
      world().all_reduce(h, ReduceOp::Sum);
      EXPECT_EQ(get(h, 0), 1.0f);
    }
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  check_broadcast<float>(world());
  check_broadcast<int64_t>(world());
  check_broadcast<uint8_t>(world());
}

TEST(Collectives, Barrier) {
  for (int i = 0; i < 5; ++i) world().barrier();
}

TEST(Collectives, UnevenAllToAllWithZeroCounts) {
  const int n = world().size(), me = world().rank();
  // count(src, dst): some pairs send nothing, including a rank to itself.
  auto count = [](int src, int dst, int scale) -> int64_t {
    return ((src * 3 + dst * 5) % 4) * scale;
  };
  for (int scale : {0, 1, 7, 1023}) {
    std::vector<int64_t> send(n), recv(n);
    int64_t total_send = 0, total_recv = 0;
    for (int r = 0; r < n; ++r) {
      send[r] = count(me, r, scale);
      recv[r] = count(r, me, scale);
      total_send += send[r];
      total_recv += recv[r];
    }
    // Element k of the message src -> dst holds src * 1e6 + dst * 1e4 + k.
    Tensor in = Tensor::empty(Shape{total_send}, DType::F64);
    int64_t off = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t k = 0; k < send[r]; ++k) in.data<double>()[off++] = me * 1e6 + r * 1e4 + k;
    Tensor out = Tensor::zeros(Shape{total_recv}, DType::F64);
    world().all_to_all(in, send, out, recv);
    off = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t k = 0; k < recv[r]; ++k)
        ASSERT_EQ(out.data<double>()[off++], r * 1e6 + me * 1e4 + k)
            << "scale " << scale << " from " << r << " k " << k;
  }
  // Every count zero (a rank that routes no tokens anywhere).
  std::vector<int64_t> zeros(n, 0);
  Tensor empty_in = Tensor::empty(Shape{0}, DType::I32),
         empty_out = Tensor::empty(Shape{0}, DType::I32);
  world().all_to_all(empty_in, zeros, empty_out, zeros);
  // Even exchange of one int per pair: the transposition.
  std::vector<int64_t> ones(n, 1);
  Tensor a = Tensor::empty(Shape{n}, DType::I32), b = Tensor::empty(Shape{n}, DType::I32);
  for (int r = 0; r < n; ++r) a.data<int32_t>()[r] = me * 100 + r;
  world().all_to_all(a, ones, b, ones);
  for (int r = 0; r < n; ++r) EXPECT_EQ(b.data<int32_t>()[r], r * 100 + me);
}

TEST(Collectives, AsyncOperationsOverlap) {
  const int n = world().size(), me = world().rank();
  // Several reductions in flight at once, waited in reverse order, plus a gather and a
  // reduce-scatter started between them.
  std::vector<Tensor> bufs;
  std::vector<std::unique_ptr<mp::Work>> works;
  for (int64_t len : {1023, 7, 100003, 1, 0}) bufs.push_back(filled<float>(len, me));
  for (auto& b : bufs) works.push_back(world().all_reduce_async(b, ReduceOp::Sum));
  Tensor gin = filled<int32_t>(9, me), gout = Tensor::zeros(Shape{9 * n}, DType::I32);
  works.push_back(world().all_gather_async(gin, gout));
  Tensor rin = filled<double>(5 * n, me), rout = Tensor::zeros(Shape{5}, DType::F64);
  works.push_back(world().reduce_scatter_async(rin, rout, ReduceOp::Avg));
  Tensor avg = filled<double>(100003, me);
  works.push_back(world().all_reduce_async(avg, ReduceOp::Avg));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (auto& w : works) w->wait();  // waiting twice is harmless
  for (auto& b : bufs)
    for (int64_t i = 0; i < b.numel(); ++i)
      ASSERT_EQ(b.data<float>()[i], expected_reduce<float>(ReduceOp::Sum, i, n));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 9; ++i) ASSERT_EQ(gout.data<int32_t>()[r * 9 + i], value<int32_t>(r, i));
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(rout.data<double>()[i], expected_reduce<double>(ReduceOp::Avg, me * 5 + i, n));
  for (int64_t i = 0; i < avg.numel(); ++i)
    ASSERT_EQ(avg.data<double>()[i], expected_reduce<double>(ReduceOp::Avg, i, n));
}

TEST(Collectives, UnwaitedWorkIsCompletedOnDestruction) {
  Tensor t = filled<float>(1023, world().rank());
  { auto w = world().all_reduce_async(t, ReduceOp::Max); }
  for (int64_t i = 0; i < t.numel(); ++i)
    ASSERT_EQ(t.data<float>()[i], expected_reduce<float>(ReduceOp::Max, i, world().size()));
}

TEST(Collectives, SplitGroupsTranslateRanks) {
  const int n = world().size(), me = world().rank();
  // Reversed order, then odd/even halves.
  auto rev = world().split(0, n - 1 - me, "reversed");
  ASSERT_TRUE(rev);
  EXPECT_EQ(rev->rank(), n - 1 - me);
  EXPECT_EQ(rev->name(), "reversed");
  for (int g = 0; g < n; ++g) EXPECT_EQ(rev->world_rank_of(g), n - 1 - g);
  auto half = world().split(me % 2, me, "half");
  ASSERT_TRUE(half);
  EXPECT_EQ(half->size(), (n + 1 - me % 2) / 2);
  for (int g = 0; g < half->size(); ++g) EXPECT_EQ(half->world_rank_of(g) % 2, me % 2);
  Tensor t = Tensor::empty(Shape{1}, DType::I64);
  t.data<int64_t>()[0] = me;
  half->all_reduce(t, ReduceOp::Sum);
  int64_t want = 0;
  for (int r = me % 2; r < n; r += 2) want += r;
  EXPECT_EQ(t.data<int64_t>()[0], want);
  // color < 0: no group.
  auto none = world().split(me == 0 ? -1 : 1, me, "some");
  EXPECT_EQ(none == nullptr, me == 0);
}

TEST(Collectives, LongMessagesAreChunked) {
  // Lower the per-call limit so 100003 elements need 101 MPI calls.
  auto c = world().split(0, world().rank(), "chunked");
  c->set_max_chunk_elements(1000);
  check_all_reduce<float>(*c, ReduceOp::Sum);
  check_all_reduce<int64_t>(*c, ReduceOp::Max);
  check_all_reduce<double>(*c, ReduceOp::Avg);
  check_broadcast<int32_t>(*c);
  // Gathers cannot be chunked: a clear error, on every rank alike.
  Tensor in = Tensor::zeros(Shape{1001}, DType::F32);
  Tensor out = Tensor::zeros(Shape{1001 * c->size()}, DType::F32);
  EXPECT_NE(error_of([&] { c->all_gather(in, out); }).find("MPI count limit"), std::string::npos);
  Tensor rs_in = Tensor::zeros(Shape{1001 * c->size()}, DType::F32);
  EXPECT_NE(error_of([&] { c->reduce_scatter(rs_in, in, ReduceOp::Sum); }).find("count limit"),
            std::string::npos);
  std::vector<int64_t> counts(c->size(), 1001);
  Tensor a2a = Tensor::zeros(Shape{1001 * c->size()}, DType::F32);
  Tensor a2b = Tensor::zeros(Shape{1001 * c->size()}, DType::F32);
  EXPECT_NE(error_of([&] { c->all_to_all(a2a, counts, a2b, counts); }).find("count limit"),
            std::string::npos);
  EXPECT_THROW(c->set_max_chunk_elements(0), megatron::Error);
}

TEST(Collectives, ClearErrors) {
  const int n = world().size();
  float dummy[4] = {};
  Tensor cuda = Tensor::wrap(dummy, Shape{4}, DType::F32, megatron::Device::CUDA);
  std::string e = error_of([&] { world().all_reduce(cuda, ReduceOp::Sum); });
  EXPECT_NE(e.find("NCCL"), std::string::npos) << e;
  EXPECT_NE(e.find("group 'world'"), std::string::npos) << e;

  Tensor ints = Tensor::zeros(Shape{4}, DType::I32);
  e = error_of([&] { world().all_reduce(ints, ReduceOp::Avg); });
  EXPECT_NE(e.find("floating"), std::string::npos) << e;
  Tensor rs_out = Tensor::zeros(Shape{4}, DType::I32);
  Tensor rs_in = Tensor::zeros(Shape{4 * n}, DType::I32);
  EXPECT_THROW(world().reduce_scatter(rs_in, rs_out, ReduceOp::Avg), megatron::Error);

  Tensor small = Tensor::zeros(Shape{3}, DType::F32),
         wrong = Tensor::zeros(Shape{3 * n + 1}, DType::F32);
  e = error_of([&] { world().all_gather(small, wrong); });
  EXPECT_NE(e.find("output holds"), std::string::npos) << e;
  Tensor wrong_dtype = Tensor::zeros(Shape{3 * n}, DType::F64);
  EXPECT_THROW(world().all_gather(small, wrong_dtype), megatron::Error);
  EXPECT_THROW(world().broadcast(small, n), megatron::Error);
  EXPECT_THROW(world().broadcast(small, -1), megatron::Error);

  std::vector<int64_t> counts(n, 1), short_counts(n > 1 ? n - 1 : 2, 1);
  Tensor a = Tensor::zeros(Shape{n}, DType::F32), b = Tensor::zeros(Shape{n}, DType::F32);
  e = error_of([&] { world().all_to_all(a, short_counts, b, counts); });
  EXPECT_NE(e.find("send and"), std::string::npos) << e;
  std::vector<int64_t> too_many(n, 2);
  e = error_of([&] { world().all_to_all(a, too_many, b, counts); });
  EXPECT_NE(e.find("sum to"), std::string::npos) << e;
  std::vector<int64_t> negative(n, 1);
  negative[0] = -1;
  EXPECT_THROW(world().all_to_all(a, negative, b, counts), megatron::Error);
  EXPECT_THROW(world().all_to_all(a, counts, a, counts), megatron::Error);  // aliasing
  // Nothing above reached MPI: the group still works.
  world().barrier();
}

TEST(Collectives, TimeoutConfiguration) {
  const char* env = std::getenv("MEGATRON_COMM_TIMEOUT_S");
  const std::string saved = env ? env : "";
  setenv("MEGATRON_COMM_TIMEOUT_S", "60", 1);
  EXPECT_DOUBLE_EQ(mp::resolve_comm_timeout_s(5.0), 60.0);  // env wins over the option
  unsetenv("MEGATRON_COMM_TIMEOUT_S");
  EXPECT_DOUBLE_EQ(mp::resolve_comm_timeout_s(5.0), 5.0);
  EXPECT_DOUBLE_EQ(mp::resolve_comm_timeout_s(), mp::kDefaultCommTimeoutS);
  setenv("MEGATRON_COMM_TIMEOUT_S", "ten", 1);
  EXPECT_THROW(mp::resolve_comm_timeout_s(5.0), megatron::InputError);
  setenv("MEGATRON_COMM_TIMEOUT_S", "0.5", 1);
  EXPECT_DOUBLE_EQ(mp::resolve_comm_timeout_s(5.0), 0.5);
  if (env)
    setenv("MEGATRON_COMM_TIMEOUT_S", saved.c_str(), 1);
  else
    unsetenv("MEGATRON_COMM_TIMEOUT_S");
}
