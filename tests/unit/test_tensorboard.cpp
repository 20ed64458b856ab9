// The TensorBoard writer (megatron/training/tensorboard.h): CRC-32C test vectors; event files
// read back by an independent TFRecord + protobuf reader written here (lengths, both masked
// CRCs, Event/Summary/Value fields); a corrupted byte caught by the CRC; an unwritable
// directory is an InputError naming it; and the Trainer writing Megatron's "lm loss" curve when
// logging.tensorboard_dir is set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/core/error.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/tensorboard.h"
#include "megatron/training/trainer.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;

// ---- An independent reader: bitwise CRC-32C, TFRecord framing, protobuf wire format. ----

uint32_t bitwise_crc32c(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t masked(const std::string& s) {
  const uint32_t c = bitwise_crc32c(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
uint64_t le(const std::string& s, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The records of a TFRecord file; throws std::runtime_error on a bad length or CRC.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw std::runtime_error("truncated header");
    const std::string len_bytes = bytes.substr(at, 8);
    const uint64_t len = le(bytes, at, 8);
    if (le(bytes, at + 8, 4) != masked(len_bytes)) throw std::runtime_error("length CRC mismatch");
    at += 12;
    if (bytes.size() - at < len + 4) throw std::runtime_error("truncated record");
    std::string data = bytes.substr(at, len);
    if (le(bytes, at + len, 4) != masked(data)) throw std::runtime_error("data CRC mismatch");
    at += len + 4;
    out.push_back(std::move(data));
  }
  return out;
}

struct Field {
  uint32_t number = 0, wire = 0;
  uint64_t varint = 0;  // wire 0, 1 (fixed64 bits), 5 (fixed32 bits)
  std::string bytes;    // wire 2
};
uint64_t read_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (at >= s.size() || shift > 63) throw std::runtime_error("bad varint");
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}
std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = read_varint(s, at);
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.wire == 0) {
      f.varint = read_varint(s, at);
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (s.size() - at < n) throw std::runtime_error("truncated fixed");
      f.varint = le(s, at, n);
      at += n;
    } else if (f.wire == 2) {
      const uint64_t n = read_varint(s, at);
      if (s.size() - at < n) throw std::runtime_error("truncated bytes");
      f.bytes = s.substr(at, n);
      at += n;
    } else {
      throw std::runtime_error("unexpected wire type");
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  struct Scalar {
    std::string tag;
    float value = 0;
  };
  std::vector<Scalar> scalars;
};
Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1 && f.wire == 1) {
      std::memcpy(&e.wall_time, &f.varint, 8);
    } else if (f.number == 2 && f.wire == 0) {
      e.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3 && f.wire == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire == 2) {
      for (const Field& v : parse_message(f.bytes)) {
        if (v.number != 1 || v.wire != 2) throw std::runtime_error("bad Summary field");
        Event::Scalar sc;
        for (const Field& x : parse_message(v.bytes)) {
          if (x.number == 1 && x.wire == 2) sc.tag = x.bytes;
          if (x.number == 2 && x.wire == 5) {
            const auto bits = static_cast<uint32_t>(x.varint);
            std::memcpy(&sc.value, &bits, 4);
          }
        }
        e.scalars.push_back(sc);
      }
    } else {
      throw std::runtime_error("unexpected Event field " + std::to_string(f.number));
    }
  }
  return e;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("megatron_tb_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  return out;
}

// ---- Tests ----

