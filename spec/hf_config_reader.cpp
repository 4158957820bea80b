// model_from_hf_config (spec/model_io.h): a Hugging Face config.json of the families cpt reads,
// as transformers reads it (docs/model_format.md, "Hugging Face config.json").
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/str_cat.h"
#include "spec/model_fields.h"
#include "spec/model_io.h"

namespace cpt::spec {

using core::JsonObjectReader;
using core::str_cat;
using model_fields::check_spec;
using model_fields::dim;
using model_fields::kMaxDim;
using model_fields::present_integer;
using model_fields::rope_scaling_from_json;

namespace {

// The Hugging Face model types read, and what each adds to a LLaMA-style decoder.
const std::vector<std::string> kHfModelTypes = {"llama",     "mistral",   "qwen2",       "qwen3",       "mixtral",
                                                "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss"};

// Qwen2-MoE / Qwen3-MoE list the layers that keep a dense MLP; cpt models only a dense prefix.
void refuse_mlp_only_layers(JsonObjectReader& r) {
  if (r.has("mlp_only_layers") && !r.integer_array("mlp_only_layers", 0).empty()) {
    r.fail("mlp_only_layers", "[] (dense layers only as a first_k_dense_replace prefix)", "a non-empty list");
  }
}

// DeepSeek's routed_scaling_factor, n_group and topk_group; absent, transformers' defaults
// (DeepseekV2Config 1, none, none; DeepseekV3Config 2.5, 8, 4). DeepSeek-V3's router always has
// its expert bias (transformers' DeepseekV3TopkRouter.e_score_correction_bias).
void read_grouped_routing(JsonObjectReader& r, const std::string& type, ExpertSpec& e) {
  const bool v3 = type == "deepseek_v3";
  if (r.has("routed_scaling_factor") && !r.raw("routed_scaling_factor").is_null()) {
    e.top_k_scale = r.number("routed_scaling_factor", 1e-3, 1e3);
  } else {
    r.accept("routed_scaling_factor");
    e.top_k_scale = v3 ? 2.5 : 1;
  }
  e.expert_groups = static_cast<int>(present_integer(r, "n_group", 1).value_or(v3 ? 8 : 1));
  e.groups_per_token = static_cast<int>(present_integer(r, "topk_group", 1).value_or(v3 ? 4 : 1));
  e.expert_bias = v3;
  // DeepSeek-V2's topk_method (transformers' default "greedy", as DeepSeek-V2-Lite): "greedy"
  // routes over every expert whatever n_group says; "group_limited_greedy" limits a token to its
  // best topk_group groups (scoring a group by its best expert, where Megatron-Core and cpt's
  // executor sum its top k / topk_group: the same when that is 1; executor/io/model_weights.cpp
  // refuses the others).
  if (!v3) {
    const auto method = r.has("topk_method") && !r.raw("topk_method").is_null()
                            ? r.one_of("topk_method", {"greedy", "group_limited_greedy"})
                            : std::string("greedy");
    if (method == "greedy") e.expert_groups = e.groups_per_token = 1;
  }
}

// The top-k of a Mixtral or GPT-OSS config.json. GPT-OSS's releases carry both
// `experts_per_token` and transformers' `num_experts_per_tok`: they must agree.
int gpt_oss_top_k(JsonObjectReader& r, const std::string& type) {
  if (type != "gpt_oss" || !r.has("experts_per_token")) return dim(r, "num_experts_per_tok");
  const int top_k = dim(r, "experts_per_token");
  if (r.has("num_experts_per_tok") && dim(r, "num_experts_per_tok") != top_k) {
    r.fail("num_experts_per_tok", str_cat(top_k, " (as experts_per_token)"), str_cat(r.integer("num_experts_per_tok")));
  }
  return top_k;
}

// The mixture of experts of a config.json of `type` and `layers` layers (none for dense types, nor
// for a DeepSeek whose first_k_dense_replace covers every layer: transformers builds it all dense,
// its expert keys unused and often null).
ExpertSpec hf_experts(JsonObjectReader& r, const std::string& type, int layers) {
  ExpertSpec e;
  if (type == "mixtral" || type == "gpt_oss") {
    e.experts = dim(r, "num_local_experts");
    e.experts_per_token = gpt_oss_top_k(r, type);
    e.expert_ffn_hidden = dim(r, "intermediate_size");
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    e.experts = dim(r, "num_experts");
    e.experts_per_token = dim(r, "num_experts_per_tok");
    e.expert_ffn_hidden = dim(r, "moe_intermediate_size");
    e.shared_ffn_hidden = static_cast<int>(present_integer(r, "shared_expert_intermediate_size", 0).value_or(0));
    e.layer_interval = static_cast<int>(present_integer(r, "decoder_sparse_step", 1).value_or(1));
    refuse_mlp_only_layers(r);
    e.normalize_top_k = r.has("norm_topk_prob") && !r.raw("norm_topk_prob").is_null() && r.boolean("norm_topk_prob");
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    if (present_integer(r, "first_k_dense_replace", 0).value_or(0) >= layers) return e;
    e.experts = dim(r, "n_routed_experts");
    e.experts_per_token = dim(r, "num_experts_per_tok");
    e.expert_ffn_hidden = dim(r, "moe_intermediate_size");
    const std::int64_t shared = present_integer(r, "n_shared_experts", 0).value_or(0) * e.expert_ffn_hidden;
    if (shared > kMaxDim) {
      r.fail("n_shared_experts", str_cat("at most ", kMaxDim, " shared expert rows (times moe_intermediate_size)"),
             str_cat(shared));
    }
    e.shared_ffn_hidden = static_cast<int>(shared);
    e.first_dense_layers = static_cast<int>(present_integer(r, "first_k_dense_replace", 0).value_or(0));
    if (present_integer(r, "moe_layer_freq", 1).value_or(1) != 1) {
      r.fail("moe_layer_freq", "1 (every layer after the dense ones)", str_cat(r.integer("moe_layer_freq")));
    }
    // Each has one router (transformers' and DeepSeek's code): DeepSeek-V2 softmax, V3 sigmoid.
    const std::string score = type == "deepseek_v3" ? "sigmoid" : "softmax";
    if (r.has("scoring_func") && !r.raw("scoring_func").is_null()) {
      r.one_of("scoring_func", {score});
    } else {
      r.accept("scoring_func");
    }
    if (score == "sigmoid") e.router = RouterScore::kSigmoid;
    // transformers' defaults: DeepseekV2Config False, DeepseekV3Config True.
    const auto normalize = r.has("norm_topk_prob") && !r.raw("norm_topk_prob").is_null()
                               ? std::optional<bool>(r.boolean("norm_topk_prob"))
                               : std::nullopt;
    e.normalize_top_k = normalize.value_or(type == "deepseek_v3");
    read_grouped_routing(r, type, e);
  }
  return e;
}

LatentAttention hf_latent_attention(JsonObjectReader& r) {
  LatentAttention l;
  l.q_lora_rank = static_cast<int>(present_integer(r, "q_lora_rank", 0).value_or(0));
  l.kv_lora_rank = dim(r, "kv_lora_rank");
  l.qk_nope_head_dim = dim(r, "qk_nope_head_dim");
  l.qk_rope_head_dim = dim(r, "qk_rope_head_dim");
  l.v_head_dim = dim(r, "v_head_dim");
  return l;
}

// head_dim where the type allows one apart from hidden / heads (Qwen3, GPT-OSS, Mistral); DeepSeek's
// is its rotary width (latent attention sets the heads' widths); the others must agree with
// hidden / heads.
void read_hf_head_dim(JsonObjectReader& r, const std::string& type, ModelSpec& m) {
  if (!r.has("head_dim") || r.raw("head_dim").is_null()) return;
  if (type == "deepseek_v2" || type == "deepseek_v3") {  // DeepseekV2Config writes qk_rope_head_dim there
    r.accept("head_dim");
    return;
  }
  const auto head_dim = r.integer("head_dim", 1, kMaxDim);
  const bool free_width = type == "qwen3" || type == "qwen3_moe" || type == "gpt_oss" || type == "mistral";
  if (free_width) {
    if (m.hidden % m.heads != 0 || head_dim != m.hidden / m.heads) m.explicit_head_dim = static_cast<int>(head_dim);
    return;
  }
  if (m.hidden % m.heads != 0 || head_dim != m.hidden / m.heads) {
    r.fail("head_dim", str_cat(m.hidden / std::max(m.heads, 1), " (hidden_size / num_attention_heads)"),
           str_cat(head_dim));
  }
}

}  // namespace

ModelSpec model_from_hf_config(JsonObjectReader& r, const std::string& fallback_name) {
  const auto type = r.one_of("model_type", kHfModelTypes);
  ModelSpec m;
  m.name = r.optional_string("_name_or_path").value_or(fallback_name);
  if (m.name.empty()) m.name = fallback_name;
  m.layers = dim(r, "num_hidden_layers");
  m.hidden = dim(r, "hidden_size");
  m.heads = dim(r, "num_attention_heads");
  m.kv_heads = static_cast<int>(r.optional_integer("num_key_value_heads", 1, kMaxDim).value_or(m.heads));
  m.ffn_hidden = dim(r, "intermediate_size");
  m.vocab = r.integer("vocab_size", 1, kMaxDim);
  m.max_seq_len = dim(r, "max_position_embeddings");
  // Every type read defaults tie_word_embeddings to false.
  m.tied_embeddings = r.optional_boolean("tie_word_embeddings").value_or(false);
  if (r.has("rope_theta")) m.rope_theta = r.positive_number("rope_theta");
  if (r.has("rope_scaling") && r.raw("rope_scaling").is_object()) {
    m.rope_scaling = rope_scaling_from_json(r.object("rope_scaling"), true, m.max_seq_len);
  }
  // LlamaConfig, MistralConfig and Qwen2Config default rms_norm_eps to 1e-6.
  m.norm_eps = r.has("rms_norm_eps") ? r.number("rms_norm_eps", 1e-12, 1e-1) : 1e-6;
  m.mlp = MlpKind::kSwiGLU;
  m.norm = NormKind::kRMSNorm;
  m.position = PositionKind::kRoPE;
  // Qwen2 and Qwen2-MoE have biases on q, k and v (and nowhere else); GPT-OSS on every attention
  // projection and its experts (counted: q, k and v's; not modelled: the output's, the experts'
  // and the attention sinks, 0.03% of gpt-oss-120b).
  m.qkv_bias = type == "qwen2" || type == "qwen2_moe" || type == "gpt_oss";
  m.qk_norm = type == "qwen3" || type == "qwen3_moe";
  if (auto act = r.optional_string("hidden_act"); act && *act != "silu") {
    r.fail("hidden_act", "\"silu\" (SwiGLU MLP)", str_cat("\"", *act, "\""));
  }
  if (type == "llama" || type == "deepseek_v2" || type == "deepseek_v3") {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (r.optional_boolean(key).value_or(false)) r.fail(key, "false (biases are not modelled)", "true");
    }
  }
  // DeepSeek-V3's rotary channels in pairs (2i, 2i + 1), as its checkpoints have them.
  if (type == "deepseek_v3" && !r.optional_boolean("rope_interleave").value_or(true)) {
    r.fail("rope_interleave", "true (the rotary channels in pairs, as DeepSeek's checkpoints)", "false");
  }
  read_hf_head_dim(r, type, m);
  m.moe = hf_experts(r, type, m.layers);
  if (m.moe.present() && m.moe.first_dense_layers == 0 && m.moe.layer_interval == 1) {
    m.ffn_hidden = m.moe.expert_ffn_hidden;  // no dense layer: intermediate_size is the experts'
  }
  if (type == "deepseek_v2" || type == "deepseek_v3") m.mla = hf_latent_attention(r);
  // Every other key (token ids, dtype, rope_scaling, ...) leaves the
  // parameter layout unchanged and is ignored on purpose: no finish() here.
  check_spec(m, r);
  return m;
}

}  // namespace cpt::spec
