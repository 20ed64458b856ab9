#pragma once
// Local checkpoints with replicas (checkpoint.local_interval, local_replication, local_dir):
// every local_interval steps each rank writes its state (parameter and optimizer buffers, run
// state; checkpoint/local_shard.h) into a node-local directory (tmpfs for memory speed) and
// sends a copy to local_replication peers on other nodes, which keep it in theirs. A restarted
// job in the same layout rebuilds every rank's state from the copies that survived — its own,
// or a replica a peer sends it — when all of one iteration are found and it is newer than the
// global checkpoint; otherwise the global checkpoint stands. Rank 0 reports where each rank's
// state came from.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "megatron/checkpoint/local_shard.h"
#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/checkpointer.h"

namespace megatron::training {

class LocalCheckpoints {
 public:
  // Collective over `world` (gathers every rank's node name). log: world rank 0's, else null.
  LocalCheckpoints(const config::Recipe& recipe, parallel::Communicator& world,
                   const TrainingState& state, std::ostream* log);

  // Collective: this rank's state at `iteration` to its node-local directory and to its peers';
  // the previous local checkpoint is deleted only once every rank has written this one.
  void save(int64_t iteration, int64_t sample_offset);

  struct Restored {
    int64_t iteration = 0, sample_offset = 0;
  };
  // Collective, at start after the global checkpoint (at global_iteration; 0: none) loaded:
  // restores the newest complete local checkpoint when it is newer, else leaves the state alone.
  std::optional<Restored> restore(int64_t global_iteration);

  // The directory of this node's copies (checkpoint.local_dir, {node} replaced).
  const std::string& directory() const { return dir_; }
  // Holders of `owner`'s replicas (world ranks on other nodes), in replica order.
  const std::vector<int>& replica_holders(int owner) const { return holders_[owner]; }

 private:
  struct Entry {  // a shard file this rank's node holds
    int64_t owner = 0, iteration = 0;
  };
  std::vector<std::pair<std::string, Tensor*>> state_tensors();
  std::vector<uint8_t> encode_state(int64_t iteration, int64_t sample_offset);
  void apply_state(const std::vector<uint8_t>& file, int64_t iteration, bool write);
  std::string path_of(int64_t owner, int64_t iteration) const;
  bool write_file(int64_t owner, int64_t iteration, const std::vector<uint8_t>& bytes);
  void delete_older(const std::vector<int64_t>& owners, int64_t iteration) const;
  std::vector<Entry> scan() const;
  std::vector<Entry> gather_entries(const std::vector<Entry>& mine, std::vector<int>* holder);
  std::optional<std::pair<int64_t, std::vector<int>>> choose(const std::vector<Entry>& entries,
                                                             const std::vector<int>& holder) const;
  // Point-to-point over the world: a byte vector with its length first (-1: the sender has
  // none, which the receiver reports).
  void send_bytes(const std::vector<uint8_t>* bytes, int to);
  std::optional<std::vector<uint8_t>> recv_bytes(int from);
  bool all_true(bool ok);
  void report_sources(int64_t iteration, const std::vector<int>& source_of);

  const config::Recipe& recipe_;
  parallel::Communicator& world_;
  TrainingState state_;
  std::ostream* log_;
  std::string dir_, fingerprint_;
  std::vector<std::string> node_of_rank_;
  std::vector<std::vector<int>> holders_;  // per owner: the ranks keeping its replicas
};

}  // namespace megatron::training
