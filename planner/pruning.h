#pragma once
// Pruning: the cheap, necessary conditions a candidate must meet before its time is computed, each
// with a reason that the planner counts and shows. The rules restate spec's ParallelConfig rules as
// codes (a test checks that every candidate passing them is valid for spec), plus rules that only
// a search needs: redundant duplicates and a memory lower bound.

#include <array>
#include <optional>
#include <string>

#include "costmodel/cost_options.h"
#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"
#include "spec/runtime.h"

namespace cpt::planner {

// Serialized in `cpt plan --json` as the strings of to_string. DO NOT CHANGE them.
enum class RejectReason {
  kHeadsNotDivisible,    // heads % tp
  kKvHeadsNotDivisible,  // kv_heads % tp
  kFfnNotDivisible,      // ffn_hidden % tp
  kStagesExceedLayers,   // pp·vp > layers
  kInterleaveShape,      // vp > 1 needs pp >= 2 and microbatches % pp == 0
  kBatchNotDivisible,    // global_batch % (micro_batch·dp)
  kTpCpAcrossNodes,      // tp·cp > GPUs per node: TP and CP stay inside a node
  kSeqNotDivisible,      // seq_len % (2·cp) with cp > 1
  kRedundant,            // the same execution as another candidate (SP without TP, ZeRO without a shard
                         // group, HSDP whose shard group is the whole dp group, offload without ZeRO,
                         // the second axis order when dp or pp is 1)
  kHybridShardSplit,     // HSDP shard groups of unequal size
  kModelStateMemory,     // weights + grads + optimizer alone exceed the HBM (lower bound)
  kOutOfMemory,          // the full memory model exceeds the HBM
  kUnsupported,          // a combination the cost model does not cover
  kNotRunByExecutor,     // with `executor_only`: a layout cpt's executor refuses (ZeRO-3 with a
                         // pipeline, parameter offload, hybrid sharding with cp > 1, tied
                         // embeddings split over stages, sequence parallelism whose tokens per
                         // cp rank do not split over tp)
  kExpertsDoNotFold,     // ep·etp does not divide a stage's tp·cp·dp ranks (spec/rank_layout.h)
  kNotRunByTarget,       // with `target`: a layout the framework's export does not run as planned
                         // (export_gaps.h)
};
inline constexpr int kNumRejectReasons = 16;
std::string to_string(RejectReason r);

struct PruneContext {
  const spec::ModelSpec& model;
  const spec::ClusterSpec& cluster;
  int seq_len;
  const cost::CostModelOptions& options;
  bool executor_only = false;  // keep only what cpt's own executor runs (`cpt plan --for-executor`)
  std::optional<spec::Runtime> target = std::nullopt;  // keep only what this framework runs as planned (`--target`)
};

// What pruning needs of a rank layout (from spec::RankLayout::dp_node_runs); it depends only on the
// degrees and the axis order, so a search computes it once per layout (O(world size) work).
struct LayoutFacts {
  bool hybrid_shard_uneven = false;  // RankLayout::find_hybrid_shard_error with hybrid sharding
  bool dp_spans_nodes = false;       // some dp group spans more than one node
  int shard_group = 1;               // RankLayout::zero_shard_group_size without hybrid sharding
  int hybrid_shard_group = 1;        // the same with hybrid sharding
};
LayoutFacts layout_facts(const spec::ParallelConfig& config, int gpus_per_node);
// What layout_facts depends on: the degrees and the axis order (a search's cache key).
using LayoutKey = std::array<int, 8>;
LayoutKey layout_key(const spec::ParallelConfig& config);

// The first rule `config` breaks, or std::nullopt when the cost model should evaluate it; in two
// steps, so that the O(world size) layout facts are computed only for candidates that pass the
// divisibility and redundancy rules.
std::optional<RejectReason> prune_shape(const spec::ParallelConfig& config, const PruneContext& context);
std::optional<RejectReason> prune_layout(const spec::ParallelConfig& config, const PruneContext& context,
                                         const LayoutFacts& facts);

}  // namespace cpt::planner
