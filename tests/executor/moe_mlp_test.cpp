// The executor's mixture of experts (executor/model/moe_mlp.h) against a per-token reference
// written from the definitions: routing (with DeepSeek-V3's expert bias), capacity dropping, the
// auxiliary loss's gradient, the routing statistics, the bias's update, and the model built from
// the tiny MoE of the catalog.
#include "executor/model/moe_mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "executor/model/llama_model.h"
#include "executor_test_support.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

spec::ModelSpec tiny_moe() {
  return spec::find_catalog_model("tiny-moe").value().spec;
}

// N(0, 0.2) weights from `seed`, so that routing scores differ clearly between experts.
void randomize(torch::nn::Module& m, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.normal_(0.0, 0.2);
}

// The experts token `scores` [E] may choose: all, or with group-limited routing those of its best
// groups, each group scored by the sum of its top k/g scores (a loop over the definition).
std::vector<std::int64_t> eligible_experts(const torch::Tensor& scores, const spec::ModelSpec& m) {
  const std::int64_t experts = m.moe.experts, groups = m.moe.expert_groups, per_group = experts / groups;
  const std::int64_t top_per_group = m.moe.experts_per_token / m.moe.groups_per_token;
  std::vector<std::pair<double, std::int64_t>> group_scores;  // (score, group)
  for (std::int64_t g = 0; g < groups; ++g) {
    std::vector<double> members;
    for (std::int64_t e = g * per_group; e < (g + 1) * per_group; ++e) members.push_back(scores[e].item<double>());
    std::sort(members.rbegin(), members.rend());
    group_scores.emplace_back(std::accumulate(members.begin(), members.begin() + top_per_group, 0.0), g);
  }
  std::sort(group_scores.rbegin(), group_scores.rend());
  std::vector<std::int64_t> eligible;
  for (std::size_t i = 0; i < static_cast<std::size_t>(m.moe.groups_per_token); ++i) {
    for (std::int64_t e = 0; e < per_group; ++e) eligible.push_back(group_scores[i].second * per_group + e);
  }
  return eligible;
}

// y_t = Σ over the top-k experts e of w_e · expert_e(x_t) (+ the shared experts), token by token:
// the experts chosen by score + `bias` (none: 0), weighted by their scores.
torch::Tensor reference_output(MoeMlpImpl& moe, const spec::ModelSpec& m, const torch::Tensor& tokens,
                               const std::vector<float>& bias = {}) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> rows;
  for (std::int64_t t = 0; t < tokens.size(0); ++t) {
    const auto x = tokens[t].unsqueeze(0);
    const auto logits = moe.gate(x)[0];
    const auto scores = m.moe.router == spec::RouterScore::kSoftmax ? logits.softmax(-1) : logits.sigmoid();
    const auto choice = bias.empty() ? scores : scores + torch::tensor(bias);
    const auto eligible = torch::tensor(eligible_experts(choice, m), torch::kInt64);
    const auto picked = std::get<1>(choice.index_select(0, eligible).topk(m.moe.experts_per_token));
    const auto chosen = eligible.index_select(0, picked);
    auto weights = scores.index_select(0, chosen);
    if (m.moe.normalize_top_k) weights = weights / weights.sum();
    weights = weights * m.moe.top_k_scale;
    auto y = torch::zeros_like(x);
    for (std::int64_t j = 0; j < chosen.size(0); ++j) {
      auto& expert = moe.local_expert(chosen[j].item<std::int64_t>());
      y = y + weights[j] * expert.forward(x);
    }
    if (moe.shared_experts) y = y + moe.shared_experts->forward(x);
    rows.push_back(y);
  }
  return torch::cat(rows);
}