TEST(TensorBoard, Crc32cTestVectors) {
  EXPECT_EQ(training::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(training::crc32c(""), 0u);
  EXPECT_EQ(training::crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(training::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  const std::string s = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(training::crc32c(s), bitwise_crc32c(s));
  const uint32_t c = training::crc32c(s);
  EXPECT_EQ(training::masked_crc32c(s.data(), s.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarsReadBackThroughIndependentReader) {
  const fs::path dir = fresh_dir("scalars") / "nested";
  std::string path;
  {
    training::TensorBoardWriter w(dir.string());
    path = w.path();
    w.add_scalar("lm loss", 1, 6.5);
    w.add_scalar("learning-rate", 1, 3e-4);
    w.add_scalar("lm loss", 2, 6.25);
    w.add_scalar("a much longer tag name so that the length varint needs care", 300, -1.5);
    w.flush();
  }
  const auto files = event_files(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].string(), path);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_NE(path.find(std::string(".") + host), std::string::npos) << path;

  const auto records = read_records(slurp(path));
  ASSERT_EQ(records.size(), 5u);
  const Event first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_GT(first.wall_time, 1.6e9);
  EXPECT_TRUE(first.scalars.empty());

  struct Want {
    std::string tag;
    int64_t step;
    float value;
  };
  const std::vector<Want> want = {
      {"lm loss", 1, 6.5f},
      {"learning-rate", 1, 3e-4f},
      {"lm loss", 2, 6.25f},
      {"a much longer tag name so that the length varint needs care", 300, -1.5f}};
  for (size_t i = 0; i < want.size(); ++i) {
    const Event e = decode_event(records[i + 1]);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_GE(e.wall_time, first.wall_time);
    ASSERT_EQ(e.scalars.size(), 1u);
    EXPECT_EQ(e.scalars[0].tag, want[i].tag);
    EXPECT_EQ(e.scalars[0].value, want[i].value);
  }
  fs::remove_all(dir.parent_path());
}

TEST(TensorBoard, CorruptedByteIsCaughtByTheCrc) {
  const fs::path dir = fresh_dir("corrupt");
  std::string path;
  {
    training::TensorBoardWriter w(dir.string());
    path = w.path();
    w.add_scalar("lm loss", 7, 1.25);
  }
  const std::string good = slurp(path);
  ASSERT_EQ(read_records(good).size(), 2u);
  // Flip one bit in the last record's float value (4 bytes before its trailing data CRC) and
  // one in its length field: each is rejected.
  std::string bad = good;
  bad[bad.size() - 5] ^= 0x01;
  EXPECT_THROW(read_records(bad), std::runtime_error);
  const size_t second = 12 + le(good, 0, 8) + 4;
  bad = good;
  bad[second] ^= 0x01;
  EXPECT_THROW(read_records(bad), std::runtime_error);
  fs::remove_all(dir);
}

TEST(TensorBoard, UnwritableDirIsAnInputErrorNamingIt) {
  const fs::path base = fresh_dir("unwritable");
  fs::create_directories(base);
  const fs::path blocker = base / "a_file";
  std::ofstream(blocker) << "not a directory";
  const std::string dir = (blocker / "tb").string();
  try {
    training::TensorBoardWriter w(dir);
    FAIL() << "wrote under a regular file";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
    EXPECT_NE(msg.find("logging.tensorboard_dir"), std::string::npos) << msg;
  }
  fs::remove_all(base);
}

TEST(TensorBoard, TrainerWritesLmLossPerStep) {
  constexpr int64_t kVocab = 1000;
  config::Recipe r =
      config::load_recipe(std::string(MEGATRON_SOURCE_DIR) + "/recipes/gpt_tiny.yaml");
  auto& m = r.model;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 0;
  m.ffn_hidden_size = 256;
  m.seq_length = 32;
  m.max_position_embeddings = 0;
  m.moe.num_experts = 0;
  m.vocab_size = kVocab;
  if (r.data.tokenizer.type == config::TokenizerType::Null) r.data.tokenizer.vocab_size = kVocab;
  r.parallel = config::ParallelConfig{};
  auto& t = r.training;
  t.device = config::TrainingDevice::CPU;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = 2;
  t.eval_interval = 0;
  t.eval_iters = 0;
  t.peak_tflops = 1;
  t.threads = 1;
  r.optimizer.schedule.warmup_iters = 0;
  r.optimizer.schedule.decay_iters.reset();
  r.checkpoint = config::CheckpointConfig{};
  r.logging = config::LoggingConfig{};
  const fs::path dir = fresh_dir("trainer");
  r.logging.tensorboard_dir = dir.string();
  r.data.mock = true;
  r.validate();

  auto source = std::make_shared<training::MockTokenSource>(r.model.seq_length, kVocab, 7);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::TrainSummary summary;
  {
    training::Trainer trainer(r, kVocab, source, nullptr, *world, log);
    summary = trainer.run();
  }
  const auto files = event_files(dir);
  ASSERT_EQ(files.size(), 1u) << log.str();
  const auto records = read_records(slurp(files[0].string()));
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(decode_event(records[0]).file_version, "brain.Event:2");
  std::vector<int64_t> lm_steps;
  std::vector<std::string> tags;
  for (size_t i = 1; i < records.size(); ++i) {
    const Event e = decode_event(records[i]);
    ASSERT_EQ(e.scalars.size(), 1u);
    if (e.step == 1) tags.push_back(e.scalars[0].tag);
    if (e.scalars[0].tag == "lm loss") {
      lm_steps.push_back(e.step);
      EXPECT_TRUE(std::isfinite(e.scalars[0].value));
      EXPECT_NEAR(e.scalars[0].value, std::log(static_cast<double>(kVocab)), 1.0);
    }
  }
  EXPECT_EQ(lm_steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(tags, (std::vector<std::string>{"lm loss", "learning-rate", "grad-norm", "loss-scale",
                                            "tokens-per-sec", "tflops", "mfu"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace megatron
