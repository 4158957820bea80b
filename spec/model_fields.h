#pragma once
// The model readers' shared field rules (spec/model_io.cpp for cpt's model JSON,
// spec/hf_config_reader.cpp for Hugging Face's config.json): widths and counts within 2^30, a value
// Hugging Face may write as null, RoPE scaling, and a read model's one-line error located at the
// object it came from.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/json_reader.h"
#include "spec/model_spec.h"

namespace cpt::spec::model_fields {

inline constexpr std::int64_t kMaxDim = std::int64_t{1} << 30;

// A width or count in [1, kMaxDim].
int dim(core::JsonObjectReader& r, std::string_view key);
// A width or count in [0, kMaxDim], `otherwise` where absent.
int optional_dim(core::JsonObjectReader& r, std::string_view key, int otherwise);
// An integer in [min, kMaxDim], or nullopt where absent or null.
std::optional<std::int64_t> present_integer(core::JsonObjectReader& r, std::string_view key, std::int64_t min);
// A number in [lo, hi], or nullopt where absent or null.
std::optional<double> present_number(core::JsonObjectReader& r, std::string_view key, double lo, double hi);
// ConfigError with the first of `m`'s errors, located at the object `r` read it from.
void check_spec(const ModelSpec& m, const core::JsonObjectReader& r);
// "rope_scaling" of a model JSON ("type" "llama3", the default, or "yarn"), or the llama3 or yarn
// rope_scaling of a Hugging Face config.json (`hf`: "rope_type" or "type"; other kinds read as
// none). YaRN's original context defaults to `max_seq_len`.
RopeScaling rope_scaling_from_json(core::JsonObjectReader r, bool hf, int max_seq_len);

}  // namespace cpt::spec::model_fields
