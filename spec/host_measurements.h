#pragma once
// What `cpt-exec calibrate-host` measured on one process (executor/measure/calibration_probe.h
// fills it; `cpt calibrate` fits the cost model to it): GEMMs in a linear layer's three forms,
// the causal attention kernel and the cross-entropy forward and backward, the cost of one
// dispatched operator, a large copy and the fused AdamW step. Its JSON is strict both ways: every
// key is required and unknown keys are errors, so a misspelt key is a one-line error naming it,
// not a measurement read as 0.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_reader.h"

namespace cpt::spec {

// A linear layer's three GEMMs as training runs them, input [m, k] and weight [n, k]: forward
// x·Wᵀ, the input gradient g·W and the weight gradient gᵀ·x (each 2·m·n·k FLOPs).
struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // the mean of the three
  bool operator==(const GemmMeasurement&) const = default;
};

struct AttentionMeasurement {  // the executor's causal attention_core on [batch, heads, seq, head_dim]
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  bool operator==(const AttentionMeasurement&) const = default;
};

struct CrossEntropyMeasurement {  // the executor's loss over fp32 logits [tokens, vocab]
  std::int64_t tokens = 0, vocab = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  bool operator==(const CrossEntropyMeasurement&) const = default;
};

struct HostMeasurements {
  std::string device;       // "cpu", "cuda:0"
  std::string device_name;  // the CPU's model, or the CUDA device's name ("NVIDIA H200")
  std::string dtype;        // of the GEMMs and attention: "fp32" (CPU) or "bf16" (CUDA)
  int cuda_devices = 0;     // visible to the process (0 on a CPU)
  int cores = 0;
  int threads = 0;          // intra-op threads the measurements used
  double memory_bytes = 0;  // the machine's (CPU) or the device's (CUDA)
  std::vector<GemmMeasurement> gemm;
  double copy_bytes_per_s = 0;    // read + write, counted once each
  double adamw_params_per_s = 0;  // fused AdamW on fp32 parameters
  std::vector<AttentionMeasurement> attention;
  std::vector<CrossEntropyMeasurement> cross_entropy;
  // Seconds per dispatched operator (ATen operators plus autograd nodes) of a chain of
  // element-wise operators on a 16 x 64 tensor, forward and backward.
  double seconds_per_dispatched_op = 0;
  bool operator==(const HostMeasurements&) const = default;
};

[[nodiscard]] core::Json to_json(const HostMeasurements& host);
// ConfigError "<origin>: $.<key>: expected ..., got ..." for a missing, misspelt or out-of-range
// key; `path` places `value` inside a larger document ("$.host").
[[nodiscard]] HostMeasurements host_measurements_from_json(const core::Json& value, const std::string& origin,
                                                           const std::string& path = "$");

// The mean of several processes' measurements of the same grid (`cpt calibrate` measures on
// every rank at once): every time and rate averaged, the shapes and the description the first's.
// REQUIRES: at least one; ConfigError when their grids differ.
[[nodiscard]] HostMeasurements average(const std::vector<HostMeasurements>& hosts);

}  // namespace cpt::spec
