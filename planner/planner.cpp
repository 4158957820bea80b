#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/topology.h"

namespace cpt::planner {

using core::str_cat;

std::string to_string(Objective o) {
  switch (o) {
    case Objective::kThroughput:
      return "throughput";
    case Objective::kTime:
      return "time";
    case Objective::kCost:
      return "cost";
    case Objective::kHeadroom:
      return "headroom";
  }
  return "?";
}

namespace {

// Higher is better. Time and cost for a fixed GPU count rank like throughput; they are kept
// separate because the reports show them and a multi-size search (what-if) compares them.
double score_of(const cost::Estimate& e, const spec::ClusterSpec& cluster, const SearchOptions& o) {
  const double tokens_per_s = e.tokens_per_s_per_gpu * cluster.num_gpus;
  switch (o.objective) {
    case Objective::kThroughput:
    case Objective::kHeadroom:
      return e.tokens_per_s_per_gpu;
    case Objective::kTime:
      return -(o.tokens > 0 ? static_cast<double>(o.tokens) / tokens_per_s : e.time.total().value());
    case Objective::kCost: {
      const double hours = (o.tokens > 0 ? static_cast<double>(o.tokens) / tokens_per_s : e.time.total().value()) / 3600;
      return -hours * cluster.num_gpus * o.price_per_gpu_hour;
    }
  }
  return 0;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  const auto ma = a.estimate.peak_memory().total();
  const auto mb = b.estimate.peak_memory().total();
  if (ma != mb) return ma < mb;
  return a.index < b.index;
}

}  // namespace

PlannerResult search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& o) {
  if (o.global_batch < 1) throw core::ConfigError(str_cat("--global-batch: expected >= 1, got ", o.global_batch));
  if (o.seq_len < 1) throw core::ConfigError(str_cat("--seq-len: expected >= 1, got ", o.seq_len));
  if (o.seq_len > model.max_seq_len) {
    throw core::ConfigError(str_cat("--seq-len: expected at most the model's max_seq_len (", model.max_seq_len, "), got ",
                                    o.seq_len));
  }
  if (o.objective == Objective::kCost && o.price_per_gpu_hour <= 0) {
    throw core::ConfigError("--objective cost: expected a GPU-hour price (--price-per-gpu-hour), got none");
  }
  const auto t0 = std::chrono::steady_clock::now();
  PlannerResult result;
  const SearchSpace space(model, cluster, o.global_batch, o.fixed);
  const cost::Topology topology(cluster);
  cost::CostModelOptions fast = o.cost;
  fast.exact_pipeline = false;
  const PruneContext ctx{model, cluster, o.seq_len, fast};
  const core::Bytes limit(static_cast<std::int64_t>(static_cast<double>(cluster.gpu().hbm_capacity.value()) *
                                                    (o.objective == Objective::kHeadroom ? 1.0 - o.headroom : 1.0)));
  result.enumerated = space.size();
  std::map<std::array<int, 8>, LayoutFacts> facts_cache;  // per (degrees, axis order)
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const spec::ParallelConfig p = space.at(i);
    auto reason = prune_shape(p, ctx);
    if (!reason) {
      const std::array<int, 8> key{p.tp, p.cp, p.dp, p.pp, static_cast<int>(p.axis_order[0]),
                                   static_cast<int>(p.axis_order[1]), static_cast<int>(p.axis_order[2]),
                                   static_cast<int>(p.axis_order[3])};
      auto it = facts_cache.find(key);
      if (it == facts_cache.end()) it = facts_cache.emplace(key, layout_facts(p, cluster.node.gpus_per_node)).first;
      reason = prune_layout(p, ctx, it->second);
    }
    if (reason) {
      ++result.rejected[static_cast<std::size_t>(*reason)];
      continue;
    }
    ++result.evaluated;
    const auto ev = cost::evaluate(model, cluster, p, o.seq_len, fast, topology);
    if (const auto* inf = std::get_if<cost::Infeasible>(&ev)) {
      const auto why =
          inf->reason == cost::InfeasibleReason::kOutOfMemory ? RejectReason::kOutOfMemory : RejectReason::kUnsupported;
      ++result.rejected[static_cast<std::size_t>(why)];
      continue;
    }
    const auto& e = std::get<cost::Estimate>(ev);
    if (e.peak_memory().total() > limit) {
      ++result.rejected[static_cast<std::size_t>(RejectReason::kOutOfMemory)];
      continue;
    }
    ++result.feasible;
    result.all_feasible.push_back(Candidate{i, p, e, score_of(e, cluster, o)});
  }
  std::sort(result.all_feasible.begin(), result.all_feasible.end(), better);

  // Re-rank the best candidates with the exact pipeline (schedule replay): walk the search-mode
  // ranking until 3·K of them are re-evaluated (the closed-form makespan can misorder near-ties;
  // its memory is an upper bound of the exact one, so none is lost to memory), or 50·K tried.
  const auto k = static_cast<std::size_t>(std::max(1, o.top_k));
  for (std::size_t j = 0; j < result.all_feasible.size() && result.top.size() < 3 * k && j < 50 * k; ++j) {
    Candidate c = result.all_feasible[j];
    const auto ev = cost::evaluate(model, cluster, c.config, o.seq_len, o.cost, topology);
    if (const auto* e = std::get_if<cost::Estimate>(&ev); e != nullptr && e->peak_memory().total() <= limit) {
      c.estimate = *e;
      c.score = score_of(*e, cluster, o);
      result.top.push_back(c);
    }
  }
  std::sort(result.top.begin(), result.top.end(), better);
  if (result.top.size() > static_cast<std::size_t>(o.top_k)) result.top.resize(static_cast<std::size_t>(o.top_k));

  // Pareto front over (tokens/s per GPU up, peak memory down), from the search-mode estimates.
  std::vector<Candidate> by_memory = result.all_feasible;
  std::sort(by_memory.begin(), by_memory.end(), [](const Candidate& a, const Candidate& b) {
    const auto ma = a.estimate.peak_memory().total(), mb = b.estimate.peak_memory().total();
    if (ma != mb) return ma < mb;
    if (a.estimate.tokens_per_s_per_gpu != b.estimate.tokens_per_s_per_gpu) {
      return a.estimate.tokens_per_s_per_gpu > b.estimate.tokens_per_s_per_gpu;
    }
    return a.index < b.index;
  });
  double best_rate = -1;
  for (const auto& c : by_memory) {
    if (c.estimate.tokens_per_s_per_gpu > best_rate) {
      result.pareto.push_back(c);
      best_rate = c.estimate.tokens_per_s_per_gpu;
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace cpt::planner
