#pragma once
// ParallelConfig: how one training step is laid out over the GPUs. Every field documents its
// default and its trade-off; derived values are functions, never stored, so they cannot disagree.
//
// Axes (docs/glossary.md): tp tensor, cp context, dp data, pp pipeline. The degree of an axis is its
// size; world size = tp·cp·dp·pp.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "spec/model_spec.h"

namespace cpt::spec {

// Serialized as "gpipe", "1f1b", "interleaved_1f1b", "zb_h1". DO NOT CHANGE the strings.
// kZeroBubbleH1: 1F1B with the backward split into input- and weight-gradient parts, the weight
// parts delayed to fill the bubble (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ZB-H1).
enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B, kZeroBubbleH1 };
// Serialized as "none", "selective", "full". DO NOT CHANGE the strings.
enum class Recompute { kNone, kSelective, kFull };
// Serialized as "none", "optimizer", "optimizer+params". DO NOT CHANGE the strings.
enum class Offload { kNone, kOptimizer, kOptimizerAndParams };
// Serialized as "tp", "cp", "dp", "pp". DO NOT CHANGE the strings.
enum class Axis { kTp, kCp, kDp, kPp };
inline constexpr int kNumAxes = 4;

std::string to_string(ScheduleKind k);
std::string to_string(Recompute r);
std::string to_string(Offload o);
std::string to_string(Axis a);

// The most sequences per optimizer step cpt plans: far beyond today's largest batches (thousands
// of sequences), and a bound on the pipeline schedules the cost model replays per step (an entry
// per microbatch).
inline constexpr int kMaxGlobalBatch = 1 << 20;

struct ParallelConfig {
  // Tensor-parallel degree. Splits attention heads and the MLP across GPUs with two all-reduces
  // (or reduce-scatter/all-gather with sequence_parallel) per block per pass; keep inside a node.
  // REQUIRES: heads % tp == 0, kv_heads % tp == 0.
  int tp = 1;
  // Context-parallel degree: splits the sequence; attention exchanges K/V around a ring.
  // REQUIRES: seq_len % (2·cp) == 0 when cp > 1 (load-balanced causal split).
  int cp = 1;
  // Data-parallel degree: replicas (or, with ZeRO, shards) that each see different sequences.
  int dp = 1;
  // Pipeline-parallel degree: consecutive layers on consecutive GPUs; costs a bubble of about
  // (pp−1)/(m+pp−1) of the step for m microbatches. REQUIRES: pp·virtual_stages <= layers.
  int pp = 1;
  // Model chunks per pipeline rank (interleaved 1F1B); divides the bubble by this number at the
  // price of more point-to-point traffic. REQUIRES: > 1 only with kInterleaved1F1B and pp > 1.
  int virtual_stages = 1;
  // Sequences per microbatch per dp rank. Larger: better GEMM efficiency, more activation memory.
  int micro_batch = 1;
  // Sequences per optimizer step over all dp ranks. REQUIRES: global_batch % (micro_batch·dp) == 0,
  // global_batch <= kMaxGlobalBatch.
  int global_batch = 1;
  // ZeRO stage: 0 replicated, 1 optimizer state sharded, 2 + gradients, 3 + parameters (gathered
  // before use, freed after), over the shard group.
  int zero_stage = 0;
  // HSDP: ZeRO-3 inside a node (shard group), plain replication across nodes (replicate group).
  // REQUIRES: zero_stage == 3.
  bool hybrid_shard = false;
  Recompute recompute = Recompute::kNone;
  // Megatron sequence parallelism: norms and dropout split over the sequence inside the tp group.
  // REQUIRES: tp > 1.
  bool sequence_parallel = false;
  // CPU offload. kOptimizerAndParams REQUIRES zero_stage == 3.
  Offload offload = Offload::kNone;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  // Rank order, fastest-varying axis first. The default keeps tp (then cp) inside a node.
  // REQUIRES: a permutation of {tp, cp, dp, pp}.
  std::array<Axis, kNumAxes> axis_order = {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp};
  // Expert parallelism (mixtures of experts only), Megatron-Core's "parallel folding": the expert
  // layers lay the tp·cp·dp ranks of a pipeline stage out again as etp × ep × expert-dp (etp
  // fastest), so attention keeps tp/cp/dp while the experts have their own degrees
  // (spec/rank_layout.h's expert groups, with a worked example). ep splits the routed experts
  // (each token's hidden state goes to its experts' ranks by an all-to-all, and back), etp splits
  // each expert's MLP like tp. REQUIRES: ep·etp divides tp·cp·dp, experts % ep == 0,
  // expert_ffn_hidden % etp == 0, pp the outermost axis. A mixture of experts with tp > 1 needs
  // sequence_parallel (Megatron-LM's rule) and is not sharded hybridly.
  int ep = 1;
  int etp = 1;

  // Derived.
  // REQUIRES: the product fits an int (find_parallel_config_errors checks it; a plan's degrees are
  // read in range).
  [[nodiscard]] int world_size() const { return tp * cp * dp * pp; }
  [[nodiscard]] int degree(Axis a) const;
  // Sequences of one microbatch round over all dp ranks, micro_batch·dp, in 64 bits: each factor
  // may be large while the product is not an int.
  [[nodiscard]] std::int64_t sequences_per_microbatch() const { return std::int64_t{micro_batch} * dp; }
  // Microbatches per optimizer step per dp rank (gradient accumulation steps); 0 when global_batch
  // is smaller than one round.
  [[nodiscard]] int grad_accum() const { return static_cast<int>(global_batch / sequences_per_microbatch()); }
  [[nodiscard]] int num_stages() const { return pp * virtual_stages; }
  // Ranks of a pipeline stage that hold the same expert shard (gradients summed, ZeRO shards spread
  // over them): tp·cp·dp / (ep·etp).
  [[nodiscard]] int expert_dp() const { return tp * cp * dp / (ep * etp); }
  // Whether the routed experts live like the rest of their layer: unsplit (ep = etp = 1) and
  // replicated over the same data-parallel ranks (tp = 1, so expert-dp is the cp·dp replicas).
  // Then their gradients join the layer's buckets and ZeRO-3 gathers them with their layer, as
  // cpt's executor runs them and torchtitan without expert parallelism; otherwise they are units
  // of their own over expert-dp.
  [[nodiscard]] bool experts_with_their_layer() const { return ep * etp == 1 && tp == 1; }
  // What every sequence length of a microbatch must be a multiple of, split over cp and, with
  // sequence parallelism, tp (spec::sequence_length_multiple).
  [[nodiscard]] int sequence_length_multiple() const;

  bool operator==(const ParallelConfig&) const = default;
};

// Every violated constraint of `c` against `model` (and `seq_len` and `world_size` when > 0), each
// a full sentence showing all the factors involved; empty when valid.
std::vector<std::string> find_parallel_config_errors(const ParallelConfig& c, const ModelSpec& model, int seq_len,
                                                     int world_size);

}  // namespace cpt::spec
