#pragma once
// What `cpt calibrate` measures through LibTorch, for costmodel/calibration_fit.h: GEMMs in a
// linear layer's three forms over a grid of training-like shapes (fp32 on a CPU, bf16 on a CUDA
// device), the causal attention kernel (SDPA) forward and backward, the cross-entropy over fp32
// logits forward and backward, the fixed cost of one dispatched operator, memory bandwidth (a large
// copy) and the fused AdamW step. The collectives: executor/measure/collective_probe.h.
#include <cstdint>
#include <array>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "spec/host_measurements.h"

namespace cpt::exec {

// The measurements' types are spec's (spec/host_measurements.h): cpt reads them back strictly.
using spec::AttentionMeasurement;
using spec::CrossEntropyMeasurement;
using spec::GemmMeasurement;
using spec::HostMeasurements;

// Seconds per dispatched operator (op_counter.h's count) of a chain of element-wise operators on a
// 16 x 64 tensor on `device`, forward and backward with autograd; timed for about `seconds`.
double measure_dispatch_cost(double seconds, const torch::Device& device = torch::kCPU);

// About `seconds` in total, on `device` (a CUDA device: its own grid of LLaMA-sized shapes in bf16;
// executor/measure/timing.h's time_per_call_on); `progress(done, total)` after each measurement.
HostMeasurements measure_host(double seconds, const std::function<void(int, int)>& progress,
                              const torch::Device& device = torch::kCPU);

}  // namespace cpt::exec
