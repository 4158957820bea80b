#include "executor/io/hf_export_config.h"

#include <array>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

// DeepSeek-V2 in transformers: softmax routing whose top-k weights are not normalised (its
// DeepseekV2MoEGate ignores norm_topk_prob), shared experts in every MoE layer, dense layers only
// first, groups scored by their best expert (cpt's rule when experts_per_token equals
// groups_per_token).
std::optional<std::string> deepseek_v2_mismatch(const spec::ModelSpec& m) {
  if (!m.moe.present()) return std::nullopt;  // exported with every layer dense
  const spec::ExpertSpec& e = m.moe;
  if (e.router != spec::RouterScore::kSoftmax || e.normalize_top_k || e.expert_bias || e.capacity_factor > 0 ||
      e.layer_interval != 1) {
    return "DeepSeek-V2 routes by softmax without normalising the top k, no expert bias, dropless, every layer "
           "after the dense ones MoE";
  }
  if (e.shared_ffn_hidden == 0 || e.shared_ffn_hidden % e.expert_ffn_hidden != 0) {
    return "DeepSeek-V2 has shared experts, a whole number of experts wide";
  }
  if (e.expert_groups > 1 && e.experts_per_token != e.groups_per_token) {
    return "DeepSeek-V2 scores an expert group by its best expert: experts_per_token equal to groups_per_token";
  }
  return std::nullopt;
}

// DeepSeek-V3 in transformers (DeepseekV3TopkRouter, DeepseekV3MoE): sigmoid routing plus an
// expert bias for the choice (always: its buffer), norm_topk_prob, routed_scaling_factor, shared experts in every MoE
// layer, dense layers only first, a group scored by the sum of its best two experts (cpt's rule,
// the sum of its best k/g, when k/g is 2). It fills the groups a token does not take with 0 rather
// than -inf, the same while the biased scores of the groups it takes stay positive.
std::optional<std::string> deepseek_v3_mismatch(const spec::ModelSpec& m) {
  const spec::ExpertSpec& e = m.moe;
  if (e.router != spec::RouterScore::kSigmoid || !e.expert_bias || e.capacity_factor > 0 || e.layer_interval != 1) {
    return "DeepSeek-V3 routes by sigmoid with an expert bias, dropless, every layer after the dense ones MoE";
  }
  if (e.shared_ffn_hidden == 0 || e.shared_ffn_hidden % e.expert_ffn_hidden != 0) {
    return "DeepSeek-V3 has shared experts, a whole number of experts wide";
  }
  if (e.expert_groups > 1 && e.experts_per_token / e.groups_per_token != 2) {
    return "DeepSeek-V3 scores an expert group by the sum of its best two experts: experts_per_token / "
           "groups_per_token of 2";
  }
  return std::nullopt;
}

}  // namespace

HfFamily hf_family_of(const spec::ModelSpec& m, const fs::path& origin) {
  auto refuse = [&](const std::string& why) {
    throw core::ConfigError(str_cat(origin.string(), ": model ", m.name, ": no transformers class computes it: ", why));
  };
  if (m.mla.present()) {
    const bool v3 = m.moe.present() && m.moe.router == spec::RouterScore::kSigmoid;
    if (const auto mismatch = v3 ? deepseek_v3_mismatch(m) : deepseek_v2_mismatch(m)) refuse(*mismatch);
    return v3 ? HfFamily::kDeepseekV3 : HfFamily::kDeepseekV2;
  }
  if (m.qkv_bias && m.qk_norm) refuse("q/k/v biases with q/k norms");
  if (!m.moe.present()) return m.qk_norm ? HfFamily::kQwen3 : (m.qkv_bias ? HfFamily::kQwen2 : HfFamily::kLlama);
  const spec::ExpertSpec& e = m.moe;
  if (e.shared_ffn_hidden > 0 || e.first_dense_layers > 0 || e.router != spec::RouterScore::kSoftmax ||
      e.capacity_factor > 0 || m.qkv_bias || e.top_k_scale != 1 || e.expert_groups > 1) {
    refuse(
        "an MoE exports as Mixtral or Qwen3-MoE: no shared experts or dense first layers, a softmax router "
        "(unscaled, no expert groups), dropless, no q/k/v biases");
  }
  if (m.qk_norm) return HfFamily::kQwen3Moe;
  if (e.layer_interval != 1 || !e.normalize_top_k) {
    refuse("without q/k norms an MoE exports as Mixtral: every layer MoE, normalised top-k weights");
  }
  return HfFamily::kMixtral;
}

