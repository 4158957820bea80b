// bench/simulate_speed: wall time of cost::sim::simulate_plan on large plans.
// Usage: build/bin/cpt_bench_simulate [repetitions]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "costmodel/sim/plan_simulation.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

int main(int argc, char** argv) {
  using namespace cpt;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  struct Case {
    const char* name;
    const char* model;
    const char* gpu;
    int gpus, seq;
    spec::ParallelConfig p;
  };
  const Case cases[] = {
      {"GPT-3 175B, 1,024 A100, TP8 PP8 DP16, 96 microbatches", "gpt3-175b", "a100", 1024, 2048,
       {.tp = 8, .dp = 16, .pp = 8, .micro_batch = 1, .global_batch = 1536, .zero_stage = 1,
        .recompute = spec::Recompute::kSelective, .sequence_parallel = true}},
      {"Llama 3.1 405B, 16,384 H100, TP8 PP16 v2 DP128", "llama3.1-405b", "h100", 16384, 8192,
       {.tp = 8, .dp = 128, .pp = 16, .virtual_stages = 2, .micro_batch = 1, .global_batch = 2048, .zero_stage = 1,
        .recompute = spec::Recompute::kFull, .sequence_parallel = true,
        .schedule = spec::ScheduleKind::kInterleaved1F1B}},
  };
  for (const auto& c : cases) {
    const auto model = spec::find_catalog_model(c.model)->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(c.gpu, c.gpus, "--gpu");
    const auto plan = spec::make_plan(model, cluster, spec::Workload{c.seq, 0}, c.p);
    const auto t0 = std::chrono::steady_clock::now();
    double step = 0;
    std::uint64_t events = 0;
    for (int i = 0; i < reps; ++i) {
      const auto sim = cost::sim::simulate_plan(plan);
      step = sim.result.step_time.value();
      events = sim.result.events;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("%-52s %8.2f ms per simulation (%llu events, step %.3f s)\n", c.name, ms,
                static_cast<unsigned long long>(events), step);
  }
  return 0;
}
