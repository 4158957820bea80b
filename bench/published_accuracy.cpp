// bench/published_accuracy: the cost model against published numbers, as tables: Rajbhandari et
// al. 2020 Table 1 (tests/golden/published.json) and Korthikanti et al. 2022 Table 5
// (planner/paper_runs.h; `cpt validate --korthikanti` reports the same errors).
// Usage: build/bin/cpt_bench_published [path/to/tests/golden/published.json]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/memory_model.h"
#include "planner/paper_runs.h"

int main(int argc, char** argv) {
  using namespace cpt;
  const std::string path = argc > 1 ? argv[1] : "tests/golden/published.json";
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 2;
  }
  const auto g = nlohmann::json::parse(in);

  const auto& z = g["zero_table1"];
  std::printf("ZeRO model states, 7.5B parameters, DP 64 (Rajbhandari et al. 2020 Table 1)\n");
  std::printf("stage  paper GB  cpt GB\n");
  cost::CostModelOptions zo;
  zo.fp32_main_grads = false;
  for (int s = 0; s <= 3; ++s) {
    const auto m = cost::model_state_bytes(z["params"].get<double>(), s, z["dp"].get<int>(), zo);
    std::printf("%5d  %8.1f  %6.2f\n", s, z["GB_by_stage"][static_cast<std::size_t>(s)].get<double>(),
                static_cast<double>((m.weights + m.grads + m.optimizer).value()) / 1e9);
  }

  std::printf("\nIteration time, A100, TP 8 (Korthikanti et al. 2022 Table 5; planner/paper_runs.h)\n");
  std::printf("%-36s %9s %9s %7s %8s\n", "run", "paper s", "cpt s", "error", "mem GiB");
  double sum = 0, worst = 0;
  int n = 0;
  for (const auto& check : planner::check_korthikanti_runs(cost::CostModelOptions{})) {
    if (check.outcome != planner::RunOutcome::kCompared) {
      std::printf("%-36s %9.2f  %s: %s\n", check.id.c_str(), check.measured, planner::to_string(check.outcome).c_str(),
                  check.detail.c_str());
      continue;
    }
    sum += std::fabs(check.error);
    worst = std::max(worst, std::fabs(check.error));
    ++n;
    std::printf("%-36s %9.2f %9.2f %+6.1f%% %8.1f\n", check.id.c_str(), check.measured, check.predicted,
                100 * check.error, check.predicted_peak_memory_gib);
  }
  std::printf("mean |error| %.1f%%, max %.1f%% over %d runs\n", 100 * sum / std::max(1, n), 100 * worst, n);
  return 0;
}
