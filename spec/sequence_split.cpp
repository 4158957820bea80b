#include "spec/sequence_split.h"

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

std::vector<std::int64_t> gathered_row_of_position(std::int64_t seq_len, int cp) {
  std::vector<std::int64_t> row(static_cast<std::size_t>(seq_len));
  std::int64_t next = 0;
  for (int r = 0; r < cp; ++r) {
    for (const std::int64_t p : sequence_positions_of_rank(seq_len, cp, r)) row[static_cast<std::size_t>(p)] = next++;
  }
  return row;
}

}  // namespace cpt::spec
