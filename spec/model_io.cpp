#include "spec/model_io.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"
#include "spec/model_catalog.h"

namespace cpt::spec {

using core::ConfigError;
using core::Json;
using core::JsonObjectReader;
using core::str_cat;

namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 30;

int dim(JsonObjectReader& r, std::string_view key) {
  return static_cast<int>(r.integer(key, 1, kMaxDim));
}

void check_spec(const ModelSpec& m, const std::string& origin) {
  const auto errors = find_model_spec_errors(m);
  if (!errors.empty()) throw ConfigError(str_cat(origin, ": $: ", errors.front()));
}

int optional_dim(JsonObjectReader& r, std::string_view key, int otherwise) {
  return static_cast<int>(r.optional_integer(key, 0, kMaxDim).value_or(otherwise));
}

ExpertSpec experts_from_json(JsonObjectReader r) {
  ExpertSpec e;
  e.experts = dim(r, "experts");
  e.experts_per_token = dim(r, "experts_per_token");
  e.expert_ffn_hidden = dim(r, "expert_ffn_hidden");
  e.shared_ffn_hidden = optional_dim(r, "shared_ffn_hidden", 0);
  e.first_dense_layers = optional_dim(r, "first_dense_layers", 0);
  e.layer_interval = static_cast<int>(r.optional_integer("layer_interval", 1, kMaxDim).value_or(1));
  if (r.has("router")) {
    e.router = r.one_of("router", {"softmax", "sigmoid"}) == "softmax" ? RouterScore::kSoftmax : RouterScore::kSigmoid;
  } else {
    r.accept("router");
  }
  e.normalize_top_k = r.optional_boolean("normalize_top_k").value_or(true);
  if (r.has("top_k_scale")) {
    e.top_k_scale = r.number("top_k_scale", 1e-3, 1e3);
  } else {
    r.accept("top_k_scale");
  }
  e.expert_groups = optional_dim(r, "expert_groups", 1);
  e.groups_per_token = optional_dim(r, "groups_per_token", 1);
  e.expert_bias = r.optional_boolean("expert_bias").value_or(false);
  if (r.has("capacity_factor")) {
    e.capacity_factor = r.number("capacity_factor", 0, 1e3);
  } else {
    r.accept("capacity_factor");
  }
  r.finish();
  return e;
}

// "rope_scaling" of a model JSON, or the llama3 rope_scaling of a Hugging Face config.json (the
// same keys; `hf`: also its "rope_type" or "type").
RopeScaling rope_scaling_from_json(JsonObjectReader r, bool hf) {
  RopeScaling s;
  if (hf) {
    const auto type = r.has("rope_type") ? r.string("rope_type") : r.string("type");
    r.accept("rope_type");
    r.accept("type");
    if (type != "llama3") return s;  // other kinds leave the parameter layout alone; the executor refuses them
  }
  s.factor = r.number("factor", 1, 1e6);
  s.low_freq_factor = r.has("low_freq_factor") || hf ? r.number("low_freq_factor", 1e-6, 1e6) : 1.0;
  s.high_freq_factor = r.has("high_freq_factor") || hf ? r.number("high_freq_factor", 1e-6, 1e6) : 4.0;
  s.original_max_positions = r.has("original_max_position_embeddings") || hf
                                 ? static_cast<int>(r.integer("original_max_position_embeddings", 1, kMaxDim))
                                 : 8192;
  if (!hf) r.finish();
  return s;
}

LatentAttention latent_attention_from_json(JsonObjectReader r) {
  LatentAttention l;
  l.q_lora_rank = optional_dim(r, "q_lora_rank", 0);
  l.kv_lora_rank = dim(r, "kv_lora_rank");
  l.qk_nope_head_dim = dim(r, "qk_nope_head_dim");
  l.qk_rope_head_dim = dim(r, "qk_rope_head_dim");
  l.v_head_dim = dim(r, "v_head_dim");
  r.finish();
  return l;
}

}  // namespace

