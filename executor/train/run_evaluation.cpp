#include "executor/train/run_evaluation.h"

#include <algorithm>

#include "executor/device.h"

namespace cpt::exec {

RunEvaluator::RunEvaluator(const RunInputs& inputs, const LoaderOptions& loader, const torch::Device& device,
                           const ContextParallel& cp, RankModel& rank, bool evaluates)
    : inputs_(inputs), loader_(loader), device_(device), cp_(cp), rank_(rank), evaluates_(evaluates) {}

double RunEvaluator::loss_sum(const Batch& whole) {
  const Batch b = context_parallel_slice(whole, cp_);
  double sum = rank_.pipeline ? rank_.pipeline->loss_sum(b) : rank_.first()->loss_sum(b).item<double>();
  if (cp_.active()) {  // each cp rank holds the loss of its tokens
    auto t = torch::tensor({sum}, torch::kFloat64);
    cp_.group->all_reduce_sum(t)->wait();
    sum = t.item<double>();
  }
  return sum;
}

double RunEvaluator::mean_loss(const DataSource& source, std::int64_t sequences, std::int64_t* tokens_out) {
  torch::NoGradGuard no_grad;
  std::vector<torch::nn::Module*> modules;
  for (auto& chunk : rank_.chunks) modules.push_back(chunk.get());
  const EvalModeGuard evaluation(modules);
  AutocastGuard autocast(device_);
  LoaderOptions o = loader_;
  o.shuffle = false;
  DataLoader loader({source}, o);
  sequences = std::min(sequences, loader.units(0));
  double loss = 0;
  std::int64_t tokens = 0;
  auto add = [&](const Batch& cpu) {
    const auto b = cpu.to(device_);
    loss += loss_sum(b);
    tokens += b.loss_tokens;
  };
  const std::int64_t full = sequences / o.micro_batch;
  for (std::int64_t i = 0; i < full; ++i) add(loader.next());
  if (const auto rest = sequences - full * o.micro_batch; rest > 0) {
    LoaderOptions r = o;
    r.micro_batch = static_cast<int>(rest);
    DataLoader tail({source}, r);
    tail.skip(full * o.micro_batch);
    add(tail.next());
  }
  *tokens_out = tokens;
  return tokens > 0 ? loss / static_cast<double>(tokens) : 0.0;
}

void RunEvaluator::evaluate(std::int64_t step, RunLog& log) {
  if (!evaluates_) return;  // replicas are identical
  for (std::size_t i = 0; i < inputs_.eval.size(); ++i) {
    std::int64_t tokens = 0;
    const double loss = mean_loss(inputs_.eval[i], inputs_.eval_sequences[i], &tokens);
    log.eval(step, inputs_.eval[i].name, loss, tokens);
  }
}

}  // namespace cpt::exec
