#include "spec/model_fields.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec::model_fields {

using core::ConfigError;
using core::JsonObjectReader;
using core::str_cat;

int dim(JsonObjectReader& r, std::string_view key) {
  return static_cast<int>(r.integer(key, 1, kMaxDim));
}

// The first of `m`'s errors, located at the object `r` read it from (its fields named within).
void check_spec(const ModelSpec& m, const JsonObjectReader& r) {
  const auto errors = find_model_spec_errors(m);
  if (!errors.empty()) throw ConfigError(str_cat(r.origin(), ": ", r.path(), ": ", errors.front()));
}

int optional_dim(JsonObjectReader& r, std::string_view key, int otherwise) {
  return static_cast<int>(r.optional_integer(key, 0, kMaxDim).value_or(otherwise));
}

// An integer that may be absent or null in a config.json.
std::optional<std::int64_t> present_integer(JsonObjectReader& r, std::string_view key, std::int64_t min) {
  if (!r.has(key) || r.raw(key).is_null()) {
    r.accept(key);
    return std::nullopt;
  }
  return r.integer(key, min, kMaxDim);
}

// `key`'s number in [lo, hi], or nullopt where absent or null (Hugging Face writes nulls).
std::optional<double> present_number(JsonObjectReader& r, std::string_view key, double lo, double hi) {
  if (!r.has(key) || r.raw(key).is_null()) {
    r.accept(key);
    return std::nullopt;
  }
  return r.number(key, lo, hi);
}

namespace {

// YaRN's keys (spec::RopeScaling), as transformers reads them: beta_fast and beta_slow default
// to 32 and 1, original_max_position_embeddings to the model's `max_seq_len`.
void read_yarn(JsonObjectReader& r, int max_seq_len, RopeScaling& s) {
  s.kind = RopeScalingKind::kYarn;
  const auto original = present_integer(r, "original_max_position_embeddings", 1);
  s.original_max_positions = original ? static_cast<int>(*original) : max_seq_len;
  s.beta_fast = present_number(r, "beta_fast", 1e-6, 1e6).value_or(32);
  s.beta_slow = present_number(r, "beta_slow", 1e-6, 1e6).value_or(1);
  s.mscale = present_number(r, "mscale", 0, 1e3).value_or(0);
  s.mscale_all_dim = present_number(r, "mscale_all_dim", 0, 1e3).value_or(0);
  s.attention_factor = present_number(r, "attention_factor", 0, 1e3).value_or(0);
  s.truncate = r.has("truncate") && !r.raw("truncate").is_null() ? r.boolean("truncate") : true;
}

}  // namespace

// "rope_scaling" of a model JSON ("type" "llama3", the default, or "yarn"), or the llama3 or yarn
// rope_scaling of a Hugging Face config.json (the same keys; `hf`: "rope_type" or "type").
RopeScaling rope_scaling_from_json(JsonObjectReader r, bool hf, int max_seq_len) {
  RopeScaling s;
  std::string type = "llama3";
  if (hf) {
    type = r.has("rope_type") ? r.string("rope_type") : r.string("type");
    r.accept("rope_type");
    r.accept("type");
    if (type != "llama3" && type != "yarn") return s;  // others leave the layout alone; the executor refuses them
  } else if (r.has("type")) {
    type = r.one_of("type", {"llama3", "yarn"});
  }
  if (type == "yarn") {
    s.factor = r.number("factor", 1, 1e6);
    read_yarn(r, max_seq_len, s);
    if (!hf) r.finish();
    return s;
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

}  // namespace cpt::spec::model_fields
