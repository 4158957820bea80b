#include "spec/token_budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"

namespace cpt::spec {

std::int64_t tokens_for_epochs(std::span<const MixtureShare> shares, double epochs) {
  CPT_CHECK(!shares.empty() && epochs > 0, "tokens_for_epochs: no data set or no epoch");
  double weight_sum = 0;
  for (const auto& s : shares) {
    CPT_CHECK(s.tokens > 0 && s.weight > 0, "tokens_for_epochs: an empty or unweighted data set");
    weight_sum += s.weight;
  }
  double one_epoch = std::numeric_limits<double>::infinity();
  for (const auto& s : shares) one_epoch = std::min(one_epoch, static_cast<double>(s.tokens) * weight_sum / s.weight);
  const double tokens = std::ceil(epochs * one_epoch);
  if (!(tokens < 0x1p62)) {
    throw core::ConfigError(core::str_cat("epochs: ", epochs, " epoch(s) of this mixture are ", tokens,
                                          " tokens, more than a run can count (2^62)"));
  }
  return static_cast<std::int64_t>(tokens);
}

std::int64_t steps_for_tokens(std::int64_t tokens, std::int64_t tokens_per_step) {
  CPT_CHECK(tokens >= 1 && tokens_per_step >= 1, "steps_for_tokens: a budget and a step of at least one token");
  return (tokens + tokens_per_step - 1) / tokens_per_step;
}

std::int64_t manifest_tokens(const std::filesystem::path& dataset_dir) {
  const auto path = dataset_dir / "manifest.json";
  const auto doc = core::parse_json_file(path);
  auto reader = core::JsonObjectReader::root_of(doc);
  const auto format = reader.string("format");
  if (format != "cpt-tokens-v1") reader.fail("format", "\"cpt-tokens-v1\"", core::str_cat("\"", format, "\""));
  return reader.integer("tokens", 0);
}

}  // namespace cpt::spec
