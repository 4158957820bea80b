// DeepSeek's latent attention (executor/model/latent_attention.h): against a per-head loop written
// from the definition (DeepSeek-V2 §2.1, RoPE on the pairs (2i, 2i + 1) of the rotary channels),
// and the model built with it holds exactly the spec's parameters in the cost model's gradient order.
// YaRN's rotary tables against transformers' frequencies for DeepSeek-V2-Lite's scaling.
#include "executor/model/latent_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "executor/model/llama_model.h"
#include "executor_test_support.h"

namespace cpt::exec {
namespace {

// tiny's sizes; widths unlike each other so that a swapped split or width shows.
spec::ModelSpec tiny_mla(int q_lora_rank) {
  spec::ModelSpec m;
  m.name = "tiny-mla";
  m.layers = 2;
  m.hidden = 64;
  m.heads = m.kv_heads = 4;
  m.ffn_hidden = 176;
  m.vocab = 512;
  m.max_seq_len = 128;
  m.mla = {q_lora_rank, 16, 12, 8, 10};
  m.norm_eps = 1e-2;  // the latents' norms use 1e-6 whatever this says: a test that used it would fail
  return m;
}

torch::Tensor rms_normed(const torch::Tensor& x, const torch::Tensor& weight) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * weight;
}

// Rotates the pairs (2i, 2i + 1) of `t` [S, r] at position p by p·theta^(-2i/r).
torch::Tensor rotated_pairs(const torch::Tensor& t, double theta) {
  auto out = t.clone();
  const auto r = t.size(1);
  for (std::int64_t p = 0; p < t.size(0); ++p) {
    for (std::int64_t i = 0; i < r / 2; ++i) {
      const double angle =
          static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(r));
      const auto a = t[p][2 * i], b = t[p][2 * i + 1];
      out[p][2 * i] = a * std::cos(angle) - b * std::sin(angle);
      out[p][2 * i + 1] = a * std::sin(angle) + b * std::cos(angle);
    }
  }
  return out;
}

// The attention's output for one sequence x [S, H], head by head, from the definition.
torch::Tensor reference_output(LatentAttentionImpl& attn, const spec::ModelSpec& m, const torch::Tensor& x) {
  const auto& l = m.mla;
  const auto s = x.size(0);
  const auto q_all =
      l.q_lora_rank > 0
          ? torch::matmul(rms_normed(torch::matmul(x, attn.q_a_proj->weight.t()), attn.q_a_layernorm->weight),
                          attn.q_b_proj->weight.t())
          : torch::matmul(x, attn.q_proj->weight.t());
  const auto compressed = torch::matmul(x, attn.kv_a_proj_with_mqa->weight.t());
  const auto latent = rms_normed(compressed.narrow(1, 0, l.kv_lora_rank), attn.kv_a_layernorm->weight);
  const auto k_rope = rotated_pairs(compressed.narrow(1, l.kv_lora_rank, l.qk_rope_head_dim), m.rope_theta);
  const auto kv_all = torch::matmul(latent, attn.kv_b_proj->weight.t());
  const auto causal = torch::ones({s, s}).tril().to(torch::kBool);
  std::vector<torch::Tensor> heads;
  for (std::int64_t a = 0; a < m.heads; ++a) {
    const auto q = q_all.narrow(1, a * l.qk_head_dim(), l.qk_head_dim());
    const auto kv = kv_all.narrow(1, a * (l.qk_nope_head_dim + l.v_head_dim), l.qk_nope_head_dim + l.v_head_dim);
    const auto query = torch::cat({q.narrow(1, 0, l.qk_nope_head_dim),
                                   rotated_pairs(q.narrow(1, l.qk_nope_head_dim, l.qk_rope_head_dim), m.rope_theta)},
                                  1);
    const auto key = torch::cat({kv.narrow(1, 0, l.qk_nope_head_dim), k_rope}, 1);
    const auto scores = torch::matmul(query, key.t()) / std::sqrt(static_cast<double>(l.qk_head_dim()));
    const auto weights = scores.masked_fill(causal.logical_not(), -INFINITY).softmax(-1);
    heads.push_back(torch::matmul(weights, kv.narrow(1, l.qk_nope_head_dim, l.v_head_dim)));
  }
  return torch::matmul(torch::cat(heads, 1), attn.o_proj->weight.t());
}

