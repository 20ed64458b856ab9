// The planner's reports: JSON and text.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/planning/format.h"
#include "megatron/planning/planner.h"

namespace megatron::planning {

using detail::gb;
using detail::human_count;

std::string Layout::describe() const {
  std::ostringstream os;
  os << "tp" << tp << " pp" << pp << " dp" << dp;
  if (cp > 1) os << " cp" << cp << " " << config::option_name(cp_comm);
  if (ep > 1) os << " ep" << ep;
  if (experts_fold_tp()) os << " etp" << expert_tp();
  if (vpp > 1) os << " vpp" << vpp;
  if (config::splits_backward(schedule)) os << " " << config::option_name(schedule);
  os << " mb" << micro_batch << "x" << num_microbatches;
  if (sequence_parallel) os << " sp";
  os << " recompute=" << config::option_name(recompute)
     << " sharding=" << config::option_name(sharding);
  if (instances > 1) os << " instances=" << instances;
  if (offload > 0) os << " offload=" << offload;
  return os.str();
}

int64_t Layout::shard_group() const {
  const int64_t replicas = dp * cp;
  return sharding == config::ShardingStrategy::NoShard ? replicas
                                                       : replicas / std::max<int64_t>(instances, 1);
}

nlohmann::json PlanReport::to_json() const {
  using nlohmann::json;
  const MemoryBreakdown& m = memory();
  json by_strategy = json::object();
  for (size_t i = 0; i < m.total_by_strategy.size(); ++i)
    by_strategy[std::string(config::option_name(static_cast<config::ShardingStrategy>(i)))] =
        m.total_by_strategy[i];
  json stages_json = json::array();
  for (const StagePlan& s : stages)
    stages_json.push_back({{"stage", s.stage},
                           {"layers", s.layers},
                           {"parameters", s.parameters},
                           {"first", s.first},
                           {"last", s.last},
                           {"activation_bytes", s.memory.activations},
                           {"total_bytes", s.memory.total}});
  return {{"recipe", recipe},
          {"arch", arch},
          {"device", device},
          {"precision", precision},
          {"cluster",
           {{"nodes", cluster.nodes},
            {"gpus_per_node", cluster.gpus_per_node},
            {"world", cluster.world()},
            {"gpu_memory_bytes", cluster.gpu_memory_bytes},
            {"gpu_tflops", cluster.gpu_tflops},
            {"intra_node_gbps", cluster.intra_node_gbps},
            {"inter_node_gbps", cluster.inter_node_gbps},
            {"gemm_efficiency", cluster.gemm_efficiency},
            {"flash_attention", cluster.flash_attention}}},
          {"layout",
           {{"tp", layout.tp},
            {"pp", layout.pp},
            {"dp", layout.dp},
            {"cp", layout.cp},
            {"cp_comm_type", config::option_name(layout.cp_comm)},
            {"ep", layout.ep},
            {"etp", layout.expert_tp()},
            {"vpp", layout.vpp},
            {"pipeline_schedule", std::string(config::option_name(layout.schedule))},
            {"micro_batch", layout.micro_batch},
            {"num_microbatches", layout.num_microbatches},
            {"sequence_parallel", layout.sequence_parallel},
            {"sharding_strategy", config::option_name(layout.sharding)},
            {"instances", layout.instances},
            {"shard_group", layout.shard_group()},
            // Megatron's distributed optimizer: the optimizer state sharded (optim and beyond).
            {"distributed_optimizer", layout.sharding != config::ShardingStrategy::NoShard},
            {"offload_fraction", layout.offload},
            {"recompute", std::string(config::option_name(layout.recompute))},
            {"describe", layout.describe()}}},
          {"vocab", vocab},
          {"padded_vocab", padded_vocab},
          {"parameters",
           {{"total", params.total},
            {"embedding", params.embedding},
            {"per_layer", params.per_layer},
            {"experts", params.experts},
            {"active", params.active},
            {"head", params.head},
            {"per_device", device_stage().parameters}}},
          {"memory",
           {{"stage", device_stage().stage},
            {"weights", m.weights},
            {"master", m.master},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"grad_scratch", m.grad_scratch},
            {"optimizer_without_distributed", m.optimizer_without_distributed},
            {"optimizer_with_distributed", m.optimizer_with_distributed},
            {"host_offloaded", m.host_offloaded},
            {"activations_per_microbatch", m.activations_per_microbatch},
            {"activations_per_microbatch_by_recompute",
             {{"none", m.activations_none},
              {"selective", m.activations_selective},
              {"full", m.activations_full}}},
            {"in_flight", m.in_flight},
            {"activations", m.activations},
            {"workspace", m.workspace},
            {"sharding_transient", m.sharding_transient},
            {"reserve", m.reserve},
            {"total", m.total},
            {"total_by_strategy", by_strategy},
            {"device_bytes", cluster.gpu_memory_bytes}}},
          {"stages", stages_json},
          {"moe",
           {{"experts_per_device", moe.experts_per_device},
            {"expert_params_per_device", moe.expert_params_per_device},
            {"all_to_all_bytes_per_step", moe.all_to_all_bytes_per_step},
            {"imbalance", moe.imbalance}}},
          {"flops", {{"per_step", flops_per_step}, {"hardware_per_step", hardware_flops_per_step}}},
          {"time",
           {{"gemm_efficiency", time.efficiency},
            {"compute_s", time.compute},
            {"bubble_s", time.bubble},
            {"tp_comm_s", time.tp_comm},
            {"pp_comm_s", time.pp_comm},
            {"ep_comm_s", time.ep_comm},
            {"cp_comm_s", time.cp_comm},
            {"cp_bytes_per_step", time.cp_bytes_per_step},
            {"dp_comm_exposed_s", time.dp_comm_exposed},
            {"dp_bytes_per_step", time.dp_bytes_per_step},
            {"param_gather_s", time.param_gather},
            {"optimizer_s", time.optimizer},
            {"step_s", time.step},
            {"tokens_per_s", time.tokens_per_second},
            {"tflops_per_device", time.tflops_per_device},
            {"mfu", time.mfu}}},
          {"fits", fits},
          {"notes", notes}};
}

