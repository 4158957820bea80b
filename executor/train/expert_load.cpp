#include "executor/train/expert_load.h"

#include <algorithm>

namespace cpt::exec {

std::optional<ExpertLoad> take_expert_load(std::vector<LlamaModel>& chunks, Communicator& replicas,
                                           Communicator* pipeline) {
  const spec::ModelSpec& model = chunks.front()->spec();
  if (!model.moe.present()) return std::nullopt;
  const std::int64_t experts = model.moe.experts;
  // One row per MoE layer of the whole model: the pairs per expert, then dropped pairs, the summed
  // auxiliary loss, the forwards it sums and every routed pair. Rows of layers another stage holds
  // stay 0 here.
  const int moe_layers = model.moe_layers_in(0, model.layers);
  auto rows = torch::zeros({moe_layers, experts + 4}, torch::kFloat64);
  for (auto& chunk : chunks) {
    for (auto& [layer, moe] : chunk->moe_layers()) {
      const RoutingStats stats = moe->take_routing_stats();
      auto row = rows[model.moe_layers_in(0, layer)];
      row.narrow(0, 0, experts).copy_(stats.tokens_per_expert.to(torch::kFloat64));
      row[experts] = static_cast<double>(stats.dropped);
      row[experts + 1] = stats.aux_loss_sum;
      row[experts + 2] = static_cast<double>(stats.forwards);
      row[experts + 3] = static_cast<double>(stats.routed);
    }
  }
  if (replicas.size() > 1) replicas.all_reduce_sum(rows)->wait();
  if (pipeline != nullptr && pipeline->size() > 1) pipeline->all_reduce_sum(rows)->wait();
  const auto pairs = rows.narrow(1, 0, experts);
  const auto pairs_per_layer = pairs.sum(1);
  const double total_pairs = pairs_per_layer.sum().item<double>();
  const double forwards = rows.select(1, experts + 2).sum().item<double>();
  ExpertLoad load;
  if (total_pairs > 0) {
    const auto balanced = pairs_per_layer.clamp_min(1) / static_cast<double>(experts);
    load.busiest = (std::get<0>(pairs.max(1)) / balanced).max().item<double>();
    load.dropped = rows.select(1, experts).sum().item<double>() / rows.select(1, experts + 3).sum().item<double>();
  }
  if (forwards > 0) load.aux_loss = rows.select(1, experts + 1).sum().item<double>() / forwards;
  load.pairs = pairs;
  return load;
}

void update_expert_biases(std::vector<LlamaModel>& chunks, const torch::Tensor& pairs, double rate) {
  for (auto& chunk : chunks) {
    const spec::ModelSpec& model = chunk->spec();
    for (auto& [layer, moe] : chunk->moe_layers()) {
      if (moe->has_expert_bias()) moe->update_expert_bias(pairs[model.moe_layers_in(0, layer)], rate);
    }
  }
}

}  // namespace cpt::exec
