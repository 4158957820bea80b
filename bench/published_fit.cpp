// The fit behind the Hopper efficiency curves (hardware_profiles/gpus/h100_sxm5_80gb.json and its
// kin) and the PyTorch runtimes' kernel scales (costmodel/runtime_profile.h): a coordinate search
// that minimises the mean absolute step-time error over the published runs of
// ../shared/validation/published_runs/runs.jsonl, each priced for its own runtime.
//
// Usage: build/bin/cpt_bench_published_fit RUNS.jsonl [--check | --split | --bands]
//   --check  only report the error of the values in the profiles and runtime_profile.h (what
//            `cpt validate` reports), without searching
//   --split  fit on the even rows only and report the odd ones apart (an out-of-sample check)
//   --bands  the 10th and 90th percentile of the profiled values' step-time error per runtime and
//            GPU family: costmodel/error_band.cpp's table
//
// Five parameters, each physical and shared by every row it applies to:
//   hopper_gemm       Hopper's GEMM efficiency as a multiple of the A100 curve
//                     (CostModelOptions::gemm_efficiency), every precision
//   hopper_attention  Hopper's attention efficiency as a multiple of the A100 attention curve
//   fsdp_attention    CostModelOptions::attention_kernel_scale of the fsdp runtime
//   torch_memory      CostModelOptions::memory_traffic_scale of fsdp (and torchtitan)
//   torch_fp8         CostModelOptions::fp8_gemm_scale of fsdp (and torchtitan)
// Megatron-LM's scales stay 1 (the reference the curves describe). The search starts from 1 and
// sweeps each parameter over [0.3, 3] in steps of 0.02, four rounds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/order_statistics.h"
#include "costmodel/error_band.h"
#include "costmodel/runtime_profile.h"
#include "costmodel/step_estimator.h"
#include "planner/published_run.h"
#include "planner/validation.h"
#include "spec/hardware_catalog.h"