// The layer of `m` with random weights on random tokens [2, 7, H], in eval mode: its tokens and
// output as rows [14, H].
struct LayerRun {
  MoeMlp moe;
  torch::Tensor tokens, out;
};
LayerRun run_layer(const spec::ModelSpec& m) {
  MoeMlp moe(m);
  randomize(*moe, 3);
  torch::manual_seed(4);
  const auto x = torch::randn({2, 7, m.hidden});
  moe->eval();
  const auto out = moe->forward(x);
  EXPECT_EQ(out.sizes(), x.sizes());
  return {moe, x.reshape({-1, m.hidden}), out.reshape({-1, m.hidden})};
}

TEST(MixtureOfExperts, DroplessOutputIsEachTokensWeightedExperts) {
  const auto m = tiny_moe();  // 4 experts, top 2, expert width 64, shared width 64
  auto run = run_layer(m);
  // fp32 sums of a few dozen O(1) products in another order: ~1e-6 apart.
  EXPECT_TRUE(torch::allclose(run.out, reference_output(*run.moe, m, run.tokens), 1e-5, 1e-5));
}

// The header's worked example, and a token whose best expert's group is also its best group.
TEST(MixtureOfExperts, GroupLimitedRoutingChoosesAmongTheBestGroups) {
  const auto scores = torch::tensor({{0.40f, 0.05f, 0.30f, 0.25f}, {0.50f, 0.20f, 0.20f, 0.10f}});
  const auto limited = limit_to_best_groups(scores, 2, 1, 2);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(torch::equal(limited, torch::tensor({{-inf, -inf, 0.30f, 0.25f}, {0.50f, 0.20f, -inf, -inf}})))
      << limited;
  // 4 groups of 2, top 4 of the best 2 groups, each group scored by its top 4 / 2 = 2 scores:
  // groups 1 and 2 (0.12 each) beat group 0 (0.10), whose expert 0 scores highest of all.
  const auto eight = torch::tensor({{0.10f, 0.00f, 0.06f, 0.06f, 0.07f, 0.05f, 0.01f, 0.01f}});
  const auto best = std::get<1>(limit_to_best_groups(eight, 4, 2, 4).topk(4, -1));
  EXPECT_TRUE(torch::equal(std::get<0>(best.sort(-1)), torch::tensor({{2, 3, 4, 5}}))) << best;
}

// With 2 groups of 2 experts and 1 group per token, each token's two experts are one group's.
TEST(MixtureOfExperts, GroupLimitedOutputIsEachTokensWeightedExpertsOfItsBestGroup) {
  auto m = tiny_moe();
  m.moe.expert_groups = 2;
  m.moe.groups_per_token = 1;
  auto run = run_layer(m);
  // fp32 sums of a few dozen O(1) products in another order: ~1e-6 apart.
  EXPECT_TRUE(torch::allclose(run.out, reference_output(*run.moe, m, run.tokens), 1e-5, 1e-5));
  // The same layer without groups routes some token across the two groups (so the rule matters).
  auto ungrouped = m;
  ungrouped.moe.expert_groups = 1;
  EXPECT_FALSE(torch::allclose(run.out, reference_output(*run.moe, ungrouped, run.tokens), 1e-5, 1e-5));
}

// DeepSeek-V3's router: sigmoid scores, the expert bias choosing (here over groups) and the
// scores weighting; the bias is a buffer under Hugging Face's name, no parameter.
TEST(MixtureOfExperts, ExpertBiasChoosesTheExpertsAndTheScoresWeightThem) {
  auto m = tiny_moe();
  m.moe.router = spec::RouterScore::kSigmoid;
  m.moe.expert_bias = true;
  m.moe.expert_groups = 2;
  m.moe.groups_per_token = 1;
  m.moe.top_k_scale = 2.5;
  MoeMlp moe(m);
  EXPECT_EQ(moe->named_buffers().size(), 1u);
  EXPECT_EQ(moe->named_buffers().begin()->key(), "gate.e_score_correction_bias");
  for (const auto& p : moe->named_parameters()) EXPECT_EQ(p.key().find("correction"), std::string::npos) << p.key();
  randomize(*moe, 3);
  const std::vector<float> bias{0.2f, -0.15f, 0.05f, -0.1f};
  moe->expert_bias().copy_(torch::tensor(bias));
  torch::manual_seed(4);
  const auto x = torch::randn({2, 7, m.hidden});
  moe->eval();
  const auto out = moe->forward(x).reshape({-1, m.hidden});
  const auto tokens = x.reshape({-1, m.hidden});
  // fp32 sums of a few dozen O(1) products in another order: ~1e-6 apart.
  EXPECT_TRUE(torch::allclose(out, reference_output(*moe, m, tokens, bias), 1e-5, 1e-5));
  // Without the bias some token goes to other experts (so the bias matters here).
  EXPECT_FALSE(torch::allclose(out, reference_output(*moe, m, tokens), 1e-5, 1e-5));
}

