// bench/planner_speed: the planner's search time and throughput on the two reference
// cases and a mid-size one. Usage: build/bin/cpt_bench_planner
#include <cstdio>

#include "planner/planner.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

int main() {
  using namespace cpt;
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
  };
  for (const auto& c : cases) {
    const auto model = spec::find_catalog_model(c.model)->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(c.gpu, c.gpus, "--gpu");
    planner::SearchOptions o;
    o.global_batch = c.global_batch;
    o.seq_len = c.seq;
    const auto r = planner::search(model, cluster, o);
    const auto& best = r.top.front();
    std::printf("%-32s %8.2f s  %7llu candidates (%9.0f/s)  %6llu evaluated (%8.0f/s)  %6llu feasible  best: tp%d cp%d pp%d "
                "v%d %s dp%d mb%d z%d, %.0f tokens/s/GPU, MFU %.1f%%\n",
                c.name, r.seconds, static_cast<unsigned long long>(r.enumerated),
                static_cast<double>(r.enumerated) / r.seconds, static_cast<unsigned long long>(r.evaluated),
                static_cast<double>(r.evaluated) / r.seconds, static_cast<unsigned long long>(r.feasible), best.config.tp,
                best.config.cp, best.config.pp, best.config.virtual_stages, spec::to_string(best.config.schedule).c_str(),
                best.config.dp, best.config.micro_batch,
                best.config.zero_stage, best.estimate.tokens_per_s_per_gpu, 100 * best.estimate.mfu);
  }
  return 0;
}
