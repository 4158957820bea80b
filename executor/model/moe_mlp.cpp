#include "executor/model/moe_mlp.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "executor/model/activation_checkpoint.h"

namespace cpt::exec {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The identity on the layer's output whose backward also gives the auxiliary loss (a scalar of
// the graph) its gradient, the loss's weight in the objective: d objective / d aux = scale.
struct AuxLossToOutput : public torch::autograd::Function<AuxLossToOutput> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& output, const torch::Tensor& aux_loss,
                               double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["aux_dtype"] = static_cast<std::int64_t>(aux_loss.scalar_type());
    return output;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["aux_dtype"].toInt());
    return {grad_out[0], torch::full({}, scale, grad_out[0].options().dtype(dtype)), torch::Tensor()};
  }
};

// The (token, expert) pairs of a microbatch, sorted by expert (stable: token order inside each).
struct SortedPairs {
  torch::Tensor token;       // int64 [N]: the token of each pair
  torch::Tensor weight;      // fp32 [N]: its routing weight
  torch::Tensor per_expert;  // int64 [E]: pairs of each expert (after any drop)
};

// Sorts the top-k choices by expert and drops, per expert, the pairs past `capacity` (< 0: none).
SortedPairs sort_by_expert(const torch::Tensor& top_experts, const torch::Tensor& top_weights,
                           const torch::Tensor& chosen, std::int64_t capacity) {
  const std::int64_t k = top_experts.size(1);
  const auto expert_of_pair = top_experts.reshape({-1});
  const auto order = std::get<1>(expert_of_pair.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  SortedPairs pairs{torch::div(order, k, "floor"), top_weights.reshape({-1}).index_select(0, order), chosen};
  if (capacity >= 0) {
    const auto sorted_experts = expert_of_pair.index_select(0, order);
    const auto run_start = chosen.cumsum(0) - chosen;  // [E]: each expert's first sorted pair
    const auto position = torch::arange(order.size(0), order.options()) - run_start.index_select(0, sorted_experts);
    const auto kept = (position < capacity).nonzero().squeeze(1);
    pairs.token = pairs.token.index_select(0, kept);
    pairs.weight = pairs.weight.index_select(0, kept);
    pairs.per_expert = chosen.clamp_max(capacity);
  }
  return pairs;
}

}  // namespace

MoeMlpImpl::MoeMlpImpl(const spec::ModelSpec& m, ExpertParallel ep) : spec_(m.moe), ep_(ep) {
  CPT_CHECK(spec_.experts % ep_.size() == 0, spec_.experts, " experts over an ep group of ", ep_.size());
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(m.hidden, spec_.experts).bias(false)));
  experts = register_module("experts", std::make_shared<torch::nn::Module>());
  const std::int64_t local = spec_.experts / ep_.size();
  first_expert_ = ep_.rank() * local;
  for (std::int64_t e = first_expert_; e < first_expert_ + local; ++e) {
    auto expert = experts->register_module(std::to_string(e), SwiGluMlp(m.hidden, spec_.expert_ffn_hidden));
    local_.push_back(expert.get());
  }
  if (spec_.shared_ffn_hidden > 0) {
    shared_experts = register_module("shared_experts", SwiGluMlp(m.hidden, spec_.shared_ffn_hidden));
  }
  stats_.tokens_per_expert = torch::zeros({spec_.experts}, torch::kInt64);
}

torch::Tensor MoeMlpImpl::run_experts(const torch::Tensor& rows, const torch::Tensor& per_expert) {
  auto run_local = [&](const torch::Tensor& input, const std::vector<std::int64_t>& counts) {
    std::vector<torch::Tensor> outputs;
    std::int64_t offset = 0;
    for (std::size_t e = 0; e < local_.size(); ++e) {
      outputs.push_back(local_[e]->forward(input.narrow(0, offset, counts[e])));
      offset += counts[e];
    }
    return torch::cat(outputs);
  };
  if (!ep_.active()) {
    const auto host = per_expert.to(torch::kCPU);
    std::vector<std::int64_t> counts;
    for (std::int64_t e = 0; e < host.size(0); ++e) counts.push_back(host[e].item<std::int64_t>());
    return run_local(rows, counts);
  }
  const ExpertDispatch d = plan_expert_dispatch(per_expert, ep_);
  const auto received = exchange_rows(rows, d.send_rows, d.recv_rows, *ep_.group);
  const auto computed = run_local(received.index_select(0, d.by_expert), d.rows_per_local_expert);
  // Back to the received order (the inverse permutation), then to the pairs' ranks.
  const auto back = computed.index_select(0, torch::argsort(d.by_expert));
  return exchange_rows(back, d.recv_rows, d.send_rows, *ep_.group);
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const auto tokens = x.reshape({-1, x.size(-1)});  // [T, H]
  const std::int64_t token_count = tokens.size(0), k = spec_.experts_per_token, expert_count = spec_.experts;
  const auto logits = gate(tokens).to(torch::kFloat32);  // [T, E]
  const auto scores = spec_.router == spec::RouterScore::kSoftmax ? logits.softmax(-1) : logits.sigmoid();
  auto [top_weights, top_experts] = scores.topk(k, -1);  // [T, k]
  if (spec_.normalize_top_k) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
  const auto chosen = torch::bincount(top_experts.reshape({-1}), {}, expert_count);  // [E]
  const std::int64_t capacity =
      spec_.capacity_factor > 0
          ? static_cast<std::int64_t>(std::ceil(spec_.capacity_factor * static_cast<double>(token_count * k) /
                                                static_cast<double>(expert_count)))
          : -1;
  const auto pairs = sort_by_expert(top_experts, top_weights, chosen, capacity);

  // Every expert on its run of the sorted pairs (possibly empty), then each output weighted and
  // added to its token's row.
  auto routed = run_experts(tokens.index_select(0, pairs.token), pairs.per_expert);
  routed = routed * pairs.weight.unsqueeze(1).to(routed.scalar_type());
  auto out = torch::zeros({token_count, tokens.size(1)}, routed.options()).index_add(0, pairs.token, routed);
  if (shared_experts) out = out + shared_experts->forward(tokens);

  if (is_training()) {
    // E · Σ_e f_e · P_e (see the header); probabilities per token summing to 1.
    const auto probabilities = spec_.router == spec::RouterScore::kSoftmax ? scores : scores / scores.sum(-1, true);
    const auto share = chosen.to(torch::kFloat32) / static_cast<double>(token_count * k);
    const auto aux_loss = (share * probabilities.mean(0)).sum() * static_cast<double>(expert_count);
    if (recording_ && !in_recomputation()) {
      stats_.tokens_per_expert += chosen.to(torch::kCPU);
      stats_.dropped += token_count * k - pairs.token.size(0);
      const auto value = aux_loss.detach();
      aux_loss_sum_ = aux_loss_sum_.defined() ? aux_loss_sum_ + value : value;
      ++stats_.forwards;
    }
    if (aux_loss_scale_ > 0 && aux_loss.requires_grad()) out = AuxLossToOutput::apply(out, aux_loss, aux_loss_scale_);
  }
  return out.reshape(x.sizes());
}

RoutingStats MoeMlpImpl::take_routing_stats() {
  RoutingStats taken = stats_;
  if (aux_loss_sum_.defined()) taken.aux_loss_sum = aux_loss_sum_.item<double>();
  aux_loss_sum_ = torch::Tensor();
  stats_ = RoutingStats{};
  stats_.tokens_per_expert = torch::zeros({spec_.experts}, torch::kInt64);
  return taken;
}

}  // namespace cpt::exec
