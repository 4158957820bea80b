// bench/published_accuracy: the cost model against the published numbers of tests/golden/
// (Rajbhandari et al. 2020 Table 1; Korthikanti et al. 2022 Table 5), as tables.
// Usage: build/bin/cpt_bench_published [path/to/tests/golden/published.json]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/memory_model.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

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

  std::printf("\nIteration time, A100, TP 8 (Korthikanti et al. 2022 Table 5)\n");
  std::printf("%-15s %-10s %9s %9s %7s %6s %8s\n", "model", "recompute", "paper s", "cpt s", "error", "MFU", "mem GiB");
  cost::CostModelOptions o;
  o.flash_attention = false;
  double sum = 0, worst = 0;
  int n = 0;
  for (const auto& row : g["korthikanti_table5"]["rows"]) {
    const auto model = spec::find_catalog_model(row["model"].get<std::string>())->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("a100-80g", row["gpus"].get<int>(), "--gpu");
    for (const bool sel : {true, false}) {
      spec::ParallelConfig p{.tp = 8, .pp = row["pp"], .virtual_stages = row["vp"], .micro_batch = row["micro_batch"],
                             .global_batch = row["global_batch"],
                             .recompute = sel ? spec::Recompute::kSelective : spec::Recompute::kFull,
                             .sequence_parallel = sel};
      p.schedule = p.virtual_stages > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
      const auto ev = cost::evaluate(model, cluster, p, 2048, o);
      const double paper = row[sel ? "selective_s" : "full_s"];
      if (const auto* inf = std::get_if<cost::Infeasible>(&ev)) {
        std::printf("%-15s %-10s %9.2f  INFEASIBLE: %s\n", model.name.c_str(), sel ? "SP+sel" : "full", paper,
                    inf->detail.c_str());
        continue;
      }
      const auto& e = std::get<cost::Estimate>(ev);
      const double t = e.time.total().value();
      const double err = (t - paper) / paper;
      sum += std::fabs(err);
      worst = std::max(worst, std::fabs(err));
      ++n;
      std::printf("%-15s %-10s %9.2f %9.2f %+6.1f%% %5.1f%% %8.1f\n", model.name.c_str(), sel ? "SP+sel" : "full",
                  paper, t, 100 * err, 100 * e.mfu, core::to_gibibytes(e.peak_memory().total()));
    }
  }
  std::printf("mean |error| %.1f%%, max %.1f%% over %d runs\n", 100 * sum / std::max(1, n), 100 * worst, n);
  return 0;
}
