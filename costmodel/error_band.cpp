#include "costmodel/error_band.h"

#include <array>
#include <cstdio>

namespace cpt::cost {

namespace {

struct BandEntry {
  spec::Runtime runtime;
  const char* family;
  ErrorBand band;
};

// Generated as error_band.h says; each source is the only data behind its entry. The fsdp and
// Hopper entries are in-sample (the rows the runtime's scales and Hopper's curves were fitted to;
// fitted on half of them, the other half's errors spread alike: docs/benchmarks.md); vTrain's
// A100 runs were not fitted to.
constexpr std::array<BandEntry, 4> kBands{{
    {spec::Runtime::kFsdp, "ampere", {-0.076, 0.064, 139, "llm-foundry's FSDP tables, A100-40GB and 80GB, BF16"}},
    {spec::Runtime::kFsdp, "hopper", {-0.093, 0.072, 77, "llm-foundry's FSDP tables, H100, BF16 and FP8"}},
    {spec::Runtime::kMegatron, "hopper", {-0.096, 0.122, 26, "NeMo and Megatron-Bridge, H100, FP8 only"}},
    {spec::Runtime::kMegatron, "ampere", {-0.124, 0.107, 109, "vTrain's multi-node Megatron-DeepSpeed runs, A100"}},
}};

bool starts_with(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

}  // namespace

std::string gpu_family(const spec::GpuSpec& gpu) {
  if (starts_with(gpu.name, "a100")) return "ampere";
  if (starts_with(gpu.name, "h100") || starts_with(gpu.name, "h200")) return "hopper";
  if (starts_with(gpu.name, "b200")) return "blackwell";
  return "";
}

std::optional<ErrorBand> error_band(spec::Runtime runtime, const spec::GpuSpec& gpu) {
  const std::string family = gpu_family(gpu);
  for (const BandEntry& entry : kBands) {
    if (entry.runtime == runtime && family == entry.family && entry.band.rows > 0) return entry.band;
  }
  return std::nullopt;
}

StepTimeRange step_time_range(core::Seconds predicted, const ErrorBand& band) {
  return {predicted / (1 + band.p90), predicted / (1 + band.p10)};
}

std::string describe_band(core::Seconds predicted, spec::Runtime runtime, const spec::GpuSpec& gpu) {
  const std::string family = gpu_family(gpu);
  const auto band = error_band(runtime, gpu);
  if (!band) {
    return "no error band (no validation run of " + spec::to_string(runtime) + " on " +
           (family.empty() ? gpu.name : family) + "; docs/benchmarks.md)";
  }
  const StepTimeRange range = step_time_range(predicted, *band);
  char text[256];
  std::snprintf(text, sizeof text, "%.3g-%.3g s (p10-p90 of the error over %d %s runs on %s: %s)",
                range.shortest.value(), range.longest.value(), band->rows, spec::to_string(runtime).c_str(),
                family.c_str(), band->source);
  return text;
}

}  // namespace cpt::cost