// b_e += rate · sign(mean load − load_e), the loads in pairs (any common multiple).
TEST(MixtureOfExperts, ExpertBiasMovesAgainstEachExpertsLoad) {
  auto m = tiny_moe();  // 4 experts
  m.moe.router = spec::RouterScore::kSigmoid;
  m.moe.expert_bias = true;
  MoeMlp moe(m);
  moe->update_expert_bias(torch::tensor({3.0, 1.0, 2.0, 2.0}, torch::kFloat64), 1e-3);  // mean 2
  EXPECT_TRUE(torch::equal(moe->expert_bias(), torch::tensor({-1e-3f, 1e-3f, 0.0f, 0.0f}))) << moe->expert_bias();
  moe->update_expert_bias(torch::tensor({0, 0, 0, 8}, torch::kInt64), 1e-3);  // mean 2: the last over
  EXPECT_TRUE(torch::allclose(moe->expert_bias(), torch::tensor({0.0f, 2e-3f, 1e-3f, -1e-3f}), 0, 1e-9))
      << moe->expert_bias();
  auto plain = tiny_moe();
  EXPECT_FALSE(MoeMlp(plain)->has_expert_bias());
  EXPECT_TRUE(MoeMlp(plain)->named_buffers().is_empty());
}

TEST(MixtureOfExperts, CapacityKeepsEachExpertsFirstTokensAndDropsTheRest) {
  auto m = tiny_moe();
  m.moe.shared_ffn_hidden = 0;
  m.moe.capacity_factor = 0.5;  // capacity ceil(0.5 · 8 tokens · 2 / 4 experts) = 2
  MoeMlp moe(m);
  randomize(*moe, 5);
  {
    // Every token prefers expert 0, then expert 1.
    torch::NoGradGuard no_grad;
    moe->gate->weight.zero_();
    moe->gate->weight[0].fill_(1.0);
    moe->gate->weight[1].fill_(0.5);
  }
  const auto x = torch::rand({1, 8, m.hidden}) + 0.1;  // positive: expert 0's score is the largest
  moe->train();
  const auto out = moe->forward(x).reshape({8, m.hidden});
  const auto stats = moe->take_routing_stats();
  EXPECT_EQ(stats.tokens_per_expert[0].item<std::int64_t>(), 8);
  EXPECT_EQ(stats.tokens_per_expert[1].item<std::int64_t>(), 8);
  EXPECT_EQ(stats.dropped, 12);  // 16 pairs, 2 kept by each of the two experts
  const auto kept = reference_output(*moe, m, x.reshape({8, m.hidden}));
  EXPECT_TRUE(torch::allclose(out.narrow(0, 0, 2), kept.narrow(0, 0, 2), 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(out.narrow(0, 2, 6), torch::zeros({6, m.hidden})));  // dropped: no output at all
}

TEST(MixtureOfExperts, AuxiliaryLossAddsItsScaledGradientToTheRouter) {
  const auto m = tiny_moe();
  torch::manual_seed(6);
  const auto x = torch::randn({2, 5, m.hidden});
  auto router_grad = [&](double scale) {
    MoeMlp moe(m);
    randomize(*moe, 7);
    moe->train();
    moe->set_aux_loss_scale(scale);
    moe->forward(x).sum().backward();
    return moe->gate->weight.grad().clone();
  };
  const double scale = 0.37;
  const auto with_aux = router_grad(scale);
  const auto difference = with_aux - router_grad(0.0);
  // d/dW of scale · E · Σ_e f_e · P_e, with f_e fixed (the routing's counts) and P_e the mean softmax.
  MoeMlp moe(m);
  randomize(*moe, 7);
  const auto tokens = x.reshape({-1, m.hidden});
  const auto scores = moe->gate(tokens).softmax(-1);
  const auto chosen =
      torch::bincount(std::get<1>(scores.topk(m.moe.experts_per_token, -1)).reshape({-1}), {}, m.moe.experts);
  const auto share = chosen.to(torch::kFloat32) / static_cast<double>(tokens.size(0) * m.moe.experts_per_token);
  ((share * scores.mean(0)).sum() * (m.moe.experts * scale)).backward();
  EXPECT_GT(difference.abs().max().item<double>(), 1e-4);  // the term is there
  // The difference of two fp32 gradients carries their round-off: a few ulps of the larger one.
  const double ulps = 16 * std::numeric_limits<float>::epsilon() * with_aux.abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(difference, moe->gate->weight.grad(), 1e-4, ulps))
      << "max |difference| " << difference.abs().max().item<double>() << ", max |aux gradient| "
      << moe->gate->weight.grad().abs().max().item<double>() << ", max |error| "
      << (difference - moe->gate->weight.grad()).abs().max().item<double>();
}

