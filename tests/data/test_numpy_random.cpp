// numpy's legacy RandomState (MT19937, random_interval, shuffle) and numpy.sum, checked against
// tests/fixtures/data/numpy_random.txt (made by tools/gen_numpy_random_fixture.py with numpy).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/numpy_random.h"
#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

struct Record {
  std::string kind;
  std::vector<std::string> fields;
};

std::vector<Record> load_fixture() {
  const std::string path =
      std::string(MEGATRON_SOURCE_DIR) + "/tests/fixtures/data/numpy_random.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<Record> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    Record r;
    ls >> r.kind;
    std::string f;
    while (ls >> f) r.fields.push_back(f);
    out.push_back(std::move(r));
  }
  return out;
}

const std::vector<Record>& fixture() {
  static const std::vector<Record> records = load_fixture();
  return records;
}

uint64_t u64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

TEST(MT19937, MatchesReferenceAndStd) {
  // The reference generator's well-known 10000th output for seed 5489.
  MT19937 a(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = a.next_uint32();
  EXPECT_EQ(v, 4123659995u);
  // std::mt19937 is specified to be the same generator with the same seeding.
  for (uint32_t seed : {0u, 1u, 1234u, 4294967295u}) {
    MT19937 m(seed);
    std::mt19937 s(seed);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(m.next_uint32(), s()) << "seed " << seed << " i " << i;
  }
}

TEST(MT19937, RawOutputsMatchNumpy) {
  int checked = 0;
  for (const auto& r : fixture()) {
    if (r.kind != "raw") continue;
    const uint64_t seed = u64(r.fields[0]);
    const size_t count = u64(r.fields[1]);
    ASSERT_EQ(r.fields.size(), count + 2);
    NumpyRandomState rs(seed);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(rs.generator().next_uint32(), u64(r.fields[2 + i]))
          << "seed " << seed << " i " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(MT19937, Seed1234FirstOutputs) {
  // numpy.random.RandomState(1234).randint(0, 2**32, size=4, dtype=numpy.uint64)
  MT19937 m(1234);
  EXPECT_EQ(m.next_uint32(), 822569775u);
  EXPECT_EQ(m.next_uint32(), 2137449171u);
  EXPECT_EQ(m.next_uint32(), 2671936806u);
  EXPECT_EQ(m.next_uint32(), 3512589365u);
  // next_uint64: the first output is the high word.
  MT19937 h(1234);
  EXPECT_EQ(h.next_uint64(), (uint64_t{822569775u} << 32) | 2137449171u);
}

TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  int checked = 0;
  for (const auto& r : fixture()) {
    if (r.kind != "shuffle" && r.kind != "shuffle32") continue;
    const uint64_t seed = u64(r.fields[0]);
    const size_t n = u64(r.fields[1]);
    ASSERT_EQ(r.fields.size(), n + 2);
    if (r.kind == "shuffle") {
      std::vector<int64_t> a(n);
      std::iota(a.begin(), a.end(), 0);
      NumpyRandomState(seed).shuffle(std::span<int64_t>(a));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(a[i], static_cast<int64_t>(u64(r.fields[2 + i])))
            << "seed " << seed << " n " << n;
    } else {
      std::vector<int32_t> a(n);
      std::iota(a.begin(), a.end(), 0);
      NumpyRandomState(seed).shuffle(std::span<int32_t>(a));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(a[i], static_cast<int32_t>(u64(r.fields[2 + i])))
            << "seed " << seed << " n " << n;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 32);  // 6 seeds x n in {1, 2, 10, 1000, 3502}, + 2 int32 cases
}

TEST(NumpyRandomState, SharedStateAcrossShuffles) {
  int checked = 0;
  for (const auto& r : fixture()) {
    if (r.kind != "chain") continue;
    const uint64_t seed = u64(r.fields[0]);
    const size_t n1 = u64(r.fields[1]), n2 = u64(r.fields[2]);
    ASSERT_EQ(r.fields.size(), 3 + n1 + n2);
    NumpyRandomState rs(seed);
    std::vector<int32_t> a(n1);
    std::iota(a.begin(), a.end(), 0);
    rs.shuffle(std::span<int32_t>(a));
    std::vector<uint32_t> b(n2);
    std::iota(b.begin(), b.end(), 0u);
    rs.shuffle(std::span<uint32_t>(b));
    for (size_t i = 0; i < n1; ++i) ASSERT_EQ(a[i], static_cast<int32_t>(u64(r.fields[3 + i])));
    for (size_t i = 0; i < n2; ++i) ASSERT_EQ(b[i], u64(r.fields[3 + n1 + i]));
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(NumpyRandomState, IntervalMatchesNumpyIncluding64Bit) {
  int checked = 0;
  for (const auto& r : fixture()) {
    if (r.kind != "interval") continue;
    const uint64_t seed = u64(r.fields[0]), max = u64(r.fields[1]);
    const size_t count = u64(r.fields[2]);
    NumpyRandomState rs(seed);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(rs.random_interval(max), u64(r.fields[3 + i])) << "max " << max << " i " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

TEST(NumpyRandomState, HandComputedSmallCases) {
  // RandomState(1234): first outputs 822569775, 2137449171, 2671936806, ...
  // shuffle([0, 1]): i = 1, mask 1: 822569775 & 1 = 1 -> j = 1, no swap -> [0, 1].
  std::vector<int32_t> two{0, 1};
  NumpyRandomState(1234).shuffle(std::span<int32_t>(two));
  EXPECT_EQ(two, (std::vector<int32_t>{0, 1}));
  // shuffle([0, 1, 2]): i = 2, mask 3: 822569775 & 3 = 3 > 2 rejected; 2137449171 & 3 = 3
  // rejected; 2671936806 & 3 = 2 -> j = 2 (no swap). i = 1, mask 1: 3512589365 & 1 = 1 -> j = 1.
  std::vector<int32_t> three{0, 1, 2};
  NumpyRandomState(1234).shuffle(std::span<int32_t>(three));
  EXPECT_EQ(three, (std::vector<int32_t>{0, 1, 2}));
  // Empty and single-element arrays consume nothing.
  NumpyRandomState rs(1234);
  std::vector<int64_t> none, one{7};
  rs.shuffle(std::span<int64_t>(none));
  rs.shuffle(std::span<int64_t>(one));
  EXPECT_EQ(rs.generator().next_uint32(), 822569775u);
}

TEST(NumpyRandomState, SeedOutOfRangeIsInputError) {
  EXPECT_THROW(NumpyRandomState(uint64_t{1} << 32), InputError);
  EXPECT_NO_THROW(NumpyRandomState(0xffffffffull));
}

TEST(NumpySum, PairwiseMatchesNumpy) {
  int checked = 0;
  for (const auto& r : fixture()) {
    if (r.kind != "sum") continue;
    std::vector<double> a;
    size_t i = 0;
    for (; r.fields[i] != "="; ++i) a.push_back(std::strtod(r.fields[i].c_str(), nullptr));
    const double expect = std::strtod(r.fields[i + 1].c_str(), nullptr);
    EXPECT_EQ(numpy_sum(a), expect) << "n = " << a.size();
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

}  // namespace
}  // namespace megatron::data