TEST(LatentAttention, EqualsTheDefinitionHeadByHead) {
  for (const int q_lora_rank : {0, 24}) {
    const auto m = tiny_mla(q_lora_rank);
    LatentAttentionImpl attn(m, TensorParallel{});
    torch::manual_seed(3);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : attn.parameters()) p.normal_(0.0, 0.3);
    }
    const RotaryTables rotary(m.mla.qk_rope_head_dim, m.max_seq_len, m.rope_theta);
    const std::int64_t s = 24;
    const auto x = torch::randn({2, s, m.hidden});
    const auto positions = torch::arange(s, torch::kInt64).unsqueeze(0).expand({2, s});
    const auto [cos, sin] = rotary.lookup(positions, torch::kFloat32);
    torch::NoGradGuard no_grad;
    const auto out = attn.forward(x, cos, sin, torch::Tensor());
    for (std::int64_t b = 0; b < 2; ++b) {
      // fp32 sums of a few dozen O(1) products in another order: ~1e-6 apart.
      EXPECT_TRUE(torch::allclose(out[b], reference_output(attn, m, x[b]), 1e-4, 1e-5))
          << "q_lora_rank " << q_lora_rank;
    }
  }
}

// DeepSeek-V2-Lite's YaRN on its 64 rotary channels: pairs below 10 keep their frequency, pairs
// from 23 on are divided by 40, those between ramp (transformers 4.57.6's _compute_yarn_parameters
// gives the expected frequencies below); cos and sin carry the attention factor, here 1 (mscale =
// mscale_all_dim), and 1 + 0.1·ln 40 without the magnitudes.
TEST(RotaryTables, YarnFrequenciesAreTransformers) {
  spec::RopeScaling yarn{40.0, 1, 4, 4096, spec::RopeScalingKind::kYarn, 32, 1, 0.707, 0.707, 0, true};
  const std::vector<std::pair<int, double>> expected{{0, 1.0},
                                                     {9, 0.07498941570520401},
                                                     {10, 0.05623412877321243},
                                                     {12, 0.026879360899329185},
                                                     {16, 0.00550000043585896},
                                                     {22, 0.00017782794020604342},
                                                     {23, 3.333803397254087e-05},
                                                     {31, 3.3338035336782923e-06}};
  for (const double magnitude : {1.0, 0.1 * std::log(40.0) + 1}) {
    if (magnitude != 1.0) yarn.mscale = yarn.mscale_all_dim = 0;
    const RotaryTables rotary(64, 8, 10000.0, yarn);
    const auto [cos, sin] = rotary.lookup(torch::ones({1, 1}, torch::kInt64), torch::kFloat32);  // position 1
    for (const auto& [pair, frequency] : expected) {
      const double c = cos[0][0][0][pair].item<double>(), s = sin[0][0][0][pair].item<double>();
      EXPECT_NEAR(std::atan2(s, c) / frequency, 1.0, 1e-5) << "pair " << pair;
      EXPECT_NEAR(std::hypot(c, s), magnitude, 1e-6) << "pair " << pair;
    }
  }
}

TEST(LatentAttention, ModelHoldsTheSpecsParametersInGradientOrder) {
  for (const int q_lora_rank : {0, 24}) {
    const auto names = cpt::exec::testing::expect_spec_parameters_in_gradient_order(tiny_mla(q_lora_rank));
    const char* expected =
        q_lora_rank > 0 ? "layers.1.self_attn.q_a_layernorm.weight" : "layers.1.self_attn.q_proj.weight";
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.self_attn.kv_a_proj_with_mqa.weight"), names.end());
  }
}

}  // namespace
}  // namespace cpt::exec
