#include "megatron/training/gradient_sync.h"

namespace megatron::training {

DataParallelSharding sharding_for(const config::Recipe& recipe, const TrainerGroups& g) {
  using config::ShardingStrategy;
  const ShardingStrategy s = recipe.sharding_strategy();
  parallel::Communicator* shard = g.dp_shard ? g.dp_shard : g.dp;
  DataParallelSharding sh;
  sh.optimizer = s != ShardingStrategy::NoShard;
  sh.grads = s == ShardingStrategy::OptimGrads || s == ShardingStrategy::OptimGradsParams;
  sh.weights = s == ShardingStrategy::OptimGradsParams;
  sh.dense_size = shard->size();
  sh.dense_rank = shard->rank();
  sh.expert_size = g.expert_dp->size();
  sh.expert_rank = g.expert_dp->rank();
  if (recipe.optimizer.offload == config::OptimizerOffload::CPU)
    sh.offload_fraction = recipe.optimizer.offload_fraction;
  return sh;
}

GradientSync::GradientSync(ParamStore& store, const TrainerGroups& g)
    : store_(&store),
      shard_(g.dp_shard ? g.dp_shard : g.dp),
      replicas_(g.dp_replica && g.dp_replica->size() > 1 ? g.dp_replica : nullptr),
      ep_(g.ep),
      expert_dp_(g.expert_dp),
      experts_folded_pp_(g.experts_fold_tp() ? g.pp : nullptr) {
  const DataParallelSharding& sh = store.sharding();
  MT_CHECK(sh.dense_size == shard_->size() && sh.expert_size == expert_dp_->size(),
           "parameter store sharded for groups of ", sh.dense_size, " / ", sh.expert_size,
           " ranks, trained over ", shard_->size(), " / ", expert_dp_->size());
  if (sh.grads)
    units_ = std::make_unique<distributed::FullyShardedUnits>(
        store, distributed::ShardGroups{shard_, expert_dp_, replicas_});
  // Bucketed reductions (no_shard, optim), or the weight gathers after the step (optim_grads).
  if (!sh.weights) {
    dense_ =
        std::make_unique<optim::DataParallelGrads>(store, BufferRegion::Dense, *shard_, replicas_);
    if (store.expert_begin() < store.trainable_numel())
      experts_ =
          std::make_unique<optim::DataParallelGrads>(store, BufferRegion::Expert, *expert_dp_);
  }
}

void GradientSync::finish() {
  if (local_) return;
  if (units_) {
    units_->finish_step();
    return;
  }
  dense_->finish();
  if (experts_) experts_->finish();
}

void GradientSync::compress_topk(double ratio) {
  MT_CHECK(dense_ != nullptr && !units_, "top-k compression needs the bucketed reductions");
  dense_->compress_topk(ratio);
  if (experts_) experts_->compress_topk(ratio);
}

void GradientSync::set_topk_density(double density) {
  if (dense_) dense_->set_topk_density(density);
  if (experts_) experts_->set_topk_density(density);
}

std::vector<std::pair<std::string, Tensor>> GradientSync::compression_residuals() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto [region, grads] : {std::pair{"dense.", dense_.get()}, {"expert.", experts_.get()}})
    if (grads != nullptr)
      for (size_t b = 0; b < grads->residuals().size(); ++b)
        out.emplace_back(concat(region, b), grads->residuals()[b]);
  if (onebit_)
    for (auto& buffer : onebit_->error_buffers()) out.push_back(std::move(buffer));
  return out;
}

optim::MomentumExchange* GradientSync::use_onebit_adam() {
  MT_CHECK(dense_ != nullptr && !units_ && !replicas_ && !dense_->distributed(),
           "1-bit Adam needs the no_shard strategy");
  const bool experts = store_->expert_begin() < store_->trainable_numel();
  onebit_ = std::make_unique<optim::OnebitMomentumExchange>(*store_, *shard_,
                                                            experts ? expert_dp_ : nullptr);
  return onebit_.get();
}

void GradientSync::gather_params() {
  if (dense_) dense_->gather_params();
  if (experts_) experts_->gather_params();
}

bool GradientSync::dense_sharded() const {
  return store_->sharding().optimizer && shard_->size() > 1;
}

bool GradientSync::expert_sharded() const {
  return store_->sharding().optimizer && expert_dp_->size() > 1 &&
         store_->expert_begin() < store_->trainable_numel();
}

optim::ExpertNormGroups GradientSync::expert_norm_groups() const {
  if (store_->expert_begin() == store_->trainable_numel()) return {};
  optim::ExpertNormGroups groups{ep_, expert_sharded() || local_ ? expert_dp_ : nullptr};
  if (experts_folded_pp_) {
    groups.model = experts_folded_pp_;
    groups.tensor_parallel_rank = 0;
  }
  return groups;
}

int64_t GradientSync::take_bytes() {
  int64_t bytes = 0;
  if (units_) bytes += units_->take_bytes();
  if (dense_) bytes += dense_->take_bytes();
  if (experts_) bytes += experts_->take_bytes();
  if (onebit_) bytes += onebit_->take_bytes();
  return bytes;
}

}  // namespace megatron::training
