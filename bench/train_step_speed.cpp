// Tokens/s of cpt's training step (executor/train/train_step.h: forward, backward, clipping,
// AdamW) for a catalog model on the CPU, on random tokens. bench/train_step_vs_pytorch.sh runs it
// beside bench/pytorch_train_step.py (the same model and step in PyTorch eager from Python) with the
// same threads and batch; docs/benchmarks.md records the results.
//
// usage: cpt_bench_train_step [--model cpt-25m] [--batch 4] [--seq 512] [--steps 10] [--warmup 2]
//                             [--threads 0] [--json]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "executor/model/llama_model.h"
#include "executor/train/adamw.h"
#include "executor/train/train_step.h"
#include "spec/model_catalog.h"

int main(int argc, char** argv) {
  using namespace cpt;
  std::string model_name = "cpt-25m";
  int batch = 4, seq = 512, steps = 10, warmup = 2, threads = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model") model_name = next();
    else if (a == "--batch") batch = std::stoi(next());
    else if (a == "--seq") seq = std::stoi(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--json") json = true;
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
  exec::LlamaModel model(spec);
  model->init_weights(1);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  auto solo = exec::make_solo_communicator("dp");
  const auto optimizer = exec::make_replicated_optimizer(named, {}, *solo, 25 << 20);
  torch::manual_seed(0);
  auto tokens = torch::randint(spec.vocab, {batch, seq + 1}, torch::kInt64);
  exec::Batch b{tokens.narrow(1, 0, seq).contiguous(), tokens.narrow(1, 1, seq).contiguous(),
                torch::arange(seq, torch::kInt64).unsqueeze(0).expand({batch, seq}).contiguous(), {},
                std::int64_t{batch} * seq};
  const std::vector<exec::Batch> micro{b};
  const torch::Device cpu(torch::kCPU);
  double loss = 0;
  for (int i = 0; i < warmup; ++i) loss = exec::train_step(*model, *optimizer, micro, 1e-4, 1.0, cpu, *solo).loss;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) loss = exec::train_step(*model, *optimizer, micro, 1e-4, 1.0, cpu, *solo).loss;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tps = static_cast<double>(steps) * batch * seq / s;
  if (json) {
    std::printf("{\"impl\": \"cpt\", \"model\": \"%s\", \"params\": %lld, \"threads\": %d, \"batch\": %d, \"seq\": %d, "
                "\"steps\": %d, \"seconds\": %.4f, \"tokens_per_s\": %.1f, \"final_loss\": %.5f}\n",
                spec.name.c_str(), static_cast<long long>(spec.num_params()), at::get_num_threads(), batch, seq, steps,
                s, tps, loss);
  } else {
    std::printf("cpt: %s (%lld params), %d threads, batch %d x %d: %.1f tokens/s (%.3f s/step), loss %.4f\n",
                spec.name.c_str(), static_cast<long long>(spec.num_params()), at::get_num_threads(), batch, seq, tps,
                s / steps, loss);
  }
  return 0;
}
