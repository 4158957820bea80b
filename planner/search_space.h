#pragma once
// SearchSpace: every ParallelConfig the planner considers for one (model, cluster, workload), as
// one flat enumeration: each field has a list of values and candidate i is the mixed-radix digit
// string of i (the fastest digit is the last field), so there is one loop, a fixed order and a
// cheap count, instead of twelve nested loops (costmodel-reference §6, Calculon's anti-pattern).
//
// Values per field (before pruning, which rejects the combinations that cannot run, with reasons):
//   tp           divisors of gpus_per_node          cp        1, 2, 4, 8 (dividing the GPUs)
//   pp           divisors of GPUs/(tp·cp), <= layers dp        derived: GPUs / (tp·cp·pp)
//   pipeline     (vp, schedule): (1, 1f1b), (1, zb_h1), (2..8, interleaved_1f1b) for vp in 2, 3, 4, 6, 8
//                                                    micro_batch 1, 2, 4, ..., 64
//   zero         0..3, and 3 + HSDP                   recompute none, selective, full
//   sequence_parallel false, true                   offload   none, optimizer
//   axis order   tp-cp-dp-pp, tp-cp-pp-dp (mixtures of experts: tp-cp-dp-pp)
//   experts      (ep, etp): (1, 1) for dense models; ep over the divisors of the experts, etp 1, 2, 4, 8
// A `--fix` pins any field to one value.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spec/hardware_spec.h"
#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::planner {

// Pinned values, from `--fix tp=8,pp=4,zero=1,...` (keys: tp cp pp dp vp micro_batch zero hsdp
// recompute sequence_parallel offload schedule ep etp).
struct Fixed {
  std::map<std::string, std::string> values;
};
// Parses "k=v,k=v"; ConfigError naming --fix for an unknown key or a malformed value.
Fixed parse_fixed(const std::string& text);

class SearchSpace {
 public:
  // REQUIRES: cluster.num_gpus >= 1, global_batch >= 1.
  SearchSpace(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int global_batch, const Fixed& fixed);

  [[nodiscard]] std::uint64_t size() const { return size_; }
  // Candidate `index` in [0, size()). Only (tp, cp, pp) whose product divides the GPUs are listed,
  // so every index is a candidate.
  [[nodiscard]] spec::ParallelConfig at(std::uint64_t index) const;

 private:
  struct ParallelTriple {
    int tp, cp, pp;
  };
  std::vector<ParallelTriple> triples_;  // (tp, cp, pp) whose product divides the GPUs
  struct Pipeline {
    int vp;
    spec::ScheduleKind schedule;
  };
  std::vector<Pipeline> pipelines_;
  std::vector<int> micro_batch_;
  std::vector<std::pair<int, bool>> zero_;  // (stage, hsdp)
  std::vector<spec::Recompute> recompute_;
  std::vector<bool> sequence_parallel_;
  std::vector<spec::Offload> offload_;
  std::vector<std::array<spec::Axis, spec::kNumAxes>> orders_;
  std::vector<std::pair<int, int>> experts_;  // (ep, etp)
  int gpus_ = 0;
  int global_batch_ = 0;
  std::uint64_t size_ = 0;
};

}  // namespace cpt::planner
