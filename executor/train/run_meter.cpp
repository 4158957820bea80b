#include "executor/train/run_meter.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "core/order_statistics.h"

namespace cpt::exec {

namespace {

// The per-rank numbers finish() gathers, in the order of the gathered row.
enum RowField : std::int64_t {
  kWeights,
  kGrads,
  kOptimizer,
  kOptimizerCounters,
  kPeak,
  kTeacher,
  kEwc,
  kForwardOps,
  kBackwardNodes,
  kNestedOps,
  kCounted,             // 1 where the rank counted its first step's dispatch
  kCalls,               // 5 groups: tp, cp, dp, pp, ep
  kBytes = kCalls + 5,  // the same 5 groups
  kRowFields = kBytes + 5,
};

}  // namespace

RunMeter::RunMeter(const CommClocks& clocks, bool counts_dispatch)
    : clocks_(clocks), counts_dispatch_(counts_dispatch) {}

std::array<double, 5> RunMeter::waits_now() const {
  return {clocks_.tp.seconds, clocks_.cp.seconds, clocks_.dp.seconds, clocks_.pp.seconds, clocks_.ep.seconds};
}

void RunMeter::begin_step(bool first_of_process) {
  waits_at_start_ = waits_now();
  if (first_of_process && counts_dispatch_) {
    op_counter_.emplace();
    calls_at_start_ = {clocks_.tp.calls, clocks_.cp.calls, clocks_.dp.calls, clocks_.pp.calls, clocks_.ep.calls};
    bytes_at_start_ = {clocks_.tp.bytes, clocks_.cp.bytes, clocks_.dp.bytes, clocks_.pp.bytes, clocks_.ep.bytes};
  }
}

void RunMeter::end_step(double seconds, std::int64_t tokens, bool timed) {
  if (op_counter_) {
    const auto ops = op_counter_->counts();
    op_counter_.reset();
    spec::MeasuredDispatch d;
    d.forward_ops = ops.forward_ops;
    d.backward_nodes = ops.backward_nodes;
    d.nested_ops = ops.nested_ops;
    d.calls_per_step = {clocks_.tp.calls - calls_at_start_[0], clocks_.cp.calls - calls_at_start_[1],
                        clocks_.dp.calls - calls_at_start_[2], clocks_.pp.calls - calls_at_start_[3],
                        clocks_.ep.calls - calls_at_start_[4]};
    d.bytes_per_step = {clocks_.tp.bytes - bytes_at_start_[0], clocks_.cp.bytes - bytes_at_start_[1],
                        clocks_.dp.bytes - bytes_at_start_[2], clocks_.pp.bytes - bytes_at_start_[3],
                        clocks_.ep.bytes - bytes_at_start_[4]};
    first_step_dispatch_ = d;
  }
  if (!timed) return;
  const auto waits = waits_now();
  for (std::size_t g = 0; g < waits.size(); ++g) timed_waits_[g] += waits[g] - waits_at_start_[g];
  timed_seconds_.push_back(seconds);
  timed_tokens_ += tokens;
}

double RunMeter::tokens_per_s() const {
  double seconds = 0;
  for (const double s : timed_seconds_) seconds += s;
  return seconds > 0 ? static_cast<double>(timed_tokens_) / seconds : 0.0;
}

spec::MeasuredRun RunMeter::finish(const RunFacts& facts, Communicator& world, const spec::RankLayout& layout) const {
  const int processes = layout.world_size();
  // Each rank's model state, peak and first-step counts, and its seconds blocked per timed step.
  std::vector<std::int64_t> row(kRowFields, 0);
  row[kWeights] = facts.state.weights;
  row[kGrads] = facts.state.grads;
  row[kOptimizer] = facts.state.optimizer;
  row[kOptimizerCounters] = facts.state.optimizer_counters;
  row[kPeak] = facts.peak_memory_bytes;
  row[kTeacher] = facts.recipe.teacher;
  row[kEwc] = facts.recipe.ewc;
  if (first_step_dispatch_) {
    row[kForwardOps] = first_step_dispatch_->forward_ops;
    row[kBackwardNodes] = first_step_dispatch_->backward_nodes;
    row[kNestedOps] = first_step_dispatch_->nested_ops;
    row[kCounted] = 1;
    for (std::size_t g = 0; g < 5; ++g) {
      row[kCalls + g] = first_step_dispatch_->calls_per_step[g];
      row[kBytes + g] = first_step_dispatch_->bytes_per_step[g];
    }
  }
  auto all_rows = torch::empty({processes, kRowFields}, torch::kInt64);
  world.all_gather(torch::tensor(row, torch::kInt64), all_rows)->wait();
  const double timed_steps = std::max<double>(1.0, static_cast<double>(timed_seconds_.size()));
  std::vector<double> waits(5);
  for (std::size_t g = 0; g < 5; ++g) waits[g] = timed_waits_[g] / timed_steps;
  auto all_waits = torch::empty({processes, 5}, torch::kFloat64);
  world.all_gather(torch::tensor(waits, torch::kFloat64), all_waits)->wait();

  spec::MeasuredRun run;
  run.device = facts.device;
  run.processes = processes;
  run.steps = facts.steps;
  run.skipped_steps = facts.skipped_steps;
  run.tokens_per_s = tokens_per_s();
  run.tokens_per_s_per_gpu = run.tokens_per_s / processes;
  run.step_time_s = timed_seconds_.empty() ? 0.0
                                           : std::accumulate(timed_seconds_.begin(), timed_seconds_.end(), 0.0) /
                                                 static_cast<double>(timed_seconds_.size());
  run.step_time_median_s = timed_seconds_.empty() ? 0.0 : core::median(timed_seconds_);
  run.step_time_p90_s = timed_seconds_.empty() ? 0.0 : core::nearest_rank_quantile(timed_seconds_, 0.9);
  run.padded = facts.padded;
  run.final_loss = facts.final_loss;
  run.dp_bucket_bytes = facts.dp_bucket_bytes;
  const auto rows = all_rows.accessor<std::int64_t, 2>();
  const auto parts = all_waits.accessor<double, 2>();
  for (int r = 0; r < processes; ++r) {
    spec::MeasuredRank rank;
    const auto coord = layout.coord_of(r);
    rank.rank = r;
    rank.tp = coord.tp;
    rank.cp = coord.cp;
    rank.dp = coord.dp;
    rank.pp = coord.pp;
    rank.memory_bytes = {rows[r][kWeights], rows[r][kGrads],   rows[r][kOptimizer], rows[r][kOptimizerCounters],
                         rows[r][kPeak],    rows[r][kTeacher], rows[r][kEwc]};
    auto& p = rank.step_time_breakdown_s;
    p.tp_comm = parts[r][0];
    p.cp_comm = parts[r][1];
    p.dp_comm = parts[r][2];
    p.pp_comm_and_bubble = parts[r][3];
    p.ep_comm = parts[r][4];
    p.compute_and_other =
        std::max(0.0, run.step_time_s - p.tp_comm - p.cp_comm - p.dp_comm - p.ep_comm - p.pp_comm_and_bubble);
    if (rows[r][kCounted] != 0) {
      rank.dispatch = spec::MeasuredDispatch{
          rows[r][kForwardOps],
          rows[r][kBackwardNodes],
          rows[r][kNestedOps],
          {rows[r][kCalls], rows[r][kCalls + 1], rows[r][kCalls + 2], rows[r][kCalls + 3], rows[r][kCalls + 4]},
          {rows[r][kBytes], rows[r][kBytes + 1], rows[r][kBytes + 2], rows[r][kBytes + 3], rows[r][kBytes + 4]}};
    }
    run.ranks.push_back(rank);
  }
  return run;
}

}  // namespace cpt::exec
