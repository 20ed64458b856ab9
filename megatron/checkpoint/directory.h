#pragma once
// A checkpoint directory's layout: DIR/iter_NNNNNNN/ per saved iteration (complete once its
// metadata.json is in place and names that iteration), DIR/latest naming the newest, and how the
// newest complete one is found.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megatron::checkpoint {

inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kLatestFile = "latest";

std::string iter_name(int64_t iteration);  // "iter_0000042"
// "iter_<digits>" -> the number; anything else (temporaries included) -> nullopt.
std::optional<int64_t> parse_iter_name(std::string_view s);

// DIR/iter_NNNNNNN (7 digits, more when needed).
std::string checkpoint_path(const std::string& dir, int64_t iteration);

// DIR/iter_NNNNNNN holds a metadata.json that parses and names that iteration.
bool is_complete(const std::string& dir, int64_t iteration);
// The complete checkpoints in DIR, newest first.
std::vector<int64_t> complete_iterations(const std::string& dir);

// The newest complete checkpoint of DIR (DIR/latest when it names a complete one, else the
// newest complete iter_NNNNNNN) and what was passed over to find it, one sentence each.
struct LatestCheckpoint {
  std::optional<int64_t> iteration;
  std::vector<std::string> skipped;
};
LatestCheckpoint find_latest(const std::string& dir);

// The iteration DIR/latest names if that checkpoint is complete; else the newest complete
// iter_NNNNNNN directory; nullopt when there is none (or DIR does not exist).
std::optional<int64_t> latest_iteration(const std::string& dir);

}  // namespace megatron::checkpoint
