#include "executor/model/moe_mlp.h"

#include <algorithm>
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

// The auxiliary loss aux = Σ f ⊙ P_sums · E / T (moe_mlp.h) of a microbatch's routing: f [E] the
// counted pairs' shares, or [B, E] per sequence with its factor E / (T_b · B).
struct BalanceTerms {
  torch::Tensor share;   // fp32 f, without gradient
  torch::Tensor factor;  // fp32 E / T ([] or [B, 1]) under padding; undefined: `scale`
  double scale = 0;
  [[nodiscard]] torch::Tensor loss(const torch::Tensor& probability_sums) const {
    return factor.defined() ? (share * factor * probability_sums).sum() : (share * probability_sums).sum() * scale;
  }
};

// Without padding T = B·S (T_b = S) is known here; with it, T counts the real tokens, each of
// which sent k counted pairs (a row of padding alone counts as one token: its f and P are 0).
BalanceTerms balance_terms(const MicrobatchRouting& routing, bool per_sequence, bool padded, std::int64_t sequences,
                           std::int64_t k, std::int64_t experts) {
  const auto pairs = (per_sequence ? routing.sequence_chosen : routing.counted).to(torch::kFloat32);
  if (!padded) {
    const auto tokens = static_cast<double>(routing.tokens);
    const double pooled = per_sequence ? tokens / static_cast<double>(sequences) : tokens;  // T or S
    return {pairs / (pooled * static_cast<double>(k)), {}, static_cast<double>(experts) / tokens};
  }
  const auto counts = (per_sequence ? routing.sequence_chosen : routing.counted).to(torch::kFloat64);
  const auto real =
      (per_sequence ? counts.sum(1, /*keepdim=*/true) : counts.sum()).div(k).clamp_min(1).to(torch::kFloat32);
  const double averaged = per_sequence ? static_cast<double>(sequences) : 1.0;
  return {pairs / (real * static_cast<double>(k)), real.reciprocal() * (static_cast<double>(experts) / averaged)};
}

}  // namespace

MoeMlpImpl::MoeMlpImpl(const spec::ModelSpec& m, ExpertParallel ep, TensorParallel tp, ContextParallel cp)
    : spec_(m.moe), ep_(ep), sp_group_(tp.sp() ? tp.group : nullptr), cp_(cp) {
  CPT_CHECK(spec_.experts % ep_.size() == 0, spec_.experts, " experts over an ep group of ", ep_.size());
  CPT_CHECK(!tp.active() || tp.sp(), "experts under tensor parallelism ", tp.size(), " need sequence parallelism");
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(m.hidden, spec_.experts).bias(false)));
  if (spec_.expert_bias) {
    expert_bias_ = gate->register_buffer("e_score_correction_bias", torch::zeros({spec_.experts}, torch::kFloat32));
  }
  experts = register_module("experts", std::make_shared<torch::nn::Module>());
  CPT_CHECK(spec_.expert_ffn_hidden % ep_.etp_size() == 0, "expert FFN width ", spec_.expert_ffn_hidden,
            " over an etp group of ", ep_.etp_size());
  const std::int64_t local = spec_.experts / ep_.size();
  first_expert_ = ep_.rank() * local;
  // Under expert-tp each expert holds its rows of gate/up and columns of down (its slice of the
  // FFN width); the collectives around them are run_experts's.
  const std::int64_t width = spec_.expert_ffn_hidden / ep_.etp_size();
  for (std::int64_t e = first_expert_; e < first_expert_ + local; ++e) {
    auto expert = experts->register_module(std::to_string(e), SwiGluMlp(m.hidden, width));
    local_.push_back(expert.get());
  }
  if (spec_.shared_ffn_hidden > 0) {
    shared_experts = register_module("shared_experts", SwiGluMlp(m.hidden, spec_.shared_ffn_hidden, tp));
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
  if (!ep_.dispatches()) {
    const auto host = per_expert.to(torch::kCPU);
    std::vector<std::int64_t> counts;
    for (std::int64_t e = 0; e < host.size(0); ++e) counts.push_back(host[e].item<std::int64_t>());
    return run_local(rows, counts);
  }
  const ExpertDispatch d = plan_expert_dispatch(per_expert, ep_);
  const auto received = ep_.active() ? exchange_rows(rows, d.send_rows, d.recv_rows, *ep_.group) : rows;
  const auto mine = received.index_select(0, d.by_expert);  // in local-expert order
  torch::Tensor computed;
  if (ep_.splits_experts()) {
    // Every member's rows through this member's slice of each expert, the partial sums back to
    // their members (parallel/expert_parallel.h).
    const auto gathered = gather_blocks(mine, d.etp_rows, *ep_.etp);
    const auto partial = run_local(gathered.index_select(0, d.etp_by_expert), d.rows_per_local_expert);
    computed = reduce_scatter_blocks(partial.index_select(0, torch::argsort(d.etp_by_expert)), d.etp_rows, *ep_.etp);
  } else {
    computed = run_local(mine, d.rows_per_local_expert);
  }
  // Back to the received order (the inverse permutation), then to the pairs' ranks.
  const auto back = computed.index_select(0, torch::argsort(d.by_expert));
  return ep_.active() ? exchange_rows(back, d.recv_rows, d.send_rows, *ep_.group) : back;
}

