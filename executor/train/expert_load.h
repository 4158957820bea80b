#pragma once
// How a mixture of experts routed the tokens of the steps since the last call, over every rank:
// the numbers metrics.jsonl reports per step and `cpt doctor` reads (docs/continual.md, "Mixtures
// of experts": a new domain shifts the router's load).
#include <optional>
#include <vector>

#include "executor/dist/communicator.h"
#include "executor/model/llama_model.h"

namespace cpt::exec {

struct ExpertLoad {
  // The busiest expert's (token, expert) pairs over the balanced share T·k/E, the largest over
  // the MoE layers: 1 is perfectly balanced, E/k means one expert took every token's choice.
  double busiest = 0;
  // The auxiliary loss E·Σ f_e·P_e (moe_mlp.h), mean over layers and microbatches (1 when balanced).
  double aux_loss = 0;
  // Pairs dropped over capacity, as a share of all pairs, padding's included (0 when dropless).
  double dropped = 0;
  // The pairs of real tokens (padding left out) each expert was chosen for, before any drop, summed over the
  // data-parallel (and context-parallel) replicas: fp64 [MoE layers of the whole model, E], row spec::ModelSpec::
  // moe_layers_in(0, layer). What the expert biases move against (update_expert_biases).
  torch::Tensor pairs;
};

// Takes (and clears) the routing statistics of `chunks`' MoE layers and combines them over the
// data-parallel replicas and the pipeline group (null: none). nullopt for a dense model.
// COLLECTIVE over both groups when the model has experts.
std::optional<ExpertLoad> take_expert_load(std::vector<LlamaModel>& chunks, Communicator& replicas,
                                           Communicator* pipeline);

// Moves the expert bias of each of `chunks`' MoE layers that has one by `rate` against its load in
// `pairs` (ExpertLoad::pairs; MoeMlpImpl::update_expert_bias). Every rank of a replica group moves
// its copy by the same all-reduced loads, so the copies stay equal. Local: no communication.
void update_expert_biases(std::vector<LlamaModel>& chunks, const torch::Tensor& pairs, double rate);

}  // namespace cpt::exec
