#pragma once
// A run's length in tokens when TRAIN.json counts it in epochs: the run ends when the mixture has
// passed `epochs` times over the data set it exhausts first, the one with the fewest tokens per
// unit of mixture weight (with a 95/5 mix of a 10 B-token new domain and a 2 T-token replay set,
// one epoch is 10 B / 0.95 tokens, the replay set seen 0.5 B of its tokens). Samples are drawn by
// weight (executor/data/data_loader.h), so each set's share of the run's tokens is its normalised
// weight; a packed set's last partial sequence of an epoch is not counted apart.
// The executor (its step count) and the planner (time and cost to finish) both read it from here.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace cpt::spec {

struct MixtureShare {
  std::string name;
  std::int64_t tokens = 0;  // the data set's tokens (its manifest's "tokens")
  double weight = 1.0;      // mixture weight, any positive scale
};

// ⌈epochs · min_i(tokens_i / w_i)⌉ with w normalised to sum 1.
// REQUIRES: shares non-empty, every tokens > 0 and weight > 0; epochs > 0.
std::int64_t tokens_for_epochs(std::span<const MixtureShare> shares, double epochs);

// ⌈tokens / tokens_per_step⌉: the optimizer steps that reach a token budget. REQUIRES both >= 1.
std::int64_t steps_for_tokens(std::int64_t tokens, std::int64_t tokens_per_step);

// The token count a prepared data set's manifest.json states (`cpt-exec data prepare` writes it;
// executor/data/token_shards.h reads the shards behind it). Reads only the manifest: no LibTorch,
// no shard. ConfigError naming the file for a missing or unreadable manifest, another format, or a
// count that is not a non-negative integer.
std::int64_t manifest_tokens(const std::filesystem::path& dataset_dir);

}  // namespace cpt::spec
