#pragma once
// SequenceSplit: which token positions of a sequence each context-parallel rank holds.
//
// The sequence of S tokens is cut into 2·cp chunks of S/(2·cp); rank r holds chunks r and
// 2·cp − 1 − r, in that order. Under a causal mask the early chunks attend to few keys and the late
// ones to many, so pairing chunk r with its mirror gives every rank the same attention work
// (Megatron-LM's and Llama 3's load-balanced split; Grattafiori et al. 2024 §3.3.2).
// Example: S = 8, cp = 2 -> chunks [0,2) [2,4) [4,6) [6,8); rank 0 holds positions 0 1 6 7,
// rank 1 holds 2 3 4 5.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cpt::spec {

// Why `seq_len` cannot be split over `cp` ranks (it must be a multiple of 2·cp), or std::nullopt.
std::optional<std::string> find_sequence_split_error(std::int64_t seq_len, int cp);

// The smallest multiple every sequence length split over `cp` context-parallel ranks and `sp`
// sequence-parallel ones (tp with sequence parallelism, else 1) must be: a multiple of 2·cp whose
// 1/cp divides by sp, so cp·lcm(2, sp) when cp > 1, else sp. Padded packing rounds its rows' width
// up to it. Example: cp 2, sp 3 -> 12; cp 2, sp 2 -> 4; cp 1, sp 2 -> 2. REQUIRES: cp, sp >= 1.
int sequence_length_multiple(int cp, int sp);

// The positions rank `cp_rank` holds, ascending within each of its two chunks (chunk r first).
// REQUIRES: find_sequence_split_error(seq_len, cp) is empty, 0 <= cp_rank < cp.
std::vector<std::int64_t> sequence_positions_of_rank(std::int64_t seq_len, int cp, int cp_rank);

// A run of consecutive positions [start, start + length) of a sequence.
struct PositionRun {
  std::int64_t start = 0;
  std::int64_t length = 0;
  bool operator==(const PositionRun&) const = default;
};

// The sequence shards of a microbatch's sequences under context parallelism over `cp` ranks and
// sequence parallelism over `sp` (tp with sequence parallelism, else 1). Shard g = cp_rank·sp +
// sp_rank holds the slice [sp_rank·L/sp, (sp_rank + 1)·L/sp) of its cp rank's L = seq_len/cp
// positions (chunk r, then chunk 2·cp − 1 − r: sequence_positions_of_rank), as one run per chunk it
// touches, ascending (runs of adjacent chunks are not merged). Every sequence is split alike.
// Example: seq_len 12, cp 2, sp 3 (chunks of 3): cp rank 0 holds 0 1 2 9 10 11, so shards 0-2 hold
// {[0,2)}, {[2,3) [9,10)}, {[10,12)}; cp rank 1 holds 3..8: {[3,5)}, {[5,6) [6,7)}, {[7,9)}.
// REQUIRES: find_sequence_split_error(seq_len, cp) is empty, sp >= 1 divides seq_len / cp.
std::vector<std::vector<PositionRun>> sequence_shard_runs(std::int64_t seq_len, int cp, int sp);

// The most runs a shard of sequence_shard_runs holds, whatever seq_len: 2 when cp > 1 and sp is odd
// (sp 1 holds both chunks; an odd sp puts a chunk boundary inside its middle shard), else 1 (an
// even sp cuts each chunk into sp/2 whole shards).
int max_runs_per_sequence_shard(int cp, int sp);

// Where the rows of an all-gather of every rank's tokens (rank 0's, then rank 1's, ...) go in the
// sequence: entry p is the gathered row that holds position p. REQUIRES: as above.
std::vector<std::int64_t> gathered_row_of_position(std::int64_t seq_len, int cp);

}  // namespace cpt::spec
