#include "spec/sequence_split.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/str_cat.h"

namespace cpt::spec {

std::optional<std::string> find_sequence_split_error(std::int64_t seq_len, int cp) {
  if (cp < 1) return core::str_cat("cp must be >= 1, got ", cp);
  if (cp > 1 && seq_len % (2 * cp) != 0) {
    return core::str_cat("seq_len (", seq_len, ") must be a multiple of 2·cp (", 2 * cp,
                         ") for the load-balanced context-parallel split");
  }
  return std::nullopt;
}

int sequence_length_multiple(int cp, int sp) {
  CPT_CHECK(cp >= 1 && sp >= 1, "cp ", cp, ", sp ", sp);
  return cp > 1 ? cp * std::lcm(2, sp) : sp;
}

std::vector<std::int64_t> sequence_positions_of_rank(std::int64_t seq_len, int cp, int cp_rank) {
  const auto error = find_sequence_split_error(seq_len, cp);
  CPT_CHECK(!error, *error);
  CPT_CHECK(cp_rank >= 0 && cp_rank < cp, "cp rank ", cp_rank, " of ", cp);
  if (cp == 1) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(seq_len));
    for (std::int64_t i = 0; i < seq_len; ++i) all[static_cast<std::size_t>(i)] = i;
    return all;
  }
  const std::int64_t chunk = seq_len / (2 * cp);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(2 * chunk));
  for (const std::int64_t c : {std::int64_t{cp_rank}, std::int64_t{2 * cp - 1 - cp_rank}}) {
    for (std::int64_t i = 0; i < chunk; ++i) out.push_back(c * chunk + i);
  }
  return out;
}

std::vector<std::vector<PositionRun>> sequence_shard_runs(std::int64_t seq_len, int cp, int sp) {
  const auto error = find_sequence_split_error(seq_len, cp);
  CPT_CHECK(!error, *error);
  CPT_CHECK(sp >= 1 && (seq_len / cp) % sp == 0, "sp ", sp, " must divide the ", seq_len / cp,
            " positions of a cp rank");
  const std::int64_t per_cp_rank = seq_len / cp, per_shard = per_cp_rank / sp;
  // A cp rank's positions as runs: its two chunks (cp > 1), or the whole sequence.
  const std::int64_t chunk = cp > 1 ? seq_len / (2 * cp) : seq_len;
  std::vector<std::vector<PositionRun>> shards;
  shards.reserve(static_cast<std::size_t>(cp) * static_cast<std::size_t>(sp));
  for (int c = 0; c < cp; ++c) {
    std::vector<std::int64_t> chunk_starts{std::int64_t{c} * chunk};
    if (cp > 1) chunk_starts.push_back(std::int64_t{2 * cp - 1 - c} * chunk);
    for (int s = 0; s < sp; ++s) {
      // The slice [begin, end) of the cp rank's positions, cut at its chunks' boundaries.
      const std::int64_t begin = s * per_shard, end = begin + per_shard;
      std::vector<PositionRun> runs;
      for (std::size_t i = 0; i < chunk_starts.size(); ++i) {
        const std::int64_t local_begin = static_cast<std::int64_t>(i) * chunk;
        const std::int64_t from = std::max(begin, local_begin), to = std::min(end, local_begin + chunk);
        if (from < to) runs.push_back({chunk_starts[i] + (from - local_begin), to - from});
      }
      shards.push_back(std::move(runs));
    }
  }
  return shards;
}

int max_runs_per_sequence_shard(int cp, int sp) {
  return cp > 1 && sp % 2 == 1 ? 2 : 1;
}

std::vector<std::int64_t> gathered_row_of_position(std::int64_t seq_len, int cp) {
  std::vector<std::int64_t> row(static_cast<std::size_t>(seq_len));
  std::int64_t next = 0;
  for (int r = 0; r < cp; ++r) {
    for (const std::int64_t p : sequence_positions_of_rank(seq_len, cp, r)) row[static_cast<std::size_t>(p)] = next++;
  }
  return row;
}

}  // namespace cpt::spec
