#pragma once
// advise(): which family of training frameworks wins for a model on a cluster, each family being a
// region of the search space:
//   ZeRO-2 (DeepSpeed)      pure data parallelism, ZeRO stage 2
//   ZeRO-3 / FSDP full      pure data parallelism, ZeRO stage 3 (fully sharded)
//   FSDP hybrid (HSDP)      ZeRO-3 inside a node, replicas across nodes
//   3D (Megatron-style)     tensor + pipeline (+ context) parallelism with ZeRO 0-1, no offload
// Each family is priced for the runtime that runs it (deepspeed, fsdp, fsdp, megatron;
// costmodel/runtime_profile.h) unless SearchOptions::runtime names one for all. Each family's best
// plan comes from the planner with the family's fields pinned, and is scored by
// the objective (default tokens/s per GPU); the winner and the reason (the time component where it
// gains most over the runner-up, or why the others do not fit) are reported. Scores are comparable
// only within one objective.

#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace cpt::planner {

struct FamilyResult {
  std::string family;                                // "ZeRO-2", "ZeRO-3 / FSDP full", "FSDP hybrid", "3D (Megatron)"
  spec::Runtime runtime = spec::Runtime::kMegatron;  // it was priced for
  std::optional<Candidate> best;                     // nullopt: no plan of this family fits
  std::string why_not;                               // when nothing fits: out of memory if anything was, else the most
                                                     // frequent rejection (RejectReason strings)
};

struct Advice {
  std::vector<FamilyResult> families;  // in the order above
  int winner = -1;                     // index into families, -1 when nothing fits
  std::string reason;                  // one sentence
};

Advice advise(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& options);

}  // namespace cpt::planner