ModelSpec model_from_json(JsonObjectReader& r) {
  ModelSpec m;
  m.name = r.string("name");
  if (m.name.empty()) r.fail("name", "a non-empty string", "\"\"");
  m.layers = dim(r, "layers");
  m.hidden = dim(r, "hidden");
  m.heads = dim(r, "heads");
  m.kv_heads = dim(r, "kv_heads");
  m.ffn_hidden = dim(r, "ffn_hidden");
  m.vocab = r.integer("vocab", 1, kMaxDim);
  m.mlp = r.one_of("mlp", {"swiglu", "gelu"}) == "swiglu" ? MlpKind::kSwiGLU : MlpKind::kGelu;
  m.norm = r.one_of("norm", {"rmsnorm", "layernorm"}) == "rmsnorm" ? NormKind::kRMSNorm : NormKind::kLayerNorm;
  m.position = r.one_of("position", {"rope", "learned"}) == "rope" ? PositionKind::kRoPE : PositionKind::kLearned;
  m.tied_embeddings = r.boolean("tied_embeddings");
  m.max_seq_len = dim(r, "max_seq_len");
  if (auto theta = r.optional_positive_number("rope_theta")) m.rope_theta = *theta;
  m.qkv_bias = r.optional_boolean("qkv_bias").value_or(false);
  if (r.has("norm_eps")) {
    m.norm_eps = r.number("norm_eps", 1e-12, 1e-1);
  } else {
    r.accept("norm_eps");  // known (for "did you mean") though absent
  }
  m.explicit_head_dim = static_cast<int>(r.optional_integer("head_dim", 1, kMaxDim).value_or(0));
  m.qk_norm = r.optional_boolean("qk_norm").value_or(false);
  if (r.has("rope_scaling")) {
    m.rope_scaling = rope_scaling_from_json(r.object("rope_scaling"), false);
  } else {
    r.accept("rope_scaling");
  }
  if (r.has("moe")) {
    m.moe = experts_from_json(r.object("moe"));
  } else {
    r.accept("moe");
  }
  if (r.has("mla")) {
    m.mla = latent_attention_from_json(r.object("mla"));
  } else {
    r.accept("mla");
  }
  r.finish();
  check_spec(m, r.origin());
  return m;
}