namespace {

// DeepseekV2Config's or DeepseekV3Config's latent attention and experts (deepseek_v2_mismatch or
// deepseek_v3_mismatch holds). A model without experts: every layer dense (first_k_dense_replace =
// layers; the expert keys unused).
void add_deepseek_config(const spec::ModelSpec& m, bool v3, nlohmann::ordered_json& config) {
  const spec::LatentAttention& l = m.mla;
  const spec::ExpertSpec& e = m.moe;
  config.erase("head_dim");                 // DeepseekV2Config derives it (qk_rope_head_dim)
  config["num_key_value_heads"] = m.heads;  // its keys and values are per query head
  config["q_lora_rank"] = l.q_lora_rank > 0 ? nlohmann::ordered_json(l.q_lora_rank) : nlohmann::ordered_json();
  config["kv_lora_rank"] = l.kv_lora_rank;
  config["qk_nope_head_dim"] = l.qk_nope_head_dim;
  config["qk_rope_head_dim"] = l.qk_rope_head_dim;
  config["v_head_dim"] = l.v_head_dim;
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  config["n_routed_experts"] = e.present() ? e.experts : 1;
  config["num_experts_per_tok"] = e.present() ? e.experts_per_token : 1;
  config["moe_intermediate_size"] = e.present() ? e.expert_ffn_hidden : m.ffn_hidden;
  config["n_shared_experts"] = e.present() ? e.shared_ffn_hidden / e.expert_ffn_hidden : 1;
  config["first_k_dense_replace"] = e.present() ? e.first_dense_layers : m.layers;
  config["routed_scaling_factor"] = e.present() ? e.top_k_scale : 1.0;
  config["n_group"] = e.expert_groups;
  config["topk_group"] = e.groups_per_token;
  if (v3) {
    config["norm_topk_prob"] = e.normalize_top_k;
    config["rope_interleave"] = true;  // RoPE on channel pairs, as cpt's latent attention
    return;
  }
  config["moe_layer_freq"] = 1;
  config["scoring_func"] = "softmax";
  config["norm_topk_prob"] = false;
  config["topk_method"] = e.expert_groups > 1 ? "group_limited_greedy" : "greedy";
  config["aux_loss_alpha"] = 0.0;
}

}  // namespace

nlohmann::ordered_json hf_config_of(const spec::ModelSpec& m, HfFamily family) {
  static constexpr std::array<std::pair<const char*, const char*>, 7> kNames{
      {{"llama", "LlamaForCausalLM"},
       {"qwen2", "Qwen2ForCausalLM"},
       {"qwen3", "Qwen3ForCausalLM"},
       {"mixtral", "MixtralForCausalLM"},
       {"qwen3_moe", "Qwen3MoeForCausalLM"},
       {"deepseek_v2", "DeepseekV2ForCausalLM"},
       {"deepseek_v3", "DeepseekV3ForCausalLM"}}};
  const auto& [type, architecture] = kNames[static_cast<std::size_t>(family)];
  const bool mixtral = family == HfFamily::kMixtral;
  nlohmann::ordered_json config{{"architectures", {architecture}},
                                {"model_type", type},
                                {"hidden_size", m.hidden},
                                {"intermediate_size", mixtral ? m.moe.expert_ffn_hidden : m.ffn_hidden},
                                {"num_hidden_layers", m.layers},
                                {"num_attention_heads", m.heads},
                                {"num_key_value_heads", m.kv_heads},
                                {"head_dim", m.head_dim()},
                                {"vocab_size", m.vocab},
                                {"max_position_embeddings", m.max_seq_len},
                                {"rms_norm_eps", m.norm_eps},
                                {"rope_theta", m.rope_theta},
                                {"rope_scaling", nullptr},
                                {"tie_word_embeddings", m.tied_embeddings},
                                {"hidden_act", "silu"},
                                {"use_sliding_window", false},
                                {"sliding_window", nullptr},
                                {"torch_dtype", "float32"},
                                {"bos_token_id", 1},
                                {"eos_token_id", 2}};
  if (family == HfFamily::kQwen3 || family == HfFamily::kQwen3Moe) config["attention_bias"] = false;
  if (const auto& s = m.rope_scaling; s.yarn()) {
    config["rope_scaling"] = {{"rope_type", "yarn"},
                              {"factor", s.factor},
                              {"original_max_position_embeddings", s.original_max_positions},
                              {"beta_fast", s.beta_fast},
                              {"beta_slow", s.beta_slow},
                              {"truncate", s.truncate}};
    // transformers reads an absent (or null) one as not given; 0 means that in cpt.
    if (s.mscale > 0) config["rope_scaling"]["mscale"] = s.mscale;
    if (s.mscale_all_dim > 0) config["rope_scaling"]["mscale_all_dim"] = s.mscale_all_dim;
    if (s.attention_factor > 0) config["rope_scaling"]["attention_factor"] = s.attention_factor;
  } else if (s.present()) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", s.factor},
                              {"low_freq_factor", s.low_freq_factor},
                              {"high_freq_factor", s.high_freq_factor},
                              {"original_max_position_embeddings", s.original_max_positions}};
  }
  if (family == HfFamily::kDeepseekV2 || family == HfFamily::kDeepseekV3) {
    add_deepseek_config(m, family == HfFamily::kDeepseekV3, config);
  }
  if (mixtral) {
    config["num_local_experts"] = m.moe.experts;
    config["num_experts_per_tok"] = m.moe.experts_per_token;
    config["router_jitter_noise"] = 0.0;
  }
  if (family == HfFamily::kQwen3Moe) {
    config["num_experts"] = m.moe.experts;
    config["num_experts_per_tok"] = m.moe.experts_per_token;
    config["moe_intermediate_size"] = m.moe.expert_ffn_hidden;
    config["decoder_sparse_step"] = m.moe.layer_interval;
    config["mlp_only_layers"] = nlohmann::ordered_json::array();
    config["norm_topk_prob"] = m.moe.normalize_top_k;
  }
  return config;
}

}  // namespace cpt::exec