// DeepSeek-V3's sequence-wise balance loss: (E / B) · Σ_b Σ_e f_{b,e} · P_{b,e} over each of the
// 3 sequences' 5 tokens, its value recorded and its gradient (scaled) on the router.
TEST(MixtureOfExperts, SequenceAuxiliaryLossIsEachSequencesBalanceAveraged) {
  const auto m = tiny_moe();
  const std::int64_t sequences = 3, length = 5, k = m.moe.experts_per_token, experts = m.moe.experts;
  torch::manual_seed(6);
  const auto x = torch::randn({sequences, length, m.hidden});
  auto run = [&](double scale) {
    MoeMlp moe(m);
    randomize(*moe, 7);
    moe->train();
    moe->set_aux_loss_scale(scale);
    moe->set_aux_loss_per_sequence(true);
    moe->forward(x).sum().backward();
    return std::pair{moe->gate->weight.grad().clone(), moe->take_routing_stats().aux_loss_sum};
  };
  const double scale = 0.37;
  const auto [with_aux, recorded] = run(scale);
  const auto difference = with_aux - run(0.0).first;
  MoeMlp moe(m);
  randomize(*moe, 7);
  auto loss = torch::zeros({});
  for (std::int64_t b = 0; b < sequences; ++b) {
    const auto scores = moe->gate(x[b]).softmax(-1);  // [S, E]
    const auto chosen = torch::bincount(std::get<1>(scores.topk(k, -1)).reshape({-1}), {}, experts);
    const auto f = chosen.to(torch::kFloat32) * static_cast<double>(experts) / static_cast<double>(length * k);
    loss = loss + (f * scores.mean(0)).sum();
  }
  loss = loss / static_cast<double>(sequences);
  EXPECT_NEAR(recorded, loss.item<double>(), 1e-6 * loss.item<double>());
  // It differs from the loss over the microbatch (the sequences route differently).
  MoeMlp pooled(m);
  randomize(*pooled, 7);
  pooled->train();
  pooled->forward(x);
  EXPECT_GT(std::abs(pooled->take_routing_stats().aux_loss_sum - recorded), 1e-3);
  (loss * scale).backward();
  EXPECT_GT(difference.abs().max().item<double>(), 1e-4);
  // The difference of two fp32 gradients carries their round-off: a few ulps of the larger one.
  const double ulps = 16 * std::numeric_limits<float>::epsilon() * with_aux.abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(difference, moe->gate->weight.grad(), 1e-4, ulps))
      << "max |error| " << (difference - moe->gate->weight.grad()).abs().max().item<double>();
}

