// Mixtures of experts and latent attention in spec/: parameter counts by hand and against the
// model cards, the MoE layer pattern, the readers (model JSON and Hugging Face config.json), the
// rules of expert parallelism and RankLayout's expert groups (its worked example).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "spec/model_catalog.h"
#include "spec/model_io.h"
#include "spec/parallel_config.h"
#include "spec/rank_layout.h"

namespace cpt::spec {
namespace {

ModelSpec catalog(const char* name) {
  auto entry = find_catalog_model(name);
  EXPECT_TRUE(entry) << name;
  return entry ? entry->spec : ModelSpec{};
}

// tiny-moe: 2 layers, h 64, 4 heads (2 kv), 4 experts of width 64, top 2, a shared expert of 64.
TEST(MixtureOfExperts, TinyCountsByHand) {
  const auto c = catalog("tiny-moe").param_counts();
  const std::int64_t attention = 2 * 64 * 64 + 2 * 64 * 32, expert = 3 * 64 * 64;
  EXPECT_EQ(c.router_per_layer, 64 * 4);
  EXPECT_EQ(c.routed_experts_per_layer, 4 * expert);
  EXPECT_EQ(c.shared_experts_per_layer, expert);
  EXPECT_EQ(c.per_moe_layer, attention + 2 * 64 + 64 * 4 + expert + 4 * expert);
  EXPECT_EQ(c.moe_layers, 2);
  EXPECT_EQ(c.dense_layers, 0);
  EXPECT_EQ(c.total, 2 * c.per_moe_layer + 2 * 512 * 64 + 64);
  EXPECT_EQ(c.active, c.total - 2 * 2 * expert - 512 * 64);  // two of four experts unused, the lookup
}

// Active parameters as the model cards give them (total counts: ModelCatalog's test), within their
// rounding where the vendor leaves the embedding lookup out as cpt does (OpenAI, DeepSeek; V2-Lite's
// 2.45 B is given as 2.4), within the embedding and the rounding where it counts it (Mistral, Qwen).
TEST(MixtureOfExperts, ActiveParametersMatchTheModelCards) {
  const struct {
    const char* name;
    double active, tolerance;
  } cards[] = {{"gpt-oss-120b", 5.13e9, 0.01e9},    {"gpt-oss-20b", 3.61e9, 0.01e9},  {"deepseek-v3", 37e9, 0.5e9},
               {"deepseek-v2-lite", 2.4e9, 0.06e9}, {"mixtral-8x7b", 12.9e9, 0.19e9}, {"qwen3-30b-a3b", 3.3e9, 0.32e9},
               {"qwen3-235b-a22b", 22e9, 0.7e9},    {"qwen2-57b-a14b", 14e9, 0.6e9}};
  for (const auto& card : cards) {
    EXPECT_NEAR(static_cast<double>(catalog(card.name).param_counts().active), card.active, card.tolerance)
        << card.name;
  }
}

// DeepSeek's first_k_dense_replace and Qwen2-MoE's decoder_sparse_step.
TEST(MixtureOfExperts, LayerPatternCountsDenseAndMoeLayers) {
  const auto v3 = catalog("deepseek-v3");
  EXPECT_FALSE(v3.is_moe_layer(2));
  EXPECT_TRUE(v3.is_moe_layer(3));
  EXPECT_EQ(v3.moe_layers_in(0, 61), 58);
  EXPECT_EQ(v3.moe_layers_in(0, 3), 0);
  EXPECT_EQ(v3.moe_layers_in(2, 3), 2);
  ModelSpec every_other = catalog("tiny-moe");
  every_other.layers = 8;
  every_other.moe.layer_interval = 2;  // layers 1, 3, 5, 7
  EXPECT_EQ(every_other.moe_layers_in(0, 8), 4);
  EXPECT_EQ(every_other.moe_layers_in(1, 2), 1);
  EXPECT_EQ(every_other.moe_layers_in(2, 1), 0);
  EXPECT_EQ(every_other.param_counts().dense_layers, 4);
}

ModelSpec from_hf(const nlohmann::json& config) {
  const auto doc = core::parse_json_text(config.dump(), "config.json");
  auto reader = core::JsonObjectReader::root_of(doc);
  return model_from_hf_config(reader, "hf");
}

// config.json of the released checkpoints (their architecture keys) give the catalog's counts.
TEST(MixtureOfExperts, HuggingFaceConfigsOfEachFamilyAreRead) {
  const auto mixtral = from_hf({{"model_type", "mixtral"},
                                {"num_hidden_layers", 32},
                                {"hidden_size", 4096},
                                {"intermediate_size", 14336},
                                {"num_attention_heads", 32},
                                {"num_key_value_heads", 8},
                                {"vocab_size", 32000},
                                {"max_position_embeddings", 32768},
                                {"num_local_experts", 8},
                                {"num_experts_per_tok", 2},
                                {"rope_theta", 1e6}});
  EXPECT_EQ(mixtral.num_params(), catalog("mixtral-8x7b").num_params());
  const auto qwen3 = from_hf({{"model_type", "qwen3_moe"},
                              {"num_hidden_layers", 48},
                              {"hidden_size", 2048},
                              {"intermediate_size", 6144},
                              {"num_attention_heads", 32},
                              {"num_key_value_heads", 4},
                              {"head_dim", 128},
                              {"vocab_size", 151936},
                              {"max_position_embeddings", 40960},
                              {"num_experts", 128},
                              {"num_experts_per_tok", 8},
                              {"moe_intermediate_size", 768},
                              {"decoder_sparse_step", 1},
                              {"mlp_only_layers", nlohmann::json::array()}});
  EXPECT_EQ(qwen3.num_params(), catalog("qwen3-30b-a3b").num_params());
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim(), 128);
  const auto v3 = from_hf({{"model_type", "deepseek_v3"}, {"num_hidden_layers", 61},
                           {"hidden_size", 7168},         {"intermediate_size", 18432},
                           {"num_attention_heads", 128},  {"num_key_value_heads", 128},
                           {"vocab_size", 129280},        {"max_position_embeddings", 163840},
                           {"n_routed_experts", 256},     {"n_shared_experts", 1},
                           {"num_experts_per_tok", 8},    {"moe_intermediate_size", 2048},
                           {"first_k_dense_replace", 3},  {"moe_layer_freq", 1},
                           {"q_lora_rank", 1536},         {"kv_lora_rank", 512},
                           {"qk_nope_head_dim", 128},     {"qk_rope_head_dim", 64},
                           {"v_head_dim", 128},           {"scoring_func", "sigmoid"}});
  EXPECT_EQ(v3.num_params(), catalog("deepseek-v3").num_params());
  EXPECT_EQ(v3.moe.router, RouterScore::kSigmoid);
  EXPECT_EQ(v3.moe, catalog("deepseek-v3").moe);  // its grouped routing and scale too
  // Dense layers anywhere but a prefix are refused by name.
  auto listed = nlohmann::json{{"model_type", "qwen2_moe"},      {"num_hidden_layers", 4},   {"hidden_size", 64},
                               {"intermediate_size", 128},       {"num_attention_heads", 4}, {"vocab_size", 512},
                               {"max_position_embeddings", 128}, {"num_experts", 4},         {"num_experts_per_tok", 2},
                               {"moe_intermediate_size", 32},    {"mlp_only_layers", {1}}};
  try {
    (void)from_hf(listed);
    FAIL() << "mlp_only_layers accepted";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp_only_layers"), std::string::npos) << e.what();
  }
}

std::string hf_error(const nlohmann::json& config) {
  try {
    (void)from_hf(config);
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return {};
}

// What a config.json cannot mean is refused by the key that says it: sizes beyond what cpt counts,
// keys that disagree, routers it does not know, MoE layers that never occur.
TEST(MixtureOfExperts, HuggingFaceConfigsThatCannotBeMeantAreRefusedByKey) {
  const nlohmann::json mixtral = {
      {"model_type", "mixtral"},        {"num_hidden_layers", 4},   {"hidden_size", 64},
      {"intermediate_size", 128},       {"num_attention_heads", 4}, {"vocab_size", 512},
      {"max_position_embeddings", 128}, {"num_local_experts", 8},   {"num_experts_per_tok", 2}};
  EXPECT_EQ(hf_error(mixtral), "");
  auto huge = mixtral;  // 4 layers of 1e9 experts of 3·64·128 parameters: beyond kMaxModelParameters
  huge["num_local_experts"] = 1000000000;
  huge["intermediate_size"] = 131072;
  EXPECT_NE(hf_error(huge).find("moe.experts (1000000000)"), std::string::npos) << hf_error(huge);
  EXPECT_NE(hf_error(huge).find("cpt plans models of up to"), std::string::npos) << hf_error(huge);

  auto gpt_oss = mixtral;  // its releases carry both top-k keys
  gpt_oss["model_type"] = "gpt_oss";
  gpt_oss["experts_per_token"] = 4;
  gpt_oss["num_experts_per_tok"] = 4;
  EXPECT_EQ(from_hf(gpt_oss).moe.experts_per_token, 4);
  gpt_oss["num_experts_per_tok"] = 2;
  EXPECT_NE(hf_error(gpt_oss).find("num_experts_per_tok"), std::string::npos) << hf_error(gpt_oss);
  EXPECT_NE(hf_error(gpt_oss).find("4 (as experts_per_token)"), std::string::npos) << hf_error(gpt_oss);

  nlohmann::json v2 = {{"model_type", "deepseek_v2"},    {"num_hidden_layers", 4},   {"hidden_size", 64},
                       {"intermediate_size", 128},       {"num_attention_heads", 4}, {"vocab_size", 512},
                       {"max_position_embeddings", 128}, {"n_routed_experts", 8},    {"num_experts_per_tok", 2},
                       {"moe_intermediate_size", 32},    {"kv_lora_rank", 16},       {"qk_nope_head_dim", 8},
                       {"qk_rope_head_dim", 8},          {"v_head_dim", 8}};
  EXPECT_EQ(from_hf(v2).moe.router, RouterScore::kSoftmax);  // transformers' DeepseekV2Config default
  auto v3 = v2;
  v3["model_type"] = "deepseek_v3";
  v3["num_experts_per_tok"] = 4;  // at least a chosen group's one each
  // DeepseekV3Config's defaults: sigmoid scores, the best 4 of 8 groups, weights x 2.5.
  const auto defaults = from_hf(v3).moe;
  EXPECT_EQ(defaults.router, RouterScore::kSigmoid);
  EXPECT_EQ(defaults.expert_groups, 8);
  EXPECT_EQ(defaults.groups_per_token, 4);
  EXPECT_EQ(defaults.top_k_scale, 2.5);
  EXPECT_TRUE(defaults.expert_bias);  // its router's e_score_correction_bias
  EXPECT_FALSE(from_hf(v2).moe.expert_bias);
  v3["n_group"] = 4;
  v3["topk_group"] = 2;
  v3["routed_scaling_factor"] = 2.5;
  const auto grouped = from_hf(v3).moe;
  EXPECT_EQ(grouped.expert_groups, 4);
  EXPECT_EQ(grouped.groups_per_token, 2);
  EXPECT_EQ(grouped.top_k_scale, 2.5);
  v3["topk_group"] = 1;  // one group of 2 experts cannot hold a token's 3
  v3["num_experts_per_tok"] = 3;
  EXPECT_NE(hf_error(v3).find("moe.groups_per_token (1) groups of 2 experts cannot hold moe.experts_per_token (3)"),
            std::string::npos)
      << hf_error(v3);
  v3["topk_group"] = 4;  // more groups than experts a token takes
  v3["num_experts_per_tok"] = 2;
  EXPECT_NE(hf_error(v3).find("moe.groups_per_token (4) must be at most moe.experts_per_token (2)"), std::string::npos)
      << hf_error(v3);
  v3["topk_group"] = 2;
  v3["n_group"] = 3;  // 8 experts in 3 groups
  EXPECT_NE(hf_error(v3).find("moe.expert_groups (3) must divide moe.experts (8)"), std::string::npos) << hf_error(v3);
  v3["n_group"] = 4;
  v3["scoring_func"] = "Sigmoid";
  EXPECT_NE(hf_error(v3).find("scoring_func"), std::string::npos) << hf_error(v3);
  // DeepSeek-V2's topk_method: "greedy" (transformers' default, DeepSeek-V2-Lite's) routes over
  // every expert whatever n_group says; "group_limited_greedy" keeps the groups.
  v2["n_group"] = 4;
  v2["topk_group"] = 2;
  EXPECT_EQ(from_hf(v2).moe.expert_groups, 1);
  v2["topk_method"] = "greedy";
  EXPECT_EQ(from_hf(v2).moe.groups_per_token, 1);
  v2["topk_method"] = "group_limited_greedy";
  EXPECT_EQ(from_hf(v2).moe.expert_groups, 4);
  EXPECT_EQ(from_hf(v2).moe.groups_per_token, 2);
  v2["topk_method"] = "noaux_tc";  // DeepSeek-V3's, not V2's
  EXPECT_NE(hf_error(v2).find("topk_method"), std::string::npos) << hf_error(v2);
  v2["topk_method"] = "greedy";
  // DeepSeek-V2 routes by softmax only (transformers' and DeepSeek's code), V3 by sigmoid.
  v2["scoring_func"] = "sigmoid";
  EXPECT_NE(hf_error(v2).find("scoring_func"), std::string::npos) << hf_error(v2);
  v2.erase("scoring_func");
  // Dense first layers covering every layer: transformers builds an all-dense model, and so does cpt.
  v2["first_k_dense_replace"] = 4;
  EXPECT_FALSE(from_hf(v2).moe.present());
  EXPECT_EQ(from_hf(v2).ffn_hidden, 128);
  v2["first_k_dense_replace"] = 0;
  // n_shared_experts × moe_intermediate_size beyond 32 bits: named, not wrapped around.
  v2["n_shared_experts"] = 1000000000;
  EXPECT_NE(hf_error(v2).find("n_shared_experts"), std::string::npos) << hf_error(v2);

  auto qwen = nlohmann::json{{"model_type", "qwen2_moe"},      {"num_hidden_layers", 4},   {"hidden_size", 64},
                             {"intermediate_size", 128},       {"num_attention_heads", 4}, {"vocab_size", 512},
                             {"max_position_embeddings", 128}, {"num_experts", 4},         {"num_experts_per_tok", 2},
                             {"moe_intermediate_size", 32},    {"decoder_sparse_step", 5}};  // layers 4, 9, ...: none
  EXPECT_NE(hf_error(qwen).find("leave no MoE layer among 4 layers"), std::string::npos) << hf_error(qwen);
}

TEST(MixtureOfExperts, ModelJsonRoundTripsExpertsAndLatentAttention) {
  for (const char* name : {"deepseek-v3", "qwen3-30b-a3b", "gpt-oss-20b", "tiny-moe"}) {
    const auto m = catalog(name);
    const auto doc = core::parse_json_text(model_to_json(m).dump(), "model.json");
    auto reader = core::JsonObjectReader::root_of(doc);
    EXPECT_EQ(model_from_json(reader), m) << name;
  }
  // A resumed checkpoint of another model names the field (run_checkpoints.cpp).
  auto wider = catalog("tiny-moe");
  wider.moe.experts = 8;
  EXPECT_EQ(first_model_difference(catalog("tiny-moe"), wider), "moe.experts 4 against 8");
  EXPECT_EQ(first_model_difference(wider, wider), "");
  auto scaled = wider;
  scaled.moe.top_k_scale = 2.5;  // a key only the second writes
  EXPECT_EQ(first_model_difference(wider, scaled), "moe.top_k_scale none against 2.5");
  EXPECT_FALSE(model_to_json(wider)["moe"].contains("expert_bias"));  // written where set
  // Weights load where the shapes agree: routing, RoPE, epsilon and name may differ.
  auto rerouted = catalog("tiny-moe");
  rerouted.name = "tiny-moe-cpt";
  rerouted.rope_theta = 5e5;
  rerouted.max_seq_len = 4 * rerouted.max_seq_len;
  rerouted.moe.experts_per_token = 1;
  rerouted.moe.capacity_factor = 1.25;
  EXPECT_EQ(first_shape_difference(catalog("tiny-moe"), rerouted), "");
  // No layer is dense: the dense MLP's width shapes nothing (an exported MoE writes the experts'
  // width there); with a dense first layer it does.
  rerouted.ffn_hidden = rerouted.moe.expert_ffn_hidden;
  EXPECT_EQ(first_shape_difference(catalog("tiny-moe"), rerouted), "");
  // DeepSeek-V3's expert bias is a tensor per MoE layer: weights with it do not load without it.
  auto biased = rerouted;
  biased.moe.router = RouterScore::kSigmoid;
  biased.moe.expert_bias = true;
  EXPECT_NE(first_shape_difference(catalog("tiny-moe"), biased).find("expert_bias"), std::string::npos);
  // It moves sigmoid scores only (Megatron-Core refuses it with softmax).
  biased.moe.router = RouterScore::kSoftmax;
  EXPECT_NE(find_model_spec_errors(biased).front().find("moe.expert_bias needs moe.router"), std::string::npos);
  auto dense_first = catalog("tiny-moe"), dense_first_narrow = catalog("tiny-moe");
  dense_first.moe.first_dense_layers = dense_first_narrow.moe.first_dense_layers = 1;
  dense_first_narrow.ffn_hidden = 64;
  EXPECT_NE(first_shape_difference(dense_first, dense_first_narrow).find("ffn_hidden"), std::string::npos);
  EXPECT_EQ(first_shape_difference(wider, catalog("tiny-moe")), "moe.experts 8 against 4");
  EXPECT_NE(first_shape_difference(catalog("tiny"), catalog("tiny-moe")).find("moe none against"), std::string::npos);
  EXPECT_EQ(model_to_json(catalog("deepseek-v3"))["moe"]["expert_bias"], true);
  auto broken = model_to_json(catalog("tiny-moe"));
  broken["moe"]["experts_per_token"] = 5;  // more than the 4 experts
  const auto doc = core::parse_json_text(broken.dump(), "model.json");
  auto reader = core::JsonObjectReader::root_of(doc);
  try {
    (void)model_from_json(reader);
    FAIL() << "top-5 of 4 experts accepted";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("moe.experts_per_token (5)"), std::string::npos) << e.what();
  }
}

// The example model files (and the fuzzers' seeds) load and count as their headers say.
TEST(MixtureOfExperts, ExampleModelFilesLoad) {
  const std::filesystem::path examples = std::filesystem::path(CPT_SOURCE_DIR) / "examples/models";
  const auto tiny = load_model((examples / "tiny_moe.json").string(), "--model");
  EXPECT_EQ(tiny.num_params(), catalog("tiny-moe").num_params());
  const auto latent = load_model((examples / "tiny_latent_moe.json").string(), "--model");
  const auto counts = latent.param_counts();
  EXPECT_EQ(counts.dense_layers, 1);
  EXPECT_EQ(counts.moe_layers, 3);
  EXPECT_TRUE(latent.mla.present());
  // Latent attention by hand: q 64·32 + 32 + 32·4·24, kv 64·(32 + 8) + 32 + 32·4·(16 + 16), out 4·16·64.
  EXPECT_EQ(counts.attention_per_layer, 64 * 32 + 32 + 32 * 4 * 24 + 64 * 40 + 32 + 32 * 4 * 32 + 4 * 16 * 64);
  EXPECT_EQ(counts.attention_replicated_per_layer, 64 * 32 + 32 + 64 * 40 + 32);  // down projections, latent norms
}

ParallelConfig layout(int tp, int dp, int pp, int ep, int etp) {
  ParallelConfig p;
  p.tp = tp;
  p.dp = dp;
  p.pp = pp;
  p.ep = ep;
  p.etp = etp;
  p.sequence_parallel = tp > 1;
  p.global_batch = dp;
  return p;
}

TEST(MixtureOfExperts, ExpertParallelRulesNameTheirValues) {
  const auto moe = catalog("mixtral-8x7b");
  EXPECT_TRUE(find_parallel_config_errors(layout(2, 4, 1, 8, 1), moe, 4096, 8).empty());
  auto first = [&](const ParallelConfig& p, const ModelSpec& m) {
    const auto errors = find_parallel_config_errors(p, m, 4096, 0);
    return errors.empty() ? std::string() : errors.front();
  };
  EXPECT_NE(first(layout(1, 8, 1, 2, 1), catalog("llama3-8b")).find("dense"), std::string::npos);
  EXPECT_NE(first(layout(1, 6, 1, 4, 1), moe).find("must divide tp * cp * dp = 6"), std::string::npos);
  EXPECT_NE(first(layout(1, 16, 1, 16, 1), moe).find("moe.experts (8) must be divisible by ep (16)"),
            std::string::npos);
  ParallelConfig no_sp = layout(2, 4, 1, 8, 1);
  no_sp.sequence_parallel = false;
  EXPECT_NE(first(no_sp, moe).find("needs sequence_parallel"), std::string::npos);
}

// RankLayout's worked example: tp 2, dp 4, pp 2, ep 2, etp 2.
TEST(MixtureOfExperts, ExpertGroupsFoldInsideEachStage) {
  const RankLayout l(layout(2, 4, 2, 2, 2), 8);
  EXPECT_EQ(l.expert_degree(ExpertAxis::kExpertDp), 2);
  EXPECT_EQ(l.expert_group(6, ExpertAxis::kEtp), (std::vector<int>{6, 7}));
  EXPECT_EQ(l.expert_group(6, ExpertAxis::kEp), (std::vector<int>{4, 6}));
  EXPECT_EQ(l.expert_group(6, ExpertAxis::kExpertDp), (std::vector<int>{2, 6}));
  EXPECT_EQ(l.expert_group(13, ExpertAxis::kEp), (std::vector<int>{13, 15}));
  EXPECT_EQ(l.expert_group(13, ExpertAxis::kExpertDp), (std::vector<int>{9, 13}));
  EXPECT_EQ(l.group_of(6, Axis::kTp), (std::vector<int>{6, 7}));  // attention keeps its tp groups
}

}  // namespace
}  // namespace cpt::spec
