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

#include "spec/train_config.h"

namespace cpt::spec {

struct MixtureShare {
  std::string name;
  std::int64_t tokens = 0;  // the data set's tokens (its manifest's "tokens")
  double weight = 1.0;      // mixture weight, any positive scale
};

// ⌈value⌉ of a value computed in `roundings` floating-point operations: a value within their
// round-off (each at most half an ulp, relative 2⁻⁵³) above an integer is that integer, so weights
// of 0.1 and 0.2 give the steps of 1 and 2. ConfigError naming `what` above 2⁶² (more than a run
// can count). REQUIRES: value >= 0, roundings >= 1.
std::int64_t ceil_of_computed(double value, int roundings, const std::string& what);

// ⌈epochs · min_i(tokens_i / w_i)⌉ with w normalised to sum 1 (ceil_of_computed). Padded packing
// counts documents in `tokens` the same way (a sample is a document).
// REQUIRES: shares non-empty, every tokens > 0 and weight > 0; epochs > 0.
std::int64_t tokens_for_epochs(std::span<const MixtureShare> shares, double epochs);

// ⌈tokens / tokens_per_step⌉: the optimizer steps that reach a token budget. REQUIRES both >= 1.
std::int64_t steps_for_tokens(std::int64_t tokens, std::int64_t tokens_per_step);

// The steps of `epochs` over the mixture: packed, `shares` count tokens and a step takes
// global_batch × seq_len of them; padded, they count documents (a sample each) and a step takes
// global_batch. The trainer's count and the planner's. REQUIRES as tokens_for_epochs.
std::int64_t steps_for_epochs(std::span<const MixtureShare> shares, double epochs, int global_batch, int seq_len,
                              Packing packing);

// A data set as padded packing samples it: its documents, and Σ min(length, seq_len + 1) − 1 over
// them, the input tokens of its samples.
struct PaddedShare {
  std::int64_t documents = 0;
  double inputs = 0;
  double weight = 1.0;  // mixture weight, any positive scale
};

// The mixture's mean input tokens per padded sample: Σ_i w_i · inputs_i / documents_i with w
// normalised. REQUIRES: shares non-empty, every documents > 0 and weight > 0.
double mean_padded_sample(std::span<const PaddedShare> shares);

// ConfigError naming `what` when padded samples of a `mean_sample` hold no input (every document a
// single token: nothing to train on, however the run's length is given).
void require_padded_input(double mean_sample, const std::string& what);

// The steps that reach `tokens` input tokens at `global_batch` padded samples of `mean_sample`
// inputs each (mean_padded_sample over `sources` data sets). ConfigError naming `what` when a
// sample holds no input (every document a single token) or the count passes 2⁶².
std::int64_t steps_for_padded_tokens(std::int64_t tokens, int global_batch, double mean_sample, int sources,
                                     const std::string& what);

// The token count a prepared data set's manifest.json states (`cpt-exec data prepare` writes it;
// executor/data/token_shards.h reads the shards behind it). Reads only the manifest: no LibTorch,
// no shard. ConfigError naming the file for a missing or unreadable manifest, another format, or a
// count that is not a non-negative integer.
std::int64_t manifest_tokens(const std::filesystem::path& dataset_dir);
// Its documents, from the same manifest (padded packing counts an epoch in documents).
std::int64_t manifest_documents(const std::filesystem::path& dataset_dir);

}  // namespace cpt::spec
