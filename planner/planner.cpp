#include "planner/planner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "costmodel/runtime_profile.h"
#include "costmodel/topology.h"

namespace cpt::planner {

cost::CostModelOptions pricing_options(const SearchOptions& o) {
  if (o.executor_only) return cost::as_run_by_cpt_executor(o.cost);
  return o.runtime ? cost::for_runtime(o.cost, *o.runtime) : o.cost;
}

using core::str_cat;

FinishInputs finish_inputs(const spec::ModelSpec& model, const SearchOptions& o) {
  return FinishInputs{o.tokens,   o.global_batch,
                      o.seq_len,  checkpoint_bytes(model, pricing_options(o)),
                      o.failures, o.recipe ? &*o.recipe : nullptr};
}

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
    case Objective::kTimeToTrain:
      return "time-to-train";
  }
  return "?";
}

namespace {

// The objective's score of a plan, higher is better. Time and cost for a fixed GPU count rank like
// throughput; they are kept separate because the reports show them and a multi-size search
// compares them. Time to train adds what finishing costs besides the steps (time_to_finish.h):
// the recipe's evaluations at one replica's speed, checkpoints and the failures of the plan's GPUs.
class Ranking {
 public:
  Ranking(const spec::ModelSpec& model, const SearchOptions& o) : options_(o), finish_(finish_inputs(model, o)) {}

  [[nodiscard]] double score(double tokens_per_s_per_gpu, core::Seconds step, const spec::ParallelConfig& p) const {
    const int gpus = p.world_size();
    const double tokens_per_s = tokens_per_s_per_gpu * gpus;
    const double budget = static_cast<double>(options_.tokens);
    switch (options_.objective) {
      case Objective::kThroughput:
      case Objective::kHeadroom:
        return tokens_per_s_per_gpu;
      case Objective::kTime:
        return -(options_.tokens > 0 ? budget / tokens_per_s : step.value());
      case Objective::kCost: {
        const double hours = (options_.tokens > 0 ? budget / tokens_per_s : step.value()) / 3600;
        return -hours * gpus * options_.price_per_gpu_hour;
      }
      case Objective::kTimeToTrain:
        return -time_to_finish(step.value(), gpus, p.dp, finish_).wall_s;
    }
    return 0;
  }

 private:
  const SearchOptions& options_;
  FinishInputs finish_;
};

// The ranking: score, then less memory, then fewer GPUs, then the index (unique within a size).
template <class C>
bool better(const C& a, const C& b, core::Bytes memory_a, core::Bytes memory_b) {
  if (a.score != b.score) return a.score > b.score;
  if (memory_a != memory_b) return memory_a < memory_b;
  if (a.config.world_size() != b.config.world_size()) return a.config.world_size() < b.config.world_size();
  return a.index < b.index;
}
bool better_ranked(const RankedCandidate& a, const RankedCandidate& b) {
  return better(a, b, a.estimate.peak_memory.total(), b.estimate.peak_memory.total());
}
bool better_candidate(const Candidate& a, const Candidate& b) {
  return better(a, b, a.estimate.peak_memory().total(), b.estimate.peak_memory().total());
}

}  // namespace

void check_options(const spec::ModelSpec& model, const SearchOptions& o) {
  if (o.global_batch < 1 || o.global_batch > spec::kMaxGlobalBatch) {
    throw core::ConfigError(
        str_cat("--global-batch: expected 1..", spec::kMaxGlobalBatch, " sequences, got ", o.global_batch));
  }
  if (o.seq_len < 1) throw core::ConfigError(str_cat("--seq-len: expected >= 1, got ", o.seq_len));
  if (o.seq_len > model.max_seq_len) {
    throw core::ConfigError(
        str_cat("--seq-len: expected at most the model's max_seq_len (", model.max_seq_len, "), got ", o.seq_len));
  }
  if (!(o.memory_margin >= 0 && o.memory_margin < 1)) {
    throw core::ConfigError(str_cat("--memory-margin: expected a fraction in [0, 1), got ", o.memory_margin));
  }
  if (o.objective == Objective::kTimeToTrain && o.tokens <= 0) {
    throw core::ConfigError(
        "--objective time-to-train: expected a token budget (--tokens, or TRAIN.json's steps, tokens or epochs), "
        "got none");
  }
  if (o.objective == Objective::kCost && o.price_per_gpu_hour <= 0) {
    throw core::ConfigError("--objective cost: expected a GPU-hour price (--price-per-gpu-hour), got none");
  }
  if (o.executor_only && (model.mlp != spec::MlpKind::kSwiGLU || model.norm != spec::NormKind::kRMSNorm ||
                          model.position != spec::PositionKind::kRoPE)) {
    throw core::ConfigError(str_cat("--for-executor: cpt's executor builds LLaMA-family models (swiglu, rmsnorm, ",
                                    "rope); model ", model.name, " has mlp ", spec::to_string(model.mlp), ", norm ",
                                    spec::to_string(model.norm), ", position ", spec::to_string(model.position)));
  }
}