const SequenceShards* MoeMlpImpl::sequence_shards(const torch::Tensor& x) {
  const int sp = sp_group_ != nullptr ? sp_group_->size() : 1;
  if (sp * cp_.size() == 1) return nullptr;
  if (!shards_.slot_order.defined() || shard_positions_ != x.size(1) || shards_.slot_order.device() != x.device()) {
    const std::int64_t seq_len = x.size(1) * sp * cp_.size();
    const int sp_rank = sp_group_ != nullptr ? sp_group_->rank() : 0;
    shards_ = make_sequence_shards(spec::sequence_shard_runs(seq_len, cp_.size(), sp), cp_.rank() * sp + sp_rank,
                                   sp_group_, cp_.group, x.device());
    shard_positions_ = x.size(1);
  }
  return &shards_;
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x, const torch::Tensor& real_tokens) {
  const auto tokens = x.reshape({-1, x.size(-1)});  // [T, H] (T = B·S, or B·S/(cp·tp) on a sequence shard)
  const std::int64_t k = spec_.experts_per_token, expert_count = spec_.experts;
  const auto router = sp_group_ != nullptr ? copy_to_tp(gate->weight, *sp_group_) : gate->weight;
  const auto logits = torch::linear(tokens, router).to(torch::kFloat32);  // [T, E]
  const auto scores = spec_.router == spec::RouterScore::kSoftmax ? logits.softmax(-1) : logits.sigmoid();
  // The scores that choose (with an expert bias, scores + b); the weights are always the scores.
  const auto choice = expert_bias_.defined() ? scores + expert_bias_ : scores;
  torch::Tensor top_weights, top_experts;  // [T, k]
  if (spec_.expert_groups > 1) {
    top_experts = std::get<1>(limit_to_best_groups(choice, spec_.expert_groups, spec_.groups_per_token, k).topk(k, -1));
  } else if (expert_bias_.defined()) {
    top_experts = std::get<1>(choice.topk(k, -1));
  } else {
    std::tie(top_weights, top_experts) = scores.topk(k, -1);
  }
  if (!top_weights.defined()) top_weights = scores.gather(-1, top_experts);
  if (spec_.normalize_top_k) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
  if (spec_.top_k_scale != 1) top_weights = top_weights * spec_.top_k_scale;
  // Σ over this rank's real tokens of the probabilities (per token summing to 1: sigmoid scores
  // normalised), for the auxiliary loss.
  const auto real = real_tokens.defined() ? real_tokens.reshape({-1}) : torch::Tensor();  // [T]
  auto probabilities = spec_.router == spec::RouterScore::kSoftmax ? scores : scores / scores.sum(-1, true);
  if (real.defined()) probabilities = probabilities * real.unsqueeze(1);
  const std::int64_t sequences = x.size(0);
  // [E], or per sequence [B, E] (tokens are b-major).
  const auto probability_sums =
      aux_per_sequence_ ? probabilities.view({sequences, -1, expert_count}).sum(1) : probabilities.sum(0);
  const MicrobatchRouting routing =
      route_microbatch(top_experts, sequences, probability_sums, sequence_shards(x), real);
  const std::int64_t capacity =
      spec_.capacity_factor > 0
          ? static_cast<std::int64_t>(std::ceil(spec_.capacity_factor * static_cast<double>(routing.tokens * k) /
                                                static_cast<double>(expert_count)))
          : -1;
  const KeptPairs pairs = keep_pairs(top_experts, top_weights, routing, capacity);

  // Every expert on its run of the sorted pairs (possibly empty), then each output weighted and
  // added to its token's row.
  auto routed = run_experts(tokens.index_select(0, pairs.token), pairs.per_expert);
  routed = routed * pairs.weight.unsqueeze(1).to(routed.scalar_type());
  auto out = torch::zeros({tokens.size(0), tokens.size(1)}, routed.options()).index_add(0, pairs.token, routed);
  out = out.reshape(x.sizes());
  if (shared_experts) out = out + shared_experts->forward(x);
  if (!is_training()) return out;

  // E · Σ_e f_e · P_e over the microbatch, or its mean over the sequences (see the header): f_e
  // without gradient; P_e's gradient through this rank's real tokens only, E · f_e / T each (per
  // sequence E · f_{b,e} / (T_b · B)).
  const BalanceTerms terms = balance_terms(routing, aux_per_sequence_, real.defined(), sequences, k, expert_count);
  const auto aux_loss = terms.loss(probability_sums);
  if (recording_ && !in_recomputation()) {
    // On sequence shards the loss of the whole microbatch's probability sums (each rank's own
    // carries only its tokens' gradient).
    const auto& whole = aux_per_sequence_ ? routing.sequence_probability_sums : routing.probability_sums;
    record_routing(routing, capacity, whole.defined() ? terms.loss(whole) : aux_loss.detach());
  }
  if (aux_loss_scale_ > 0 && aux_loss.requires_grad()) out = AuxLossToOutput::apply(out, aux_loss, aux_loss_scale_);
  return out;
}