TEST(MixtureOfExperts, RoutingStatisticsCountTrainingForwardsOnly) {
  const auto m = tiny_moe();
  MoeMlp moe(m);
  randomize(*moe, 8);
  const auto x = torch::randn({3, 4, m.hidden});
  moe->train();
  moe->forward(x);
  {
    const EvalModeGuard evaluation({moe.ptr().get()});
    moe->forward(x);  // an evaluation pass: not counted
  }
  EXPECT_TRUE(moe->is_training());
  const auto stats = moe->take_routing_stats();
  EXPECT_EQ(stats.tokens_per_expert.sum().item<std::int64_t>(), 12 * m.moe.experts_per_token);
  EXPECT_EQ(stats.forwards, 1);
  EXPECT_EQ(stats.dropped, 0);
  // E · Σ f·P is at least 1 (equality when balanced) only in expectation; it is positive and finite.
  EXPECT_GT(stats.aux_loss_sum, 0.0);
  EXPECT_TRUE(std::isfinite(stats.aux_loss_sum));
  EXPECT_EQ(moe->take_routing_stats().forwards, 0);  // taken: cleared
}

// Padding is routed but left out of the statistics and the auxiliary loss: a microbatch of two
// rows, the second with 3 real tokens of 6, against the layer on its 9 real tokens alone, whose
// loss weights the same outputs. Per sequence the loss is the mean of each row's own.
TEST(MixtureOfExperts, PaddingIsLeftOutOfTheAuxiliaryLossAndTheLoad) {
  const auto m = tiny_moe();
  const std::int64_t k = m.moe.experts_per_token;
  torch::manual_seed(9);
  const auto x = torch::randn({2, 6, m.hidden}), weights = torch::randn({2, 6, m.hidden});
  const auto real = torch::arange(6).lt(torch::tensor({6, 3}).unsqueeze(1));  // [2, 6]
  const auto real_rows = real.reshape({-1}).nonzero().squeeze(1);
  auto run = [&](const torch::Tensor& input, const torch::Tensor& loss_weights, const torch::Tensor& mask,
                 bool per_sequence, double scale = 0.37) {
    MoeMlp moe(m);
    randomize(*moe, 10);
    moe->train();
    moe->set_aux_loss_scale(scale);
    moe->set_aux_loss_per_sequence(per_sequence);
    moe->forward(input, mask).mul(loss_weights).sum().backward();
    return std::pair{testing::gradients_by_name(*moe), moe->take_routing_stats()};
  };
  const auto [padded_grads, padded] = run(x, weights * real.unsqueeze(2), real, false);
  const auto only_real = [&](const torch::Tensor& t) { return t.reshape({12, -1}).index_select(0, real_rows); };
  const auto [real_grads, alone] = run(only_real(x).unsqueeze(0), only_real(weights).unsqueeze(0), {}, false);
  EXPECT_TRUE(torch::equal(padded.tokens_per_expert, alone.tokens_per_expert)) << padded.tokens_per_expert;
  EXPECT_EQ(padded.routed, 12 * k);  // the padding was routed
  EXPECT_EQ(alone.routed, 9 * k);
  EXPECT_NEAR(padded.aux_loss_sum, alone.aux_loss_sum, 1e-6 * alone.aux_loss_sum);
  for (const auto& [name, want] : real_grads) {
    // Sums over the 12 tokens' 24 pairs (the padding's zero) in another order: fp32 round-off.
    const double largest = want.abs().max().item<double>();
    EXPECT_LE((padded_grads.at(name) - want).abs().max().item<double>(), 24 * std::ldexp(1.0, -24) * largest + 1e-9)
        << name;
  }
  const double per_sequence = run(x, weights, real, true).second.aux_loss_sum;
  const double first = run(x[0].unsqueeze(0), weights[0].unsqueeze(0), {}, true).second.aux_loss_sum;
  const double second =
      run(x[1].narrow(0, 0, 3).unsqueeze(0), weights[1].narrow(0, 0, 3).unsqueeze(0), {}, true).second.aux_loss_sum;
  EXPECT_NEAR(per_sequence, (first + second) / 2, 1e-6 * per_sequence);
  // And its gradient: the router's, from the loss alone (with it less without it), is the mean of
  // the two rows' own. Each is a difference of two fp32 gradients, a few ulps of the larger.
  auto router_gradient = [&](const torch::Tensor& input, const torch::Tensor& loss_weights, const torch::Tensor& mask) {
    const auto with_loss = run(input, loss_weights, mask, true).first.at("gate.weight");
    const auto without = run(input, loss_weights, mask, true, 0.0).first.at("gate.weight");
    return std::pair{with_loss - without, with_loss.abs().max().item<double>()};
  };
  const auto [padded_router, padded_largest] = router_gradient(x, weights * real.unsqueeze(2), real);
  const auto [first_router, first_largest] = router_gradient(x[0].unsqueeze(0), weights[0].unsqueeze(0), {});
  const auto [second_router, second_largest] =
      router_gradient(x[1].narrow(0, 0, 3).unsqueeze(0), weights[1].narrow(0, 0, 3).unsqueeze(0), {});
  const auto want = (first_router + second_router) / 2;
  EXPECT_GT(want.abs().max().item<double>(), 1e-4);  // the loss moves the router
  const double ulps =
      16 * std::numeric_limits<float>::epsilon() * std::max({padded_largest, first_largest, second_largest});
  EXPECT_TRUE(torch::allclose(padded_router, want, 1e-4, ulps))
      << "max |error| " << (padded_router - want).abs().max().item<double>();
}