namespace {

using namespace cpt;

struct Parameters {
  double hopper_gemm = 1, hopper_attention = 1, fsdp_attention = 1, torch_memory = 1, torch_fp8 = 1;
};

struct Row {
  planner::PublishedRun run;
  spec::ClusterSpec cluster;  // the catalog's, Hopper curves cleared for the search
  bool hopper = false;
};

std::vector<spec::EfficiencyPoint> scaled(const cost::EfficiencyCurve& curve, double scale) {
  std::vector<spec::EfficiencyPoint> points;
  for (const auto& p : curve.points) points.push_back({p.gflops, p.efficiency * scale});
  return points;
}

// The row's step-time error (measured / predicted throughput − 1); nullopt when predicted out of
// memory or not modelled.
std::optional<double> error_of(const Row& row, const Parameters& k, bool as_profiled) {
  cost::CostModelOptions o = planner::options_for_run(row.run, {});
  spec::ClusterSpec cluster = row.cluster;
  if (!as_profiled) {
    if (row.run.runtime == spec::Runtime::kFsdp) {
      o.attention_kernel_scale = k.fsdp_attention;
      o.memory_traffic_scale = k.torch_memory;
      o.fp8_gemm_scale = k.torch_fp8;
    }
    if (row.hopper) {
      auto& gpu = cluster.node.gpu;
      for (auto& curve : gpu.gemm_efficiency) curve = scaled(o.gemm_efficiency, k.hopper_gemm);
      gpu.attention_efficiency[static_cast<std::size_t>(spec::Precision::kBf16)] =
          scaled(o.attention_efficiency, k.hopper_attention);
    }
  }
  const auto evaluation = cost::evaluate(row.run.model, cluster, row.run.parallel, row.run.seq_len, o);
  const auto* estimate = std::get_if<cost::Estimate>(&evaluation);
  if (!estimate || row.run.not_modelled) return std::nullopt;
  if (row.run.tokens_per_s_per_gpu) return *row.run.tokens_per_s_per_gpu / estimate->tokens_per_s_per_gpu - 1;
  return *row.run.model_tflops_per_gpu / estimate->model_tflops_per_gpu - 1;
}

double mean_absolute_error(const std::vector<Row>& rows, const Parameters& k) {
  double sum = 0;
  int compared = 0;
  for (const Row& row : rows) {
    if (const auto e = error_of(row, k, false)) {
      sum += std::abs(*e);
      ++compared;
    }
  }
  return compared ? sum / compared : 0;
}

void report(const std::vector<Row>& rows, const Parameters& k, bool as_profiled) {
  struct Sums {
    int compared = 0, out_of_memory = 0;
    double signed_sum = 0, absolute_sum = 0;
  };
  std::map<std::string, Sums> groups;
  for (const Row& row : rows) {
    Sums& s = groups[row.run.group];
    const auto e = error_of(row, k, as_profiled);
    if (!e) {
      ++s.out_of_memory;
      continue;
    }
    ++s.compared;
    s.signed_sum += *e;
    s.absolute_sum += std::abs(*e);
  }
  for (const auto& [group, s] : groups) {
    std::printf("  %-36s %3d compared  mean %+6.1f%%  mean |error| %5.1f%%  predicted OOM %d\n", group.c_str(),
                s.compared, 100 * s.signed_sum / std::max(1, s.compared),
                100 * s.absolute_sum / std::max(1, s.compared), s.out_of_memory);
  }
}

void print_bands(const std::vector<Row>& rows) {
  std::map<std::string, std::vector<double>> errors;  // by "runtime family"
  for (const Row& row : rows) {
    const auto e = error_of(row, {}, true);
    if (!e) continue;
    const std::string family = cost::gpu_family(row.cluster.gpu());
    errors[spec::to_string(row.run.runtime) + " " + (family.empty() ? "?" : family)].push_back(*e);
  }
  for (const auto& [key, values] : errors) {
    std::printf("  %-16s %3zu rows  p10 %+.3f  p90 %+.3f\n", key.c_str(), values.size(),
                core::linear_quantile(values, 0.1), core::linear_quantile(values, 0.9));
  }
}

Parameters fit(const std::vector<Row>& rows) {
  Parameters k;
  double* parameters[] = {&k.hopper_gemm, &k.hopper_attention, &k.fsdp_attention, &k.torch_memory, &k.torch_fp8};
  for (int round = 0; round < 4; ++round) {
    for (double* parameter : parameters) {
      double best = *parameter, best_error = mean_absolute_error(rows, k);
      for (int step = 0; step <= 135; ++step) {
        *parameter = 0.3 + 0.02 * step;
        if (const double e = mean_absolute_error(rows, k); e < best_error) {
          best_error = e;
          best = *parameter;
        }
      }
      *parameter = best;
    }
    std::printf(
        "round %d: hopper_gemm %.2f hopper_attention %.2f fsdp_attention %.2f torch_memory %.2f torch_fp8 %.2f"
        " -> mean |error| %.2f%%\n",
        round + 1, k.hopper_gemm, k.hopper_attention, k.fsdp_attention, k.torch_memory, k.torch_fp8,
        100 * mean_absolute_error(rows, k));
  }
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUNS.jsonl [--check]\n", argv[0]);
    return 2;
  }
  std::vector<Row> rows;
  for (auto& run : planner::read_published_runs(argv[1])) {
    if (run.not_modelled) continue;
    Row row{run, spec::HardwareCatalog::builtin().cluster_for_gpu(run.gpu, run.gpus, "gpu_class"), false};
    row.hopper = row.cluster.gpu().name.rfind("h100", 0) == 0 || row.cluster.gpu().name.rfind("h200", 0) == 0;
    rows.push_back(std::move(row));
  }
  std::printf("as profiled (hardware_profiles, runtime_profile.h):\n");
  report(rows, {}, true);
  if (argc > 2 && std::strcmp(argv[2], "--check") == 0) return 0;
  if (argc > 2 && std::strcmp(argv[2], "--bands") == 0) {
    std::printf("step-time error bands (p10, p90) per runtime and GPU family:\n");
    print_bands(rows);
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[2], "--split") == 0) {
    std::vector<Row> even, odd;
    for (std::size_t i = 0; i < rows.size(); ++i) (i % 2 == 0 ? even : odd).push_back(rows[i]);
    const Parameters k = fit(even);
    std::printf("fitted on the even rows; the odd rows:\n");
    report(odd, k, false);
    return 0;
  }
  const Parameters k = fit(rows);
  std::printf("fitted:\n");
  report(rows, k, false);
  return 0;
}
