#include "spec/token_budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"

namespace cpt::spec {

std::int64_t ceil_of_computed(double value, int roundings, const std::string& what) {
  CPT_CHECK(value >= 0 && roundings >= 1, "ceil_of_computed: a count and its roundings");
  // Twice the bound on the accumulated relative error, roundings · 2⁻⁵³, forgiven only as the
  // part above an integer (a value of 2⁵² and more has none).
  const double forgiven = value * static_cast<double>(roundings) * std::ldexp(1.0, -52);
  const double whole = std::floor(value);
  const double count = value - whole <= forgiven ? whole : std::ceil(value);
  if (!(count < 0x1p62)) {
    throw core::ConfigError(core::str_cat(what, ": ", value, " is more than a run can count (2^62)"));
  }
  return static_cast<std::int64_t>(count);
}

std::int64_t tokens_for_epochs(std::span<const MixtureShare> shares, double epochs) {
  CPT_CHECK(!shares.empty() && epochs > 0, "tokens_for_epochs: no data set or no epoch");
  double weight_sum = 0;
  for (const auto& s : shares) {
    CPT_CHECK(s.tokens > 0 && s.weight > 0, "tokens_for_epochs: an empty or unweighted data set");
    weight_sum += s.weight;
  }
  double one_epoch = std::numeric_limits<double>::infinity();
  for (const auto& s : shares) one_epoch = std::min(one_epoch, static_cast<double>(s.tokens) * weight_sum / s.weight);
  // The weights' sum, a product, a quotient and the epochs' product.
  const auto roundings = static_cast<int>(shares.size()) + 3;
  return ceil_of_computed(epochs * one_epoch, roundings,
                          core::str_cat("epochs: ", epochs, " epoch(s) of this mixture"));
}

std::int64_t steps_for_tokens(std::int64_t tokens, std::int64_t tokens_per_step) {
  CPT_CHECK(tokens >= 1 && tokens_per_step >= 1, "steps_for_tokens: a budget and a step of at least one token");
  return (tokens + tokens_per_step - 1) / tokens_per_step;
}

std::int64_t steps_for_epochs(std::span<const MixtureShare> shares, double epochs, int global_batch, int seq_len,
                              Packing packing) {
  const auto units = tokens_for_epochs(shares, epochs);
  const bool padded = packing == Packing::kPadded;
  return steps_for_tokens(units, padded ? std::int64_t{global_batch} : std::int64_t{global_batch} * seq_len);
}

double mean_padded_sample(std::span<const PaddedShare> shares) {
  CPT_CHECK(!shares.empty(), "mean_padded_sample: no data set");
  double weight_sum = 0, weighted = 0;
  for (const auto& s : shares) {
    CPT_CHECK(s.documents > 0 && s.weight > 0, "mean_padded_sample: an empty or unweighted data set");
    weighted += s.weight * s.inputs / static_cast<double>(s.documents);
    weight_sum += s.weight;
  }
  return weighted / weight_sum;
}

void require_padded_input(double mean_sample, const std::string& what) {
  if (mean_sample > 0) return;
  throw core::ConfigError(core::str_cat(what, ": expected documents of at least two tokens (a padded sample's ",
                                        "inputs and targets), got only documents of one"));
}

std::int64_t steps_for_padded_tokens(std::int64_t tokens, int global_batch, double mean_sample, int sources,
                                     const std::string& what) {
  CPT_CHECK(tokens >= 1 && global_batch >= 1 && sources >= 1);
  require_padded_input(mean_sample, what);
  // mean_padded_sample's 3 per data set and its quotient; the step's product and the budget's quotient.
  const int roundings = 3 * sources + 3;
  return std::max<std::int64_t>(
      1, ceil_of_computed(static_cast<double>(tokens) / (global_batch * mean_sample), roundings,
                          core::str_cat(what, ": ", tokens, " tokens at ", mean_sample, " per padded sample")));
}

namespace {

// A count the manifest of a prepared data set states.
std::int64_t manifest_count(const std::filesystem::path& dataset_dir, const std::string& key) {
  const auto path = dataset_dir / "manifest.json";
  const auto doc = core::parse_json_file(path);
  auto reader = core::JsonObjectReader::root_of(doc);
  const auto format = reader.string("format");
  if (format != "cpt-tokens-v1") reader.fail("format", "\"cpt-tokens-v1\"", core::str_cat("\"", format, "\""));
  return reader.integer(key, 0);
}

}  // namespace

std::int64_t manifest_tokens(const std::filesystem::path& dataset_dir) {
  return manifest_count(dataset_dir, "tokens");
}

std::int64_t manifest_documents(const std::filesystem::path& dataset_dir) {
  return manifest_count(dataset_dir, "documents");
}

}  // namespace cpt::spec
