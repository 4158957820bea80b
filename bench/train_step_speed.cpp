// Tokens/s of cpt's training step (executor/train/train_step.h: forward, backward, clipping,
// AdamW) for a catalog model on random tokens, on the CPU (fp32) or a CUDA device (bf16 autocast,
// fp32 master weights, as `cpt train` runs it). bench/train_step_vs_pytorch.sh runs it beside
// bench/pytorch_train_step.py (the same model and step in PyTorch eager from Python) with the same
// threads and batch; bench/gpu/session.sh does the same on a GPU; docs/benchmarks.md records both.
//
// MFU (with --peak-tflops, the device's dense peak for the precision) counts the model FLOPs per
// token as 6·P_matmul + 12·L·(a·d)·S (PaLM's convention: P_matmul the parameters that take part in
// matrix products, i.e. all but the embedding lookup, the LM head included; causal attention
// counted in full), so that it compares with published MFU and with the PyTorch script's number.
//
// usage: cpt_bench_train_step [--model cpt-25m] [--batch 4] [--seq 512] [--steps 10] [--warmup 2]
//                             [--threads 0] [--device cpu|cuda] [--peak-tflops T] [--json]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "executor/device.h"
#include "executor/model/llama_model.h"
#include "executor/train/adamw.h"
#include "executor/train/train_step.h"
#include "spec/model_catalog.h"

int main(int argc, char** argv) {
  using namespace cpt;
  std::string model_name = "cpt-25m";
  std::string device_name = "cpu";
  int batch = 4, seq = 512, steps = 10, warmup = 2, threads = 0;
  double peak_tflops = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model")
      model_name = next();
    else if (a == "--batch")
      batch = std::stoi(next());
    else if (a == "--seq")
      seq = std::stoi(next());
    else if (a == "--steps")
      steps = std::stoi(next());
    else if (a == "--warmup")
      warmup = std::stoi(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--device")
      device_name = next();
    else if (a == "--peak-tflops")
      peak_tflops = std::stod(next());
    else if (a == "--json")
      json = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (threads > 0) at::set_num_threads(threads);
  const auto found = spec::find_catalog_model(model_name);
  if (!found) {
    std::fprintf(stderr, "unknown model %s\n", model_name.c_str());
    return 2;
  }
  const auto& spec = found->spec;
  torch::Device device(torch::kCPU);
  try {
    device = exec::pick_device(device_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "--device: %s\n", e.what());
    return 2;
  }
  exec::LlamaModel model(spec);
  model->init_weights(1);
  model->to(device);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  auto solo = exec::make_solo_communicator("dp");
  const auto optimizer = exec::make_replicated_optimizer(named, {}, *solo, 25 << 20);
  torch::manual_seed(0);
  auto tokens = torch::randint(spec.vocab, {batch, seq + 1}, torch::kInt64);
  exec::Batch b{tokens.narrow(1, 0, seq).contiguous(),
                tokens.narrow(1, 1, seq).contiguous(),
                torch::arange(seq, torch::kInt64).unsqueeze(0).expand({batch, seq}).contiguous(),
                {},
                std::int64_t{batch} * seq,
                {}};
  const std::vector<exec::Batch> micro{b};
  double loss = 0;
  for (int i = 0; i < warmup; ++i) loss = exec::train_step(*model, *optimizer, micro, 1e-4, 1.0, device, *solo).loss;
  exec::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) loss = exec::train_step(*model, *optimizer, micro, 1e-4, 1.0, device, *solo).loss;
  exec::synchronize(device);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tps = static_cast<double>(steps) * batch * seq / s;
  // Model FLOPs per token (the header's convention).
  const double embedding = static_cast<double>(spec.vocab) * spec.hidden;
  const double matmul_params = static_cast<double>(spec.num_params()) - (spec.tied_embeddings ? 0.0 : embedding);
  const double flops_per_token =
      6 * matmul_params + 12.0 * spec.layers * static_cast<double>(spec.heads) * spec.head_dim() * seq;
  const double mfu = peak_tflops > 0 ? tps * flops_per_token / (peak_tflops * 1e12) : 0;
  const auto peak_mib = static_cast<double>(exec::peak_memory_bytes(device)) / (1 << 20);
  if (json) {
    std::printf(
        "{\"impl\": \"cpt\", \"model\": \"%s\", \"params\": %lld, \"device\": \"%s\", \"threads\": %d, "
        "\"batch\": %d, \"seq\": %d, \"steps\": %d, \"seconds\": %.4f, \"tokens_per_s\": %.1f, "
        "\"model_flops_per_token\": %.6g, \"mfu\": %.4f, \"peak_memory_mib\": %.1f, \"final_loss\": %.5f}\n",
        spec.name.c_str(), static_cast<long long>(spec.num_params()), device.str().c_str(), at::get_num_threads(),
        batch, seq, steps, s, tps, flops_per_token, mfu, peak_mib, loss);
  } else {
    std::printf(
        "cpt: %s (%lld params) on %s, %d threads, batch %d x %d: %.1f tokens/s (%.3f s/step)%s, peak %.0f MiB, "
        "loss %.4f\n",
        spec.name.c_str(), static_cast<long long>(spec.num_params()), device.str().c_str(), at::get_num_threads(),
        batch, seq, tps, s / steps, mfu > 0 ? (", MFU " + std::to_string(100 * mfu).substr(0, 5) + "%").c_str() : "",
        peak_mib, loss);
  }
  return 0;
}