// The EWC Fisher estimate's guard: the cross-entropy's gradient alone, the training mode (and so
// the plan's recomputation) kept, nothing counted; the scale back afterwards.
TEST(MixtureOfExperts, RouterTermsOffLeavesTheCrossEntropyAloneAndTheModeAsItIs) {
  const auto m = tiny_moe();
  torch::manual_seed(11);
  auto tokens = torch::randint(m.vocab, {2, 16}, torch::kInt64);
  auto targets = torch::roll(tokens, -1, 1);
  const auto positions = torch::arange(16, torch::kInt64).unsqueeze(0).expand({2, 16}).contiguous();
  const Batch batch{tokens, targets, positions, {}, 32, {}};
  auto router_grads = [&](double scale, bool off) {
    LlamaModel model(m);
    model->init_weights(3);
    model->train();
    model->set_recompute(spec::Recompute::kFull);
    model->set_router_aux_loss_scale(scale);
    std::vector<torch::Tensor> grads;
    {
      std::optional<RouterTermsOff> plain;
      if (off) plain.emplace(std::vector<LlamaModelImpl*>{model.ptr().get()});
      EXPECT_TRUE(model->is_training());
      model->loss_sum(batch).backward();
      for (auto& [layer, moe] : model->moe_layers()) {
        grads.push_back(moe->gate->weight.grad().clone());
        EXPECT_EQ(moe->take_routing_stats().forwards, off ? 0 : 1);
      }
    }
    for (auto& [layer, moe] : model->moe_layers()) EXPECT_EQ(moe->aux_loss_scale(), scale);
    return grads;
  };
  const auto plain = router_grads(0.0, false);
  const auto off = router_grads(0.5, true);
  const auto on = router_grads(0.5, false);
  ASSERT_EQ(plain.size(), 2u);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(off[i], plain[i])) << "layer " << i;
    EXPECT_FALSE(torch::equal(on[i], plain[i])) << "layer " << i;  // the term exists when on
  }
}

TEST(MixtureOfExperts, ModelHoldsTheSpecsParametersInGradientOrder) {
  const auto names = cpt::exec::testing::expect_spec_parameters_in_gradient_order(tiny_moe());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.mlp.experts.3.down_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.mlp.shared_experts.up_proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.mlp.gate.weight"), names.end());
}

}  // namespace
}  // namespace cpt::exec
