// checkpoint_info: what a checkpoint holds, after checking it.
// Exit codes: 0 ok, 1 bad input (missing/corrupt checkpoint), 2 usage.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/core/error.h"
#include "megatron/core/format.h"

namespace {

constexpr const char* kUsage = R"(usage: checkpoint_info DIR [--iteration N] [--json] [--no-verify]

Prints a checkpoint's iteration, its metadata (resolved recipe, consumed samples, scheduler,
RNG and data state, ...) and its tensors: name, global shape, dtype, number of saved pieces and
bytes. DIR is a checkpoint root (the checkpoint DIR/latest names is shown, or iteration N) or
one iter_NNNNNNN directory. Unless --no-verify, every shard file is checked against
metadata.json (present, size, safetensors header) and every tensor must be covered exactly once.
  --iteration N   show DIR/iter_NNNNNNN instead of the latest
  --json          one JSON object instead of the table
  --no-verify     read metadata.json only
)";

}  // namespace

int main(int argc, char** argv) {
  namespace ck = megatron::checkpoint;
  std::string dir;
  std::optional<int64_t> iteration;
  bool as_json = false, verify = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iteration" && i + 1 < argc) {
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < 0) {
        std::fprintf(stderr,
                     "checkpoint_info: --iteration needs a non-negative integer, got '%s'\n",
                     argv[i]);
        return 2;
      }
      iteration = v;
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "--no-verify") {
      verify = false;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!a.empty() && a[0] != '-' && dir.empty()) {
      dir = a;
    } else {
      std::fprintf(stderr, "checkpoint_info: unexpected argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (dir.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    const ck::CheckpointIndex index = ck::read_index(dir, iteration);
    if (verify) {
      ck::verify_files(index);
      for (const auto& [name, t] : index.tensors) {
        std::vector<const ck::PieceGeometry*> geoms;
        for (const auto& p : t.pieces) geoms.push_back(&p.geometry);
        if (auto problem = ck::tiling_problem(t.shape, geoms))
          throw megatron::InputError(megatron::concat(
              "checkpoint ", index.path, "/metadata.json: tensor '", name, "': ", *problem));
      }
    }
    uint64_t total = 0;
    for (const auto& [f, bytes] : index.files) total += bytes;
    if (as_json) {
      nlohmann::ordered_json out;
      out["path"] = index.path;
      out["iteration"] = index.iteration;
      out["format_version"] = index.format_version;
      out["metadata"] = index.metadata;
      out["files"] = index.files;
      out["total_bytes"] = total;
      out["verified"] = verify;
      out["tensors"] = nlohmann::ordered_json::array();
      for (const auto& [name, t] : index.tensors) {
        uint64_t bytes = 0;
        for (const auto& p : t.pieces) bytes += p.data_end - p.data_begin;
        out["tensors"].push_back({{"name", name},
                                  {"shape", t.shape},
                                  {"dtype", t.dtype},
                                  {"pieces", t.pieces.size()},
                                  {"bytes", bytes}});
      }
      std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                << "\n";
      return 0;
    }
    std::printf("checkpoint  %s\n", index.path.c_str());
    std::printf("iteration   %lld\n", static_cast<long long>(index.iteration));
    std::printf("format      %d%s\n", index.format_version, verify ? " (files verified)" : "");
    std::printf("files       %zu, %s\n", index.files.size(),
                megatron::human_bytes(static_cast<double>(total)).c_str());
    std::printf(
        "metadata    %s\n",
        index.metadata.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    size_t name_width = 4;
    for (const auto& [name, t] : index.tensors) name_width = std::max(name_width, name.size());
    std::printf("\n%-*s  %-20s  %-5s  %6s  %12s\n", static_cast<int>(name_width), "name",
                "global shape", "dtype", "pieces", "bytes");
    int64_t elements = 0;
    for (const auto& [name, t] : index.tensors) {
      uint64_t bytes = 0;
      for (const auto& p : t.pieces) bytes += p.data_end - p.data_begin;
      elements += t.numel();
      std::printf("%-*s  %-20s  %-5s  %6zu  %12llu\n", static_cast<int>(name_width), name.c_str(),
                  nlohmann::json(t.shape).dump().c_str(), t.dtype.c_str(), t.pieces.size(),
                  static_cast<unsigned long long>(bytes));
    }
    std::printf("\n%zu tensors, %lld elements\n", index.tensors.size(),
                static_cast<long long>(elements));
  } catch (const megatron::InputError& e) {
    std::fprintf(stderr, "checkpoint_info: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_info: %s\n", e.what());
    return 1;
  }
  return 0;
}
