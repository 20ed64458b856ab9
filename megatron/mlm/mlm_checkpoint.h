#pragma once
// Megatron-LM checkpoints read without Python: a save directory
// (`latest_checkpointed_iteration.txt` naming `iter_NNNNNNN/`, or `release/`) in either of
// Megatron-LM's formats:
//   torch_dist  iter_NNNNNNN/.metadata + __R_I.distcp (a PyTorch distributed checkpoint,
//               megatron/checkpoint/distcp.h), common.pt (args, iteration, ...), metadata.json;
//   torch       iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt, one torch.save per
//               tensor- (pipeline-, expert-) parallel rank.
// Every pickle goes through the restricted unpickler (megatron/checkpoint/pickle.h): nothing in
// a checkpoint is ever run.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle.h"

namespace megatron::mlm {

enum class Format { TorchDist, Torch };
const char* format_name(Format f);

// Megatron-LM's `args` (an argparse.Namespace) as data. Values that are enum members (Megatron's
// AttnBackend, signal.Signals) read as their names' objects and are never interpreted.
class MlmArgs {
 public:
  MlmArgs() = default;
  MlmArgs(checkpoint::PickleRef namespace_, std::string where);
  const std::string& where() const { return where_; }
  const checkpoint::PickleRef& namespace_value() const { return ns_; }
  std::vector<std::string> keys() const;  // in the order saved
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Unset keys and None read as the fallback; a value of another type is an InputError naming
  // the key.
  bool is_set(const std::string& key) const;      // present and not None
  int64_t integer(const std::string& key) const;  // required
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  double number_or(const std::string& key, double fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  // A list (or tuple) of integers, e.g. a per-layer moe_layer_freq; required.
  std::vector<int64_t> integer_list(const std::string& key) const;
  const checkpoint::PickleValue* find(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

 private:
  checkpoint::PickleRef ns_;
  std::string where_;
};

struct MlmCheckpoint {
  std::string root;  // the save directory given
  std::string dir;   // its iter_NNNNNNN (or release) directory
  Format format = Format::TorchDist;
  int64_t iteration = 0;
  bool release = false;
  MlmArgs args;
  // The top-level dict of common.pt (torch_dist) or of the first rank file (torch): args,
  // iteration, and the optimizer's and scheduler's states when saved.
  checkpoint::PickleRef top;
  int64_t tp = 1, pp = 1, ep = 1, vpp = 1;  // the layout it was saved in
  // Legacy format: each rank's file, with its ranks.
  struct RankFile {
    std::string path;
    int64_t tp_rank = 0, pp_rank = 0, ep_rank = 0;
  };
  std::vector<RankFile> rank_files;
};

// Opens DIR (a save directory, or an iter_NNNNNNN / release directory itself) at `iteration`
// (default: the tracker file's). InputError naming the file and what is wrong: no tracker,
// no such iteration, a format not recognised, missing mp_rank files, args absent or malformed.
MlmCheckpoint open_checkpoint(const std::string& dir, std::optional<int64_t> iteration);

}  // namespace megatron::mlm