namespace {

int thread_count(const SearchOptions& o) {
  if (o.threads > 0) return o.threads;
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

// What one worker finds in its share of the space.
struct WorkerResult {
  std::uint64_t evaluated = 0;
  std::uint64_t feasible = 0;
  std::array<std::uint64_t, kNumRejectReasons> rejected{};
  std::vector<RankedCandidate> feasible_list;
};

// Candidates [begin, end) of `space`: pruned, evaluated in search mode, kept when they fit `limit`.
void scan(const SearchSpace& space, std::uint64_t begin, std::uint64_t end, const PruneContext& ctx,
          const spec::ClusterSpec& cluster, const cost::Topology& topology, core::Bytes limit, const Ranking& ranking,
          std::map<LayoutKey, LayoutFacts>& facts_cache, WorkerResult& out) {
  for (std::uint64_t i = begin; i < end; ++i) {
    const spec::ParallelConfig p = space.at(i);
    auto reason = prune_shape(p, ctx);
    if (!reason) {
      const LayoutKey key = layout_key(p);
      auto it = facts_cache.find(key);
      if (it == facts_cache.end()) it = facts_cache.emplace(key, layout_facts(p, cluster.node.gpus_per_node)).first;
      reason = prune_layout(p, ctx, it->second);
    }
    if (reason) {
      ++out.rejected[static_cast<std::size_t>(*reason)];
      continue;
    }
    ++out.evaluated;
    const cost::SearchEstimate e = cost::evaluate_search(ctx.model, cluster, p, ctx.seq_len, ctx.options, topology);
    if (e.infeasible) {
      const auto why = *e.infeasible == cost::InfeasibleReason::kOutOfMemory ? RejectReason::kOutOfMemory
                                                                             : RejectReason::kUnsupported;
      ++out.rejected[static_cast<std::size_t>(why)];
      continue;
    }
    if (e.peak_memory.total() > limit) {
      ++out.rejected[static_cast<std::size_t>(RejectReason::kOutOfMemory)];
      continue;
    }
    ++out.feasible;
    out.feasible_list.push_back(RankedCandidate{i, p, e, ranking.score(e.tokens_per_s_per_gpu, e.time.total(), p)});
  }
}

// The three-way Pareto front (tokens/s of the job up, peak memory down, GPUs down) of `all`.
std::vector<const RankedCandidate*> pareto_members(const std::vector<RankedCandidate>& all) {
  std::vector<const RankedCandidate*> order;
  order.reserve(all.size());
  for (const auto& c : all) order.push_back(&c);
  auto job_rate = [](const RankedCandidate* c) { return c->estimate.tokens_per_s_per_gpu * c->config.world_size(); };
  // By memory up, then job throughput down, then GPUs up, then index: whatever could dominate a
  // candidate comes before it.
  std::sort(order.begin(), order.end(), [&](const RankedCandidate* a, const RankedCandidate* b) {
    const auto ma = a->estimate.peak_memory.total(), mb = b->estimate.peak_memory.total();
    if (ma != mb) return ma < mb;
    if (job_rate(a) != job_rate(b)) return job_rate(a) > job_rate(b);
    if (a->config.world_size() != b->config.world_size()) return a->config.world_size() < b->config.world_size();
    return a->index < b->index;
  });
  // The best job throughput seen so far at each GPU count (few counts: a linear scan is enough).
  std::vector<std::pair<int, double>> best_at;
  std::vector<const RankedCandidate*> front;
  for (const auto* c : order) {
    const int gpus = c->config.world_size();
    bool dominated = false;
    for (const auto& [g, rate] : best_at) dominated = dominated || (g <= gpus && rate >= job_rate(c));
    if (dominated) continue;
    front.push_back(c);
    auto it = std::find_if(best_at.begin(), best_at.end(), [&](const auto& x) { return x.first == gpus; });
    if (it == best_at.end())
      best_at.emplace_back(gpus, job_rate(c));
    else
      it->second = std::max(it->second, job_rate(c));
  }
  std::sort(front.begin(), front.end(), [](const RankedCandidate* a, const RankedCandidate* b) {
    if (a->config.world_size() != b->config.world_size()) return a->config.world_size() < b->config.world_size();
    return a->estimate.peak_memory.total() < b->estimate.peak_memory.total();
  });
  return front;
}

// The front as Candidates with full estimates: the same search-mode numbers, with every rank and
// stage (cost::evaluate with the closed-form pipeline).
// REQUIRES: topologies[i] was built from clusters[i].
std::vector<Candidate> pareto_front(const spec::ModelSpec& model, const std::vector<spec::ClusterSpec>& clusters,
                                    const std::vector<cost::Topology>& topologies,
                                    const std::vector<RankedCandidate>& all, const SearchOptions& o) {
  cost::CostModelOptions fast = pricing_options(o);
  fast.exact_pipeline = false;
  std::vector<Candidate> out;
  for (const auto* c : pareto_members(all)) {
    const auto cluster = std::find_if(clusters.begin(), clusters.end(),
                                      [&](const spec::ClusterSpec& x) { return x.num_gpus == c->config.world_size(); });
    CPT_CHECK(cluster != clusters.end(), "no cluster of ", c->config.world_size(), " GPUs");
    const auto& topology = topologies[static_cast<std::size_t>(cluster - clusters.begin())];
    const auto ev = cost::evaluate(model, *cluster, c->config, o.seq_len, fast, topology);
    CPT_CHECK(std::holds_alternative<cost::Estimate>(ev), "a feasible candidate became infeasible");
    out.push_back(Candidate{c->index, c->config, std::get<cost::Estimate>(ev), c->score});
  }
  return out;
}

// search() without the Pareto front (search_sizes builds one across sizes).
// REQUIRES: `topology` was built from `cluster`.
PlannerResult search_one(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const cost::Topology& topology,
                         const SearchOptions& o) {
  check_options(model, o);
  const auto t0 = std::chrono::steady_clock::now();
  PlannerResult result;
  const SearchSpace space(model, cluster, o.global_batch, o.fixed);
  // Search mode: closed-form pipeline, the device's calibrated overheads applied once.
  cost::CostModelOptions fast = cost::with_device_overheads(pricing_options(o), cluster.node.gpu);
  fast.exact_pipeline = false;
  const PruneContext ctx{model, cluster, o.seq_len, fast, o.executor_only, o.target};
  const double kept_free = std::max(o.memory_margin, o.objective == Objective::kHeadroom ? o.headroom : 0.0);
  const core::Bytes limit(
      static_cast<std::int64_t>(static_cast<double>(cluster.gpu().hbm_capacity.value()) * (1.0 - kept_free)));
  result.enumerated = space.size();
  const Ranking ranking(model, o);

  // Workers take blocks of candidates in turn; the merge sorts by a total order, so the result
  // does not depend on the number of threads or on timing.
  constexpr std::uint64_t kBlock = 4096;
  const int threads = static_cast<int>(
      std::min<std::uint64_t>(static_cast<std::uint64_t>(thread_count(o)), (space.size() + kBlock - 1) / kBlock));
  result.threads = std::max(1, threads);
  std::vector<WorkerResult> workers(static_cast<std::size_t>(result.threads));
  std::atomic<std::uint64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&](WorkerResult& out) {
    try {
      std::map<LayoutKey, LayoutFacts> facts_cache;  // per (degrees, axis order)
      for (;;) {
        const std::uint64_t begin = next.fetch_add(kBlock);
        if (begin >= space.size()) break;
        scan(space, begin, std::min(space.size(), begin + kBlock), ctx, cluster, topology, limit, ranking, facts_cache,
             out);
      }
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = space.size();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < result.threads; ++t) pool.emplace_back(work, std::ref(workers[static_cast<std::size_t>(t)]));
    work(workers[0]);
  }
  if (failure) std::rethrow_exception(failure);
  std::size_t total = 0;
  for (const auto& w : workers) total += w.feasible_list.size();
  result.all_feasible.reserve(total);
  for (auto& w : workers) {
    result.evaluated += w.evaluated;
    result.feasible += w.feasible;
    for (std::size_t r = 0; r < w.rejected.size(); ++r) result.rejected[r] += w.rejected[r];
    result.all_feasible.insert(result.all_feasible.end(), w.feasible_list.begin(), w.feasible_list.end());
  }
  std::sort(result.all_feasible.begin(), result.all_feasible.end(), better_ranked);

  // Re-rank the best candidates with the exact pipeline (schedule replay): walk the search-mode
  // ranking until 3·K of them are re-evaluated (the closed-form makespan can misorder near-ties;
  // its memory is an upper bound of the exact one, so none is lost to memory), or 50·K tried.
  const auto k = static_cast<std::size_t>(std::max(1, o.top_k));
  cost::CostModelOptions exact = fast;  // the search's options (device overheads, executor regime)
  exact.exact_pipeline = true;
  for (std::size_t j = 0; j < result.all_feasible.size() && result.top.size() < 3 * k && j < 50 * k; ++j) {
    const RankedCandidate& c = result.all_feasible[j];
    const auto ev = cost::evaluate(model, cluster, c.config, o.seq_len, exact, topology);
    if (const auto* e = std::get_if<cost::Estimate>(&ev); e != nullptr && e->peak_memory().total() <= limit) {
      result.top.push_back(
          Candidate{c.index, c.config, *e, ranking.score(e->tokens_per_s_per_gpu, e->time.total(), c.config)});
    }
  }
  std::sort(result.top.begin(), result.top.end(), better_candidate);
  if (result.top.size() > k) result.top.resize(k);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace

PlannerResult search(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<cost::Topology> topology;
  topology.emplace_back(cluster);
  PlannerResult result = search_one(model, cluster, topology.front(), o);
  result.pareto = pareto_front(model, {cluster}, topology, result.all_feasible, o);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

PlannerResult search_sizes(const spec::ModelSpec& model, const std::vector<spec::ClusterSpec>& clusters,
                           const SearchOptions& o) {
  CPT_CHECK(!clusters.empty(), "no cluster to search");
  const auto t0 = std::chrono::steady_clock::now();
  PlannerResult merged;
  std::vector<cost::Topology> topologies;
  for (const auto& cluster : clusters) {
    topologies.emplace_back(cluster);
    PlannerResult r = search_one(model, cluster, topologies.back(), o);
    merged.enumerated += r.enumerated;
    merged.evaluated += r.evaluated;
    merged.feasible += r.feasible;
    merged.threads = r.threads;
    for (std::size_t i = 0; i < r.rejected.size(); ++i) merged.rejected[i] += r.rejected[i];
    merged.best_per_size.emplace_back(cluster.num_gpus,
                                      r.top.empty() ? std::nullopt : std::optional<Candidate>(r.top.front()));
    merged.top.insert(merged.top.end(), r.top.begin(), r.top.end());
    merged.all_feasible.insert(merged.all_feasible.end(), r.all_feasible.begin(), r.all_feasible.end());
  }
  std::sort(merged.top.begin(), merged.top.end(), better_candidate);
  if (merged.top.size() > static_cast<std::size_t>(std::max(1, o.top_k))) {
    merged.top.resize(static_cast<std::size_t>(std::max(1, o.top_k)));
  }
  std::sort(merged.all_feasible.begin(), merged.all_feasible.end(), better_ranked);
  merged.pareto = pareto_front(model, clusters, topologies, merged.all_feasible, o);
  merged.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return merged;
}

}  // namespace cpt::planner
