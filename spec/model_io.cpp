#include "spec/model_io.h"

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

int dim(JsonObjectReader& r, std::string_view key) { return static_cast<int>(r.integer(key, 1, kMaxDim)); }

void check_spec(const ModelSpec& m, const std::string& origin) {
  const auto errors = find_model_spec_errors(m);
  if (!errors.empty()) throw ConfigError(str_cat(origin, ": $: ", errors.front()));
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
  if (m.qkv_bias) j["qkv_bias"] = true;
  return j;
}

ModelSpec model_from_hf_config(JsonObjectReader& r, const std::string& fallback_name) {
  const auto type = r.one_of("model_type", {"llama", "mistral", "qwen2"});
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
  // LlamaConfig, MistralConfig and Qwen2Config all default tie_word_embeddings to false.
  m.tied_embeddings = r.optional_boolean("tie_word_embeddings").value_or(false);
  if (r.has("rope_theta")) m.rope_theta = r.positive_number("rope_theta");
  // LlamaConfig, MistralConfig and Qwen2Config default rms_norm_eps to 1e-6.
  m.norm_eps = r.has("rms_norm_eps") ? r.number("rms_norm_eps", 1e-12, 1e-1) : 1e-6;
  m.mlp = MlpKind::kSwiGLU;
  m.norm = NormKind::kRMSNorm;
  m.position = PositionKind::kRoPE;
  m.qkv_bias = type == "qwen2";  // Qwen2 has biases on q, k and v (and nowhere else)
  if (auto act = r.optional_string("hidden_act"); act && *act != "silu") {
    r.fail("hidden_act", "\"silu\" (SwiGLU MLP)", str_cat("\"", *act, "\""));
  }
  if (type == "llama") {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (r.optional_boolean(key).value_or(false)) r.fail(key, "false (biases are not modelled)", "true");
    }
  }
  if (r.has("head_dim") && !r.raw("head_dim").is_null()) {
    const auto head_dim = r.integer("head_dim", 1, kMaxDim);
    if (m.hidden % m.heads != 0 || head_dim != m.hidden / m.heads) {
      r.fail("head_dim", str_cat(m.hidden / std::max(m.heads, 1), " (hidden_size / num_attention_heads)"),
             str_cat(head_dim));
    }
  }
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

ModelSpec load_model(const std::string& name_or_path, const std::string& flag) {
  if (auto m = find_catalog_model(name_or_path)) return m->spec;
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (path.extension() == ".json" || std::filesystem::exists(path, ec)) return load_model_file(path);
  std::vector<std::string> names;
  for (const auto& m : model_catalog()) names.push_back(m.spec.name);
  const auto hint = core::closest_match(name_or_path, names);
  throw ConfigError(str_cat(flag, ": expected a model name (see `cpt models list`) or a JSON file, got \"",
                            name_or_path, "\"", hint.empty() ? "" : str_cat(" (did you mean \"", hint, "\"?)")));
}

}  // namespace cpt::spec
