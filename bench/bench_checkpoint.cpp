// Checkpoint throughput against the disk's own: save and load MB/s of a ~500 MB model next to a
// plain sequential write + fsync (and read) of the same bytes.
//
//   build/bin/bench_checkpoint [--mb 512] [--dir DIR] [--repeat 3]
//
// The model: 8 large [rows, 4096] matrices plus 64 small [4096] vectors (norm weights), saved
// by one process (checkpoint::save over a one-process communicator, fsync included). Loads
// are timed twice: with the shard's pages dropped from the page cache first
// (posix_fadvise DONTNEED after the fsync, so the data comes from the disk) and warm; plus a
// resharding load as two tensor-parallel column shards. Each figure is the median of --repeat
// runs; "ratio" is checkpoint time / plain time (the goal: save within 2x of plain write).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/file_io.h"

namespace ck = megatron::checkpoint;
namespace fs = std::filesystem;
using megatron::Shape;

namespace {

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void drop_dir_cache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) drop_cache(e.path().string());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mb = 512;
  int repeat = 3;
  std::string dir =
      (fs::temp_directory_path() / megatron::concat("bench_checkpoint_", ::getpid())).string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc) {
      mb = std::atoll(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_checkpoint [--mb 512] [--dir DIR] [--repeat 3]\n");
      return 2;
    }
  }
  try {
    fs::remove_all(dir);
    fs::create_directories(dir);
    constexpr int64_t kCols = 4096, kMatrices = 8, kVectors = 64;
    const int64_t rows = std::max<int64_t>(
        2, (mb * 1024 * 1024 / 4 - kVectors * kCols) / (kMatrices * kCols) / 2 * 2);
    std::vector<std::vector<float>> bufs;
    std::vector<ck::TensorPiece> pieces;
    for (int64_t m = 0; m < kMatrices + kVectors; ++m) {
      const bool matrix = m < kMatrices;
      const Shape shape = matrix ? Shape{rows, kCols} : Shape{kCols};
      bufs.emplace_back(static_cast<size_t>(shape.numel()));
      for (size_t i = 0; i < bufs.back().size(); ++i)
        bufs.back()[i] = static_cast<float>((i * 2654435761u + static_cast<size_t>(m)) % 1000003);
      ck::TensorPiece p;
      p.name = matrix ? megatron::concat("layers.", m, ".weight")
                      : megatron::concat("norms.", m, ".weight");
      p.global_shape = p.local_shape = shape;
      p.data = bufs.back().data();
      pieces.push_back(p);
    }
    double total_bytes = 0;
    for (const auto& b : bufs) total_bytes += static_cast<double>(b.size()) * 4;
    const double total_mb = total_bytes / (1024.0 * 1024.0);
    std::printf("checkpoint benchmark: %.1f MB in %zu tensors, dir %s, median of %d\n", total_mb,
                pieces.size(), dir.c_str(), repeat);

    auto comm = megatron::parallel::make_single_process_communicator("world");
    std::vector<std::vector<float>> out(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) out[i].assign(bufs[i].size(), 0.0f);
    auto load_pieces = [&](int tp, int r) {
      std::vector<ck::TensorPiece> req;
      for (size_t i = 0; i < pieces.size(); ++i) {
        ck::TensorPiece p = pieces[i];
        if (tp > 1 && p.global_shape.ndim() == 2) {
          p.local_shape[1] /= tp;
          p.shard = megatron::ShardSpec{1, megatron::ShardAxis::Tensor, r, tp};
        }
        p.data = nullptr;
        p.dest = out[i].data();
        req.push_back(p);
      }
      return req;
    };

    std::vector<double> t_plain_w, t_plain_r, t_save, t_load_cold, t_load_warm, t_reshard;
    const std::string plain = (fs::path(dir) / "plain.bin").string();
    for (int rep = 0; rep < repeat; ++rep) {
      // Plain: the same bytes, one write per tensor, then fsync.
      t_plain_w.push_back(seconds([&] {
        ck::io::Fd fd = ck::io::open_for_write(plain);
        for (const auto& b : bufs) ck::io::write_all(fd.get(), b.data(), b.size() * 4, plain);
        ck::io::fsync_fd(fd.get(), plain);
        fd.close(plain);
      }));
      drop_cache(plain);
      std::vector<char> sink(static_cast<size_t>(total_bytes));
      t_plain_r.push_back(seconds([&] {
        ck::io::Fd fd = ck::io::open_for_read(plain);
        ck::io::pread_all(fd.get(), sink.data(), sink.size(), 0, plain);
      }));
      fs::remove(plain);

      ck::SaveRequest req;
      req.dir = dir;
      req.iteration = rep + 1;
      req.metadata = {{"bench", true}};
      req.pieces = pieces;
      t_save.push_back(seconds([&] { ck::save(req, *comm, /*keep_last=*/1); }));
      drop_dir_cache(ck::checkpoint_path(dir, rep + 1));
      t_load_cold.push_back(seconds([&] { ck::load({dir, std::nullopt, load_pieces(1, 0)}); }));
      for (size_t i = 0; i < bufs.size(); ++i)
        if (std::memcmp(out[i].data(), bufs[i].data(), bufs[i].size() * 4) != 0) {
          std::fprintf(stderr, "bench_checkpoint: loaded tensor %zu differs\n", i);
          return 1;
        }
      t_load_warm.push_back(seconds([&] { ck::load({dir, std::nullopt, load_pieces(1, 0)}); }));
      t_reshard.push_back(seconds([&] {
        for (int r = 0; r < 2; ++r) ck::load({dir, std::nullopt, load_pieces(2, r)});
      }));
    }
    auto row = [&](const char* what, const std::vector<double>& t, double base) {
      const double s = median(t);
      if (base > 0)
        std::printf("  %-40s %8.3f s %9.1f MB/s   ratio %.2f\n", what, s, total_mb / s, s / base);
      else
        std::printf("  %-40s %8.3f s %9.1f MB/s\n", what, s, total_mb / s);
    };
    row("plain sequential write + fsync", t_plain_w, 0);
    row("checkpoint save (write + fsync + commit)", t_save, median(t_plain_w));
    row("plain sequential read (cache dropped)", t_plain_r, 0);
    row("checkpoint load (cache dropped)", t_load_cold, median(t_plain_r));
    row("checkpoint load (warm cache)", t_load_warm, 0);
    row("checkpoint load as tp=2 column shards", t_reshard, 0);
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
