// bench/evaluate_speed: wall time of one cost-model evaluation (cost::evaluate) for representative
// configurations. Usage: build/bin/cpt_bench_evaluate [repetitions]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

int main(int argc, char** argv) {
  using namespace cpt;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  struct Case {
    const char* name;
    const char* model;
    const char* gpu;
    int gpus;
    spec::ParallelConfig p;
    int seq;
  };
  const Case cases[] = {
      {"22B, 8 A100, TP8", "megatron-22b", "a100", 8,
       {.tp = 8, .micro_batch = 4, .global_batch = 4, .recompute = spec::Recompute::kSelective, .sequence_parallel = true},
       2048},
      {"175B, 64 A100, TP8 PP8 v3", "megatron-175b", "a100", 64,
       {.tp = 8, .pp = 8, .virtual_stages = 3, .global_batch = 64, .recompute = spec::Recompute::kSelective,
        .sequence_parallel = true, .schedule = spec::ScheduleKind::kInterleaved1F1B},
       2048},
      {"Llama 3.1 405B, 16384 H100, TP8 PP16 DP128", "llama3.1-405b", "h100", 16384,
       {.tp = 8, .dp = 128, .pp = 16, .global_batch = 2048, .zero_stage = 1, .recompute = spec::Recompute::kFull,
        .sequence_parallel = true},
       8192},
  };
  for (const auto& c : cases) {
    const auto model = spec::find_catalog_model(c.model)->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(c.gpu, c.gpus, "--gpu");
    const auto t0 = std::chrono::steady_clock::now();
    double sink = 0;
    for (int i = 0; i < reps; ++i) {
      const auto ev = cost::evaluate(model, cluster, c.p, c.seq);
      if (const auto* e = std::get_if<cost::Estimate>(&ev)) sink += e->mfu;
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    // The same with the topology graph built once, as a search over one cluster does.
    const cost::Topology topology(cluster);
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      const auto ev = cost::evaluate(model, cluster, c.p, c.seq, cost::CostModelOptions{}, topology);
      if (const auto* e = std::get_if<cost::Estimate>(&ev)) sink += e->mfu;
    }
    const double us_cached = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / reps;
    // And with the closed-form pipeline a search uses.
    cost::CostModelOptions fast;
    fast.exact_pipeline = false;
    const auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      const auto ev = cost::evaluate(model, cluster, c.p, c.seq, fast, topology);
      if (const auto* e = std::get_if<cost::Estimate>(&ev)) sink += e->mfu;
    }
    const double us_fast = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t2).count() / reps;
    // And what the planner runs: the search evaluation (O(1) in pp, no allocation).
    const auto t3 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) sink += cost::evaluate_search(model, cluster, c.p, c.seq, fast, topology).mfu;
    const double us_search = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t3).count() / reps;
    std::printf("%-45s %9.1f us | topology built once %9.1f us | + closed-form pipeline %7.2f us | search evaluation "
                "%6.3f us (checksum %.3f)\n",
                c.name, us, us_cached, us_fast, us_search, sink / (4 * reps));
  }
  return 0;
}