void MoeMlpImpl::record_routing(const MicrobatchRouting& routing, std::int64_t capacity,
                                const torch::Tensor& aux_loss) {
  const auto chosen = routing.chosen.to(torch::kCPU);
  stats_.tokens_per_expert += routing.counted.is_same(routing.chosen) ? chosen : routing.counted.to(torch::kCPU);
  const auto count = chosen.accessor<std::int64_t, 1>();
  for (std::int64_t e = 0; e < spec_.experts; ++e) {
    stats_.routed += count[e];
    if (capacity >= 0) stats_.dropped += std::max<std::int64_t>(0, count[e] - capacity);
  }
  aux_loss_sum_ = aux_loss_sum_.defined() ? aux_loss_sum_ + aux_loss : aux_loss;
  ++stats_.forwards;
}

void MoeMlpImpl::update_expert_bias(const torch::Tensor& pairs, double rate) {
  CPT_CHECK(expert_bias_.defined() && pairs.numel() == spec_.experts, "an expert-bias update of ", pairs.numel(),
            " loads for ", spec_.experts, " experts", expert_bias_.defined() ? "" : " without an expert bias");
  const auto loads = pairs.to(torch::kCPU, torch::kFloat64).round().to(torch::kInt64);
  const auto below_mean = (loads.sum() - loads * spec_.experts).sign().to(torch::kFloat32);  // +1 under, -1 over
  torch::NoGradGuard no_grad;
  expert_bias_.add_(below_mean.to(expert_bias_.device()) * rate);
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
