#include "executor/measure/calibration_probe.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <vector>

#include "executor/measure/op_counter.h"
#include "executor/model/activation_checkpoint.h"
#include "executor/model/llama_model.h"
#include "executor/measure/timing.h"

namespace cpt::exec {

using Clock = std::chrono::steady_clock;

double measure_dispatch_cost(double seconds, const torch::Device& device) {
  // A chain of small element-wise operators with autograd, forward and backward, per operator and
  // autograd node as op_counter.h counts them.
  torch::AutoGradMode grad_mode(true);
  const auto on = torch::TensorOptions().device(device);
  auto x0 = torch::randn({16, 64}, on).requires_grad_(true);
  const auto w = torch::randn({16, 64}, on);
  auto chain = [&] {
    auto y = x0;
    for (int i = 0; i < 50; ++i) y = torch::silu(y * w + 0.5);
    y.sum().backward();
  };
  std::int64_t ops = 0;
  {
    OpCounter counter;
    chain();
    ops = counter.counts().top_level();
  }
  return time_per_call_on(device, chain, seconds, 3) / static_cast<double>(std::max<std::int64_t>(1, ops));
}

namespace {

// What is measured where: a CPU trains small to mid-size layers in fp32; a GPU LLaMA-sized ones in
// bf16 (the executor's autocast), so its grid reaches the 8k-16k-wide GEMMs and 8k-token sequences.
struct ProbeGrid {
  torch::ScalarType dtype;
  std::vector<std::int64_t> gemm_m, gemm_nk;  // tokens; in and out widths
  std::int64_t attention_batch, attention_heads, attention_kv_heads;
  std::vector<std::int64_t> attention_seq, attention_head_dim;
  std::int64_t copy_elements, adamw_params, ce_tokens;
  std::vector<std::int64_t> ce_vocab;
};

ProbeGrid grid_for(const torch::Device& device) {
  if (device.is_cuda()) {
    return {torch::kBFloat16,
            {1024, 4096, 16384},
            {256, 1024, 4096, 16384},
            2,
            32,
            8,
            {1024, 2048, 4096, 8192},
            {64, 128},
            1ll << 30,
            64ll << 20,
            8192,
            {4096, 32000, 128256}};
  }
  // Tokens x in x out from a tensor-parallel slice of K and V (32 wide) to 2,048 wide: the smallest
  // dimension, not only the size, sets a CPU GEMM's rate (spec::GpuSpec::gemm_efficiency_by_min_dim).
  // Attention: batch 4, 4 query heads on 2 key/value heads (GQA, as LLaMA models), causal. The
  // cross-entropy from a vocabulary whose logits stay in the core's caches to a LLaMA-sized one (4
  // to 128 MiB of logits): a CPU's rate per logit falls by several times between them.
  return {torch::kFloat32,       {128, 512, 2048}, {32, 128, 512, 2048}, 4,         4,    2,
          {128, 256, 512, 1024}, {16, 64},         32ll << 20,           4ll << 20, 1024, {1024, 4096, 16384, 32768}};
}

// The probe's progress: `report(done, total)` after each measurement.
struct Progress {
  const std::function<void(int, int)>& report;
  int total = 0;
  int done = 0;
  void advance() { report(++done, total); }
};

std::vector<std::array<std::int64_t, 3>> gemm_shapes(const ProbeGrid& grid) {
  std::vector<std::array<std::int64_t, 3>> shapes;
  for (const std::int64_t m : grid.gemm_m) {
    for (const std::int64_t n : grid.gemm_nk) {
      for (const std::int64_t k : grid.gemm_nk) shapes.push_back({m, n, k});
    }
  }
  return shapes;
}

// (seq, head_dim) of each attention measurement.
std::vector<std::array<std::int64_t, 2>> attention_shapes(const ProbeGrid& grid) {
  std::vector<std::array<std::int64_t, 2>> shapes;
  for (const std::int64_t seq : grid.attention_seq) {
    for (const std::int64_t d : grid.attention_head_dim) shapes.push_back({seq, d});
  }
  return shapes;
}

// Each GEMM shape's forward, input-gradient and weight-gradient products, their mean time.
void measure_gemms(HostMeasurements& h, const std::vector<std::array<std::int64_t, 3>>& shapes, double seconds,
                   const torch::TensorOptions& on, const torch::Device& device, Progress& progress) {
  const double per_gemm = seconds / static_cast<double>(shapes.size());
  for (const auto& [m, n, k] : shapes) {
    const auto x = torch::randn({m, k}, on);
    const auto w = torch::randn({n, k}, on);
    const auto g = torch::randn({m, n}, on);
    auto y = torch::empty({m, n}, on);
    auto dx = torch::empty({m, k}, on);
    auto dw = torch::empty({n, k}, on);
    // A GEMM above 1 GFLOP on a CPU (10 ms and more) is timed once after its warm-up, so the grid
    // stays within the budget; the small ones, noisier, at least three times.
    const int min_calls = !device.is_cuda() && 2.0 * static_cast<double>(m * n * k) > 1e9 ? 1 : 3;
    const double forward = time_per_call_on(
        device, [&] { torch::mm_out(y, x, w.t()); }, per_gemm / 3, min_calls);
    const double input_grad = time_per_call_on(
        device, [&] { torch::mm_out(dx, g, w); }, per_gemm / 3, min_calls);
    const double weight_grad = time_per_call_on(
        device, [&] { torch::mm_out(dw, g.t(), x); }, per_gemm / 3, min_calls);
    h.gemm.push_back({m, n, k, (forward + input_grad + weight_grad) / 3});
    progress.advance();
  }
}

// A device-to-device copy's bytes per second (read + write) and fused AdamW's parameters per
// second, each within `seconds`.
void measure_memory_and_adamw(HostMeasurements& h, const ProbeGrid& grid, double seconds,
                              const torch::TensorOptions& on, const torch::Device& device, Progress& progress) {
  const auto src = torch::ones({grid.copy_elements}, on);
  auto dst = torch::empty({grid.copy_elements}, on);
  h.copy_bytes_per_s = 2.0 * static_cast<double>(src.nbytes()) /
                       time_per_call_on(
                           device, [&] { dst.copy_(src); }, seconds, 3);
  progress.advance();
  const std::int64_t params = grid.adamw_params;
  const auto fp32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  std::vector<torch::Tensor> w{torch::randn({params}, fp32)}, g{torch::randn({params}, fp32)},
      m{torch::zeros({params}, fp32)}, v{torch::zeros({params}, fp32)}, steps{torch::zeros({}, fp32)};
  const double adam = time_per_call_on(
      device,
      [&] {
        steps[0].add_(1);
        at::_fused_adamw_(w, g, m, v, {}, steps, 1e-4, 0.9, 0.95, 0.1, 1e-8, false, false);
      },
      seconds, 3);
  h.adamw_params_per_s = static_cast<double>(params) / adam;
  progress.advance();
}

// The executor's own attention, forward and backward apart: backward timed alone on a graph built
// once (nothing accumulates into the inputs' .grad, as nothing does in training).
void measure_attention(HostMeasurements& h, const ProbeGrid& grid, double seconds, const torch::TensorOptions& on,
                       const torch::Device& device, Progress& progress) {
  const auto shapes = attention_shapes(grid);
  const double per_attention = seconds / static_cast<double>(shapes.size());
  for (const auto& [seq, d] : shapes) {
    const std::int64_t b = grid.attention_batch, a = grid.attention_heads, kv_heads = grid.attention_kv_heads;
    const auto q = torch::randn({b, a, seq, d}, on).requires_grad_(true);
    const auto key = torch::randn({b, kv_heads, seq, d}, on).requires_grad_(true);
    const auto value = torch::randn({b, kv_heads, seq, d}, on).requires_grad_(true);
    const auto grad = torch::randn({b, a, seq, d}, on);
    const double fwd = time_per_call_on(
        device, [&] { (void)attention_core(q, key, value, {}, /*gqa=*/true); }, per_attention / 2, 3);
    const auto out = attention_core(q, key, value, {}, /*gqa=*/true);
    const double bwd = time_per_call_on(
        device,
        [&] {
          (void)torch::autograd::grad({out}, {q, key, value}, {grad}, /*retain_graph=*/true);
        },
        per_attention / 2, 3);
    h.attention.push_back({b, a, kv_heads, seq, d, fwd, bwd});
    progress.advance();
  }
}

// Cross-entropy over [tokens, vocab] fp32 logits: the executor's loss (sum over tokens), each
// vocabulary within `seconds_each`. Timed as training runs it: the LM head has just written the
// logits (a copy into them), forward reads them, and backward follows at once and reads what
// forward saved. Forward is (write + forward) − write, backward (write + forward + backward) −
// (write + forward). (Forward timed hot in a loop overstated the rate, and backward timed after a
// cache flush understated it 2x on the tiny model, whose 16 MiB of logits stay in a 32 MiB L3
// between the two.)
void measure_cross_entropy(HostMeasurements& h, const ProbeGrid& grid, double seconds_each,
                           const torch::Device& device) {
  const auto fp32 = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  for (const std::int64_t vocab : grid.ce_vocab) {
    const std::int64_t tokens = grid.ce_tokens;
    const auto source = torch::randn({tokens, vocab}, fp32);
    const auto logits = torch::empty({tokens, vocab}, fp32).requires_grad_(true);
    const auto targets = torch::randint(vocab, {tokens}, torch::TensorOptions().device(device).dtype(torch::kLong));
    const auto write_logits = [&] {
      torch::NoGradGuard no_grad_write;
      logits.copy_(source);
    };
    const double t_write = time_per_call_on(device, write_logits, seconds_each, 3);
    const double t_forward = time_per_call_on(
        device,
        [&] {
          write_logits();
          (void)cross_entropy_sum(logits, targets);
        },
        seconds_each, 3);
    const double t_both = time_per_call_on(
        device,
        [&] {
          write_logits();
          (void)torch::autograd::grad({cross_entropy_sum(logits, targets)}, {logits});
        },
        seconds_each, 3);
    // Differences of separately timed loops: noise can make one tiny or negative, which would
    // price the loss at nothing. Each is held to at least a tenth of the loop it came from
    // (positive: every loop runs the work).
    const double forward = std::max(0.1 * t_forward, t_forward - t_write);
    const double backward = std::max(0.1 * t_both, t_both - t_write - forward);
    h.cross_entropy.push_back({tokens, vocab, forward, backward});
  }
}

}  // namespace

HostMeasurements measure_host(double seconds, const std::function<void(int, int)>& progress,
                              const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const ProbeGrid grid = grid_for(device);
  const auto on = torch::TensorOptions().device(device).dtype(grid.dtype);
  HostMeasurements h;
  h.device = device.str();
  h.device_name = device_name(device);
  h.dtype = grid.dtype == torch::kBFloat16 ? "bf16" : "fp32";
  h.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  h.threads = at::get_num_threads();
  h.memory_bytes = device.is_cuda()
                       ? static_cast<double>(device_memory_bytes(device))
                       : static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const auto shapes = gemm_shapes(grid);
  Progress steps{progress, static_cast<int>(shapes.size() + attention_shapes(grid).size()) + 4, 0};
  measure_gemms(h, shapes, seconds * 0.8, on, device, steps);
  measure_memory_and_adamw(h, grid, seconds * 0.1, on, device, steps);
  // The rest runs with autograd, as training does.
  torch::AutoGradMode grad_mode(true);
  measure_attention(h, grid, seconds * 0.1, on, device, steps);
  measure_cross_entropy(h, grid, seconds * 0.006, device);
  steps.advance();
  h.seconds_per_dispatched_op = measure_dispatch_cost(seconds * 0.04, device);
  steps.advance();
  return h;
}

}  // namespace cpt::exec
