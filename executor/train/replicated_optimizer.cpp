#include <cmath>

#include "executor/parallel/data_parallel.h"
#include "executor/train/step_optimizer.h"

namespace cpt::exec {

namespace {

class ReplicatedOptimizer : public StepOptimizer {
 public:
  ReplicatedOptimizer(const NamedParams& params, const AdamWOptions& options, Communicator& dp, std::int64_t bucket_bytes)
      : adam_(params, options), grads_(tensors(params), dp, bucket_bytes) {
    for (const auto& [name, p] : params) params_.push_back(p);
  }
  void before_backward(int i, int n) override {
    if (i + 1 == n) grads_.arm();
  }
  void after_backward(int i, int n) override {
    if (i + 1 == n) grads_.finish();
  }
  double grad_norm() override {
    torch::NoGradGuard no_grad;
    // Per-tensor L2 norms in the gradients' own precision (no copies), combined in double.
    std::vector<torch::Tensor> norms;
    for (const auto& p : params_) {
      if (p.grad().defined()) norms.push_back(torch::linalg_vector_norm(p.grad()));
    }
    if (norms.empty()) return 0.0;
    const auto all = torch::stack(norms).to(torch::kFloat64);
    return std::sqrt(all.pow(2).sum().item<double>());
  }
  void step(double lr, double scale) override {
    if (scale != 1.0) {
      torch::NoGradGuard no_grad;
      for (auto& p : params_) {
        if (p.grad().defined()) p.mutable_grad().mul_(scale);
      }
    }
    adam_.step(lr);
    adam_.zero_grad();
  }
  void zero_grad() override { adam_.zero_grad(); }
  NamedParams full_state() override { return adam_.state(); }
  void load_full_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& origin) override {
    adam_.load_state(get, origin);
  }

 private:
  static std::vector<torch::Tensor> tensors(const NamedParams& params) {
    std::vector<torch::Tensor> v;
    for (const auto& [name, p] : params) v.push_back(p);
    return v;
  }
  AdamW adam_;
  DataParallelGrads grads_;
  std::vector<torch::Tensor> params_;
};

}  // namespace

std::unique_ptr<StepOptimizer> make_replicated_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                         Communicator& dp, std::int64_t bucket_bytes) {
  return std::make_unique<ReplicatedOptimizer>(params, options, dp, bucket_bytes);
}

}  // namespace cpt::exec