Json model_to_json(const ModelSpec& m) {
  Json j;
  j["name"] = m.name;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["ffn_hidden"] = m.ffn_hidden;
  j["vocab"] = m.vocab;
  j["mlp"] = to_string(m.mlp);
  j["norm"] = to_string(m.norm);
  j["position"] = to_string(m.position);
  j["tied_embeddings"] = m.tied_embeddings;
  j["max_seq_len"] = m.max_seq_len;
  j["rope_theta"] = m.rope_theta;
  j["norm_eps"] = m.norm_eps;
  if (m.rope_scaling.present()) {
    j["rope_scaling"] = {{"factor", m.rope_scaling.factor},
                         {"low_freq_factor", m.rope_scaling.low_freq_factor},
                         {"high_freq_factor", m.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", m.rope_scaling.original_max_positions}};
  }
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.explicit_head_dim > 0) j["head_dim"] = m.explicit_head_dim;
  if (m.qk_norm) j["qk_norm"] = true;
  if (m.moe.present()) {
    const ExpertSpec& e = m.moe;
    j["moe"] = {{"experts", e.experts},
                {"experts_per_token", e.experts_per_token},
                {"expert_ffn_hidden", e.expert_ffn_hidden},
                {"shared_ffn_hidden", e.shared_ffn_hidden},
                {"first_dense_layers", e.first_dense_layers},
                {"layer_interval", e.layer_interval},
                {"router", to_string(e.router)},
                {"normalize_top_k", e.normalize_top_k},
                {"capacity_factor", e.capacity_factor}};
    // Written where set: plans of models without them read as before.
    if (e.top_k_scale != 1) j["moe"]["top_k_scale"] = e.top_k_scale;
    if (e.expert_groups != 1 || e.groups_per_token != 1) {
      j["moe"]["expert_groups"] = e.expert_groups;
      j["moe"]["groups_per_token"] = e.groups_per_token;
    }
    if (e.expert_bias) j["moe"]["expert_bias"] = true;
  }
  if (m.mla.present()) {
    const LatentAttention& l = m.mla;
    j["mla"] = {{"q_lora_rank", l.q_lora_rank},
                {"kv_lora_rank", l.kv_lora_rank},
                {"qk_nope_head_dim", l.qk_nope_head_dim},
                {"qk_rope_head_dim", l.qk_rope_head_dim},
                {"v_head_dim", l.v_head_dim}};
  }
  return j;
}

namespace {

// The first differing field of two JSON values, by dotted path under `prefix`.
std::string first_json_difference(const Json& ours, const Json& theirs, const std::string& prefix) {
  if (ours.is_object() && theirs.is_object()) {
    for (const auto& [key, value] : ours.items()) {
      const auto path = prefix.empty() ? key : str_cat(prefix, ".", key);
      if (!theirs.contains(key)) return str_cat(path, " ", value.dump(), " against none");
      if (auto found = first_json_difference(value, theirs.at(key), path); !found.empty()) return found;
    }
    for (const auto& [key, value] : theirs.items()) {
      if (!ours.contains(key))
        return str_cat(prefix.empty() ? key : str_cat(prefix, ".", key), " none against ", value.dump());
    }
    return {};
  }
  return ours == theirs ? std::string() : str_cat(prefix, " ", ours.dump(), " against ", theirs.dump());
}

}  // namespace

std::string first_model_difference(const ModelSpec& ours, const ModelSpec& theirs) {
  return first_json_difference(model_to_json(ours), model_to_json(theirs), "");
}

namespace {

bool has_dense_layer(const ModelSpec& model) {
  for (int layer = 0; layer < model.layers; ++layer) {
    if (!model.is_moe_layer(layer)) return true;
  }
  return false;
}

}  // namespace

std::string first_shape_difference(const ModelSpec& ours, const ModelSpec& theirs) {
  ModelSpec shaped = ours;  // `ours` with `theirs`'s values of every field that shapes no parameter
  shaped.name = theirs.name;
  if (ours.position != PositionKind::kLearned) shaped.max_seq_len = theirs.max_seq_len;
  shaped.rope_theta = theirs.rope_theta;
  shaped.rope_scaling = theirs.rope_scaling;
  shaped.norm_eps = theirs.norm_eps;
  if (ours.head_dim() == theirs.head_dim()) shaped.explicit_head_dim = theirs.explicit_head_dim;
  if (ours.moe.present() && theirs.moe.present()) {
    const ExpertSpec& routing = theirs.moe;
    shaped.moe.experts_per_token = routing.experts_per_token;
    shaped.moe.router = routing.router;
    shaped.moe.normalize_top_k = routing.normalize_top_k;
    shaped.moe.top_k_scale = routing.top_k_scale;
    shaped.moe.expert_groups = routing.expert_groups;
    shaped.moe.groups_per_token = routing.groups_per_token;
    shaped.moe.expert_bias = routing.expert_bias;
    shaped.moe.capacity_factor = routing.capacity_factor;
    // The dense MLP's width shapes nothing when no layer of either is dense (an exported MoE
    // writes the experts' width there, as Hugging Face's configs often do).
    if (!has_dense_layer(ours) && !has_dense_layer(theirs)) shaped.ffn_hidden = theirs.ffn_hidden;
  }
  return first_model_difference(shaped, theirs);
}

namespace {

// The Hugging Face model types read, and what each adds to a LLaMA-style decoder.
const std::vector<std::string> kHfModelTypes = {"llama",     "mistral",   "qwen2",       "qwen3",       "mixtral",
                                                "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss"};

// An integer that may be absent or null in a config.json.
std::optional<std::int64_t> present_integer(JsonObjectReader& r, std::string_view key, std::int64_t min) {
  if (!r.has(key) || r.raw(key).is_null()) {
    r.accept(key);
    return std::nullopt;
  }
  return r.integer(key, min, kMaxDim);
}

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

// The mixture of experts of a config.json of `type` (none for dense types).
ExpertSpec hf_experts(JsonObjectReader& r, const std::string& type) {
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
    // transformers' defaults: DeepseekV2Config softmax, DeepseekV3Config sigmoid.
    const bool scored = r.has("scoring_func") && !r.raw("scoring_func").is_null();
    const auto score = scored ? r.one_of("scoring_func", {"softmax", "sigmoid"})
                              : std::string(type == "deepseek_v3" ? "sigmoid" : "softmax");
    if (!scored) r.accept("scoring_func");
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

// head_dim where the type allows one apart from hidden / heads (Qwen3, GPT-OSS, Mistral); the
// others must agree with hidden / heads.
void read_hf_head_dim(JsonObjectReader& r, const std::string& type, ModelSpec& m) {
  if (!r.has("head_dim") || r.raw("head_dim").is_null()) return;
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
    m.rope_scaling = rope_scaling_from_json(r.object("rope_scaling"), true);
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
  if (type == "llama") {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (r.optional_boolean(key).value_or(false)) r.fail(key, "false (biases are not modelled)", "true");
    }
  }
  read_hf_head_dim(r, type, m);
  m.moe = hf_experts(r, type);
  if (m.moe.present() && m.moe.first_dense_layers == 0 && m.moe.layer_interval == 1) {
    m.ffn_hidden = m.moe.expert_ffn_hidden;  // no dense layer: intermediate_size is the experts'
  }
  if (type == "deepseek_v2" || type == "deepseek_v3") m.mla = hf_latent_attention(r);
  // Every other key (token ids, dtype, rope_scaling, ...) leaves the
  // parameter layout unchanged and is ignored on purpose: no finish() here.
  check_spec(m, r.origin());
  return m;
}

ModelSpec load_model_file(const std::filesystem::path& path) {
  const auto doc = core::parse_json_file(path);
  auto r = JsonObjectReader::root_of(doc);
  if (r.has("model_type")) {
    auto fallback = path.parent_path().filename().string();
    if (fallback.empty()) fallback = path.stem().string();
    return model_from_hf_config(r, fallback);
  }
  return model_from_json(r);
}

std::optional<ModelSpec> load_model_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  if (std::filesystem::exists(dir / "config.json", ec)) return load_model_file(dir / "config.json");
  if (!std::filesystem::exists(dir / "manifest.json", ec)) return std::nullopt;
  const auto doc = core::parse_json_file(dir / "manifest.json");
  auto r = JsonObjectReader::root_of(doc);
  const auto format = r.string("format");
  if (format != "cpt-checkpoint-v1") r.fail("format", "\"cpt-checkpoint-v1\"", str_cat("\"", format, "\""));
  auto model = r.object("model");
  return model_from_json(model);
}

ModelSpec load_model(const std::string& name_or_path, const std::string& flag) {
  if (auto m = find_catalog_model(name_or_path)) return m->spec;
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (auto m = load_model_directory(path)) return *m;
    throw ConfigError(str_cat(flag, ": expected a Hugging Face directory (config.json) or a cpt checkpoint ",
                              "(manifest.json) in ", name_or_path, ", got neither"));
  }
  if (path.extension() == ".json" || std::filesystem::exists(path, ec)) return load_model_file(path);
  std::vector<std::string> names;
  for (const auto& m : model_catalog()) names.push_back(m.spec.name);
  const auto hint = core::closest_match(name_or_path, names);
  throw ConfigError(str_cat(flag, ": expected a model name (see `cpt models list`) or a JSON file, got \"",
                            name_or_path, "\"", hint.empty() ? "" : str_cat(" (did you mean \"", hint, "\"?)")));
}

}  // namespace cpt::spec
