// bench/planner_speed: the planner's search time and rates on the two reference cases, a
// mid-size one and two mixtures of experts (expert parallelism searched), on one worker thread and on all of them, and
// the cost model's own rate: every candidate that passes pruning evaluated once more by cost::evaluate_search on one
// core, "cold" (a fresh topology: each layout's groups are placed on the cluster graph inside the timed loop; building
// the graph itself, once per search, is timed apart) and "warm" (placements known). Usage: build/bin/cpt_bench_planner
// [repetitions]   (the best of the repetitions is shown)
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "costmodel/step_estimator.h"
#include "costmodel/topology.h"
#include "planner/planner.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace {

using namespace cpt;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The candidates that pass pruning, in search order.
std::vector<spec::ParallelConfig> pruned_stream(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                                const planner::SearchOptions& o) {
  const planner::SearchSpace space(model, cluster, o.global_batch, o.fixed);
  cost::CostModelOptions fast = o.cost;
  fast.exact_pipeline = false;
  const planner::PruneContext ctx{model, cluster, o.seq_len, fast};
  std::vector<spec::ParallelConfig> out;
  std::map<planner::LayoutKey, planner::LayoutFacts> facts;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const auto p = space.at(i);
    if (planner::prune_shape(p, ctx)) continue;
    const auto key = planner::layout_key(p);
    auto it = facts.find(key);
    if (it == facts.end()) it = facts.emplace(key, planner::layout_facts(p, cluster.node.gpus_per_node)).first;
    if (planner::prune_layout(p, ctx, it->second)) continue;
    out.push_back(p);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  struct Case {
    const char* name;
    const char* model;
    const char* gpu;
    int gpus, global_batch, seq;
  };
  const Case cases[] = {
      {"Llama 3.1 405B on 16,384 H100", "llama3.1-405b", "h100", 16384, 2048, 8192},
      {"GPT-3 175B on 1,024 A100", "gpt3-175b", "a100", 1024, 1536, 2048},
      {"Llama 3 70B on 64 H100", "llama3-70b", "h100", 64, 256, 8192},
      {"Qwen3-30B-A3B on 16 H100", "qwen3-30b-a3b", "h100", 16, 512, 4096},
      {"DeepSeek-V3 on 1,024 H100", "deepseek-v3", "h100", 1024, 4096, 4096},
  };
  const int hw = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  std::printf("%-30s | %9s %9s | %12s %10s | %8s %12s %12s | %s\n", "search", "1 thread", "threads", "candidates/s",
              "evaluated", "graph", "evals/s cold", "evals/s warm", "best plan");
  for (const auto& c : cases) {
    const auto model = spec::find_catalog_model(c.model)->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(c.gpu, c.gpus, "--gpu");
    planner::SearchOptions o;
    o.global_batch = c.global_batch;
    o.seq_len = c.seq;
    double one = 1e9, all = 1e9;
    planner::PlannerResult r;
    for (int i = 0; i < reps; ++i) {
      o.threads = 1;
      r = planner::search(model, cluster, o);
      one = std::min(one, r.seconds);
      o.threads = hw;
      r = planner::search(model, cluster, o);
      all = std::min(all, r.seconds);
    }
    // The cost model alone, one core, cold layout caches.
    const auto stream = pruned_stream(model, cluster, o);
    cost::CostModelOptions fast = o.cost;
    fast.exact_pipeline = false;
    double eval_s = 1e9, warm_s = 1e9, graph_s = 1e9, sink = 0;
    for (int i = 0; i < reps; ++i) {
      const auto tg = std::chrono::steady_clock::now();
      const cost::Topology topology(cluster);  // the cluster's graph: once per search, not per candidate
      graph_s = std::min(graph_s, seconds_since(tg));
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& p : stream) sink += cost::evaluate_search(model, cluster, p, c.seq, fast, topology).mfu;
      eval_s = std::min(eval_s, seconds_since(t0));
      // Again with every layout's placements known (as in what-if loops and repeated searches).
      const auto t1 = std::chrono::steady_clock::now();
      for (const auto& p : stream) sink += cost::evaluate_search(model, cluster, p, c.seq, fast, topology).mfu;
      warm_s = std::min(warm_s, seconds_since(t1));
    }
    const auto& best = r.top.front();
    std::printf(
        "%-30s | %8.3fs %8.3fs | %10.2f M %10llu | %6.1fms %10.2f M %10.2f M | tp%d cp%d pp%d v%d %s ep%d dp%d mb%d "
        "z%d %s, %.0f tok/s/GPU, "
        "MFU %.1f%% (checksum %.3g)\n",
        c.name, one, all, static_cast<double>(r.enumerated) / one / 1e6, static_cast<unsigned long long>(stream.size()),
        graph_s * 1e3, static_cast<double>(stream.size()) / eval_s / 1e6,
        static_cast<double>(stream.size()) / warm_s / 1e6, best.config.tp, best.config.cp, best.config.pp,
        best.config.virtual_stages, spec::to_string(best.config.schedule).c_str(), best.config.ep, best.config.dp,
        best.config.micro_batch, best.config.zero_stage, spec::to_string(best.config.recompute).c_str(),
        best.estimate.tokens_per_s_per_gpu, 100 * best.estimate.mfu, sink);
  }
  std::printf("(%d hardware threads; candidates/s and evals/s per core on one thread)\n", hw);
  return 0;
}
