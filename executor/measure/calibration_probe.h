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

namespace cpt::exec {

// A linear layer's three GEMMs as training runs them, input [m, k] and weight [n, k]: forward
// x·Wᵀ, the input gradient g·W and the weight gradient gᵀ·x (each 2·m·n·k FLOPs; LibTorch picks a
// different kernel for each layout, and the transposed forms are what training dispatches).
struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // the mean of the three
};

struct AttentionMeasurement {  // the executor's causal attention_core on [batch, heads, seq, head_dim]
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
};

struct CrossEntropyMeasurement {
  std::int64_t tokens = 0, vocab = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
};

struct HostMeasurements {
  std::string device;       // "cpu", "cuda:0"
  std::string device_name;  // the CPU's model, or the CUDA device's name ("NVIDIA H200")
  std::string dtype;        // of the GEMMs and attention: "fp32" (CPU) or "bf16" (CUDA)
  int cores = 0;
  int threads = 0;          // intra-op threads the measurements used
  double memory_bytes = 0;  // the machine's (CPU) or the device's (CUDA)
  std::vector<GemmMeasurement> gemm;
  double copy_bytes_per_s = 0;    // read + write, counted once each
  double adamw_params_per_s = 0;  // fused AdamW on fp32 parameters
  std::vector<AttentionMeasurement> attention;
  // The executor's loss (cross_entropy_sum) over fp32 logits [tokens, vocab], per size.
  std::vector<CrossEntropyMeasurement> cross_entropy;
  // Seconds per dispatched operator (op_counter.h's count: ATen operators plus autograd nodes) of
  // a chain of element-wise operators on a 16 x 64 tensor, forward and backward.
  double seconds_per_dispatched_op = 0;
};

// Seconds per dispatched operator (op_counter.h's count) of a chain of element-wise operators on a
// 16 x 64 tensor on `device`, forward and backward with autograd; timed for about `seconds`.
double measure_dispatch_cost(double seconds, const torch::Device& device = torch::kCPU);

// About `seconds` in total, on `device` (a CUDA device: its own grid of LLaMA-sized shapes in bf16;
// executor/measure/timing.h's time_per_call_on); `progress(done, total)` after each measurement.
HostMeasurements measure_host(double seconds, const std::function<void(int, int)>& progress,
                              const torch::Device& device = torch::kCPU);

}  // namespace cpt::exec
