#pragma once
// Microbatches from one or more token datasets, mixed by weight (replay of original-domain data is
// a second source with its share). Deterministic from the seed; the position is a small state
// (samples consumed per source) that checkpoints save, so a resumed run sees exactly the batches
// the uninterrupted run would have seen.
//
// Sampling units:
//   packed  the dataset's token stream is cut into windows of seq_len + 1 tokens (window u covers
//           stream positions [u·S, u·S + S]); a window may hold several documents, which then
//           cannot attend to each other (a bool mask) and restart their positions at 0; the
//           target that would cross a document boundary is ignored.
//   padded  one document per row, truncated to S + 1 tokens, rows padded to the longest in the
//           microbatch (dynamic padding; rounded up to width_multiple); padding targets are
//           ignored, and Batch::real_tokens marks the rest.
// Order: units of each source are visited in a fresh random permutation per epoch (Fisher-Yates
// driven by mt19937_64 seeded from (seed, source name, epoch)); sources are interleaved by
// Megatron's blending rule (next sample from the source whose count lags its weight the most), so
// after n samples every source has had its share to within one sample.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "executor/data/batch.h"
#include "executor/data/token_shards.h"
#include "spec/token_budget.h"
#include "spec/train_config.h"

namespace cpt::exec {

using spec::Packing;  // TRAIN.json's "packing"

struct DataSource {
  std::string name;
  std::shared_ptr<const TokenDataset> dataset;
  double weight = 1.0;  // relative share; normalised over sources
};

struct LoaderOptions {
  int seq_len = 0;
  int micro_batch = 1;
  std::uint64_t seed = 0;
  Packing packing = Packing::kPacked;
  bool shuffle = true;  // false: units in order (evaluation sets)
  // Padded: each microbatch's width rounded up to a multiple of this (spec::sequence_length_multiple:
  // context and sequence parallelism split it); seq_len must be one.
  int width_multiple = 1;
};

// The sources as padded packing samples them (spec::PaddedShare: documents, their inputs
// min(length, seq_len + 1) − 1, weight); spec::mean_padded_sample of them is what a token budget
// divides by.
[[nodiscard]] std::vector<spec::PaddedShare> padded_shares(const std::vector<DataSource>& sources, int seq_len);

// ConfigError naming a source too small for one sample (packed: seq_len + 1 tokens; padded: a
// document).
void require_a_sample_each(const std::vector<DataSource>& sources, int seq_len, Packing packing);

class DataLoader {
 public:
  // ConfigError when a source is too small for one sample (packed: fewer than seq_len + 1 tokens).
  DataLoader(std::vector<DataSource> sources, LoaderOptions options);

  // The next microbatch (CPU tensors).
  Batch next();
  // Advances past `samples` samples without reading them (the samples other data-parallel ranks
  // take): the position afterwards is the one next() would have reached.
  void skip(std::int64_t samples);

  // Samples consumed per source, in source order.
  [[nodiscard]] const std::vector<std::int64_t>& consumed() const { return consumed_; }
  [[nodiscard]] const std::vector<DataSource>& sources() const { return sources_; }
  // {"sources": {"<name>": samples consumed, ...}}
  [[nodiscard]] core::Json state() const;
  // ConfigError (naming `origin`) when the state names other sources than this loader's.
  void restore(const core::Json& state, const std::string& origin);
  // Sampling units (windows or documents) of source i.
  [[nodiscard]] std::int64_t units(std::size_t source) const;

 private:
  struct Row {
    std::vector<std::int64_t> tokens, targets, positions, docs;
  };
  std::size_t pick_source() const;
  std::int64_t unit_of(std::size_t source, std::int64_t k);
  Row read_row(std::size_t source, std::int64_t unit) const;

  std::vector<DataSource> sources_;
  std::vector<double> weights_;  // normalised
  LoaderOptions options_;
  std::vector<std::int64_t> consumed_;
  // Cached permutation of the current epoch of each source.
  std::vector<std::int64_t> perm_epoch_;
  std::vector<std::vector<std::int64_t>> perm_;
};

}  // namespace cpt::exec
