#pragma once
// How far the cost model has been off on measured runs like the one it prices: the 10th and 90th
// percentile of the step-time error (predicted / measured − 1; negative: predicted faster than it
// ran) over the validation rows of the same runtime on the same GPU family. A prediction with a
// band reads "the step should take between step / (1 + p90) and step / (1 + p10)"; where no
// validation data covers the runtime and GPU family there is no band, and the reports say so
// rather than invent one.
//
// The table (error_band.cpp) is regenerated whenever the model or its fit changes:
//   build/bin/cpt_bench_published_fit ../shared/validation/published_runs/runs.jsonl --bands
//   build/bin/cpt_bench_vtrain   (megatron on Ampere: the multi-node set's "signed error" line)

#include <optional>
#include <string>

#include "core/units.h"
#include "spec/hardware_spec.h"
#include "spec/runtime.h"

namespace cpt::cost {

struct ErrorBand {
  double p10 = 0;  // of the step-time error
  double p90 = 0;
  int rows = 0;        // validation rows behind it
  const char* source;  // what they are, e.g. "llm-foundry's FSDP tables, BF16 and FP8"
};

// "ampere" (A100), "hopper" (H100, H200), "blackwell" (B200); "" for anything else (a CPU).
[[nodiscard]] std::string gpu_family(const spec::GpuSpec& gpu);

// The band of `runtime` on `gpu`'s family; nullopt where no validation data covers them.
[[nodiscard]] std::optional<ErrorBand> error_band(spec::Runtime runtime, const spec::GpuSpec& gpu);

// The step times the band puts a predicted step between: predicted / (1 + p90) (shortest) and
// predicted / (1 + p10) (longest).
struct StepTimeRange {
  core::Seconds shortest;
  core::Seconds longest;
};
[[nodiscard]] StepTimeRange step_time_range(core::Seconds predicted, const ErrorBand& band);

// One line for reports: "0.91-1.12 s (p10-p90 of the error over 77 fsdp runs on hopper: ...)",
// or "no error band (no validation run of deepspeed on hopper; ...)".
[[nodiscard]] std::string describe_band(core::Seconds predicted, spec::Runtime runtime, const spec::GpuSpec& gpu);

}  // namespace cpt::cost