std::string PlanReport::to_text() const {
  std::ostringstream os;
  const MemoryBreakdown& m = memory();
  const StagePlan& st = device_stage();
  // Memory in GB, or MB for small models.
  const bool small = m.total < 1e9;
  const double unit = small ? 1e6 : 1e9;
  const char* unit_name = small ? "MB" : "GB";
  auto mem = [&](double bytes, int precision = 2) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(precision) << bytes / unit;
    return o.str();
  };
  auto mem_pct = [](double fraction) {
    std::ostringstream o;
    o << std::setprecision(3) << fraction * 100 << "%";
    return o.str();
  };
  os << "plan: " << (recipe.empty() ? "(recipe)" : recipe) << " (" << arch << ", "
     << human_count(static_cast<double>(params.total)) << " parameters, " << precision << " on "
     << device << ")\n";
  os << "cluster: " << cluster.nodes << " node(s) x " << cluster.gpus_per_node
     << " devices = " << cluster.world() << "; " << gb(cluster.gpu_memory_bytes, 1) << " GB and "
     << cluster.gpu_tflops << " TFLOP/s peak per device; " << cluster.intra_node_gbps
     << " GB/s intra-node, " << cluster.inter_node_gbps << " GB/s inter-node\n";
  os << "layout: " << layout.describe() << " (global batch " << layout.micro_batch << " x "
     << layout.num_microbatches << " x dp " << layout.dp << ")\n";
  os << "parameters: " << params.total << " total (" << human_count(double(params.embedding))
     << " embedding, " << human_count(double(params.per_layer)) << " per layer, "
     << human_count(double(params.head)) << " head); vocab " << vocab << " padded to "
     << padded_vocab << "; " << st.parameters << " on each device of stage " << st.stage << "\n";
  if (moe.experts_per_device > 0)
    os << "MoE: " << human_count(double(params.experts)) << " routed-expert parameters, "
       << human_count(double(params.active)) << " active per token; " << moe.experts_per_device
       << " experts per layer on each device (" << human_count(moe.expert_params_per_device)
       << " expert parameters); all-to-all " << gb(moe.all_to_all_bytes_per_step, 2)
       << " GB per step per device, " << std::setprecision(3) << time.ep_comm << " s (imbalance "
       << moe.imbalance << "x assumed)\n";
  os << "memory per device (stage " << st.stage << " of " << stages.size() << ", " << st.layers
     << " layers" << (st.first ? ", embeddings" : "") << (st.last ? ", output layer" : "") << "), "
     << unit_name << ":\n";
  auto row = [&](const std::string& name, double bytes, const std::string& extra = "") {
    os << "  " << std::left << std::setw(40) << name << std::right << std::setw(10) << mem(bytes)
       << (extra.empty() ? "" : "  " + extra) << "\n";
  };
  // Which buffers this strategy keeps only a 1/N shard of.
  using config::ShardingStrategy;
  const ShardingStrategy strategy = layout.sharding;
  const bool sharded_opt = strategy != ShardingStrategy::NoShard && layout.shard_group() > 1;
  const bool sharded_grads = sharded_opt && strategy >= ShardingStrategy::OptimGrads;
  const bool sharded_weights = sharded_opt && strategy == ShardingStrategy::OptimGradsParams;
  const std::string shard = " (1/" + std::to_string(layout.shard_group()) + ")";
  const std::string offloaded =
      m.host_offloaded > 0 ? " (" + mem_pct(1 - layout.offload) + " on device)" : "";
  row(std::string("weights (") + precision + ")" + (sharded_weights ? shard : ""), m.weights);
  if (m.master > 0 || (m.host_offloaded > 0 && precision != "fp32"))
    row("fp32 master weights" + std::string(sharded_opt ? shard : "") + offloaded, m.master);
  row("fp32 gradients" + std::string(sharded_grads ? shard : ""), m.gradients);
  row("optimizer state" + std::string(sharded_opt ? shard : "") + offloaded, m.optimizer,
      "master+state: " + mem(m.optimizer_without_distributed) + " no_shard / " +
          mem(m.optimizer_with_distributed) + " optim");
  if (m.grad_scratch > 0) row("gradient reduce-scatter output", m.grad_scratch);
  std::ostringstream inflight;
  inflight << std::setprecision(3) << m.in_flight;
  row("activations", m.activations,
      mem(m.activations_per_microbatch, 3) + " per micro-batch x " + inflight.str() +
          " in flight; per micro-batch none " + mem(m.activations_none, 3) + " / selective " +
          mem(m.activations_selective, 3) + " / full " + mem(m.activations_full, 3));
  row("workspace", m.workspace,
      m.sharding_transient > 0 ? "of which " + mem(m.sharding_transient) +
                                     (strategy == ShardingStrategy::OptimGradsParams
                                          ? " gathered units and in-flight gradients"
                                          : " in-flight gradients")
                               : "");
  if (m.reserve > 0) row("runtime reserve", m.reserve);
  row("total", m.total,
      std::string(fits ? "fits" : "DOES NOT FIT") + " in " + gb(cluster.gpu_memory_bytes, 1) +
          " GB");
  if (m.host_offloaded > 0)
    row("host memory (optimizer offload)", m.host_offloaded, "not in the device total");
  os << "data-parallel sharding: " << config::option_name(strategy);
  if (strategy != ShardingStrategy::NoShard)
    os << " over " << layout.shard_group() << " rank(s)"
       << (layout.instances > 1 ? " x " + std::to_string(layout.instances) + " instances (hybrid)"
                                : "");
  if (layout.offload > 0) os << ", optimizer offload " << mem_pct(layout.offload) << " to host";
  if (layout.dp > 1) {
    os << "; total per strategy:";
    for (size_t i = 0; i < m.total_by_strategy.size(); ++i)
      os << (i ? " /" : "") << " " << config::option_name(static_cast<ShardingStrategy>(i)) << " "
         << mem(m.total_by_strategy[i]);
    os << " " << unit_name;
  }
  os << "\n";
  os << std::setprecision(4) << "FLOPs per step: " << flops_per_step << " (Megatron's formula)";
  if (hardware_flops_per_step != flops_per_step)
    os << ", " << hardware_flops_per_step << " with recomputation";
  os << "\n";
  os << std::setprecision(3) << "estimated step time: " << time.step << " s (compute "
     << time.compute << ", bubble " << time.bubble << ", TP comm " << time.tp_comm << ", PP comm "
     << time.pp_comm;
  if (moe.experts_per_device > 0) os << ", EP all-to-all " << time.ep_comm;
  if (layout.cp > 1) os << ", CP exposed " << time.cp_comm;
  os << ", DP exposed " << time.dp_comm_exposed << ", param gather " << time.param_gather
     << ", optimizer " << time.optimizer << "; DP traffic " << gb(time.dp_bytes_per_step, 3)
     << " GB per step)\n"
     << std::fixed << std::setprecision(0) << "  " << time.tokens_per_second << " tokens/s, "
     << std::setprecision(1) << time.tflops_per_device << " TFLOP/s per device, MFU "
     << time.mfu * 100 << "% (estimate; GEMM efficiency " << std::setprecision(2) << time.efficiency
     << ")\n";
  for (const std::string& n : notes) os << "note: " << n << "\n";
  return os.str();
}

}  // namespace megatron::planning
