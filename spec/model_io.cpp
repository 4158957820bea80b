#include "spec/model_io.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"
#include "spec/model_catalog.h"
#include "spec/model_fields.h"

namespace cpt::spec {

using core::ConfigError;
using core::Json;
using core::JsonObjectReader;
using core::str_cat;
using model_fields::check_spec;
using model_fields::dim;
using model_fields::kMaxDim;
using model_fields::optional_dim;
using model_fields::rope_scaling_from_json;

namespace {

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
    m.rope_scaling = rope_scaling_from_json(r.object("rope_scaling"), false, m.max_seq_len);
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
  check_spec(m, r);
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
  if (const RopeScaling& s = m.rope_scaling; s.yarn()) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", s.factor},
                         {"original_max_position_embeddings", s.original_max_positions},
                         {"beta_fast", s.beta_fast},
                         {"beta_slow", s.beta_slow},
                         {"mscale", s.mscale},
                         {"mscale_all_dim", s.mscale_all_dim},
                         {"attention_factor", s.attention_factor},
                         {"truncate", s.truncate}};
  } else if (s.present()) {
    j["rope_scaling"] = {{"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_positions}};
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
  ModelSpec shaped = ours;  // `ours` with `theirs`'s values of every field that shapes no tensor
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
    shaped.moe.capacity_factor = routing.capacity_factor;
    // The dense MLP's width shapes nothing when no layer of either is dense (an exported MoE
    // writes the experts' width there, as Hugging Face's configs often do).
    if (!has_dense_layer(ours) && !has_dense_layer(theirs)) shaped.ffn_hidden = theirs.ffn_hidden;
  }
  return first_model_difference(shaped, theirs);
}

ModelSpec load_model_file(const std::filesystem::path& path) {
  const auto doc = core::parse_json_file(path);
  auto r = JsonObjectReader::root_of(doc);
  if (r.has("model_type")) {
    auto fallback = path.parent_path().filename().string();
    if (fallback.empty()) fallback = path.stem().string();
    return model_from_hf_config(r, fallback);
  }
  // Hugging Face's keys without its model_type: name the key that says which family it is, not
  // the first key cpt's own format misses.
  if (!r.has("name") && (r.has("architectures") || r.has("hidden_size"))) {
    r.fail("model_type", "the model family (a Hugging Face config.json: \"llama\", \"mixtral\", ...)", "nothing");
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
