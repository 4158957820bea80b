#include <cmath>

#include "executor/measure/storage_bytes.h"
#include "executor/parallel/data_parallel.h"
#include "executor/train/step_optimizer.h"

namespace cpt::exec {

namespace {

class ReplicatedOptimizer : public StepOptimizer {
 public:
  ReplicatedOptimizer(const NamedParams& params, const AdamWOptions& options, Communicator& dp, std::int64_t bucket_bytes,
                      const ModelParallelNorm& mp)
      : adam_(params, options), grads_(tensors(params), dp, bucket_bytes), mp_(mp) {
    for (const auto& [name, p] : params) {
      params_.push_back(p);
      counted_.push_back(mp.counts(name));
    }
  }
  void before_backward(int i, int n) override {
    if (i == 0) grads_.arm(n);
  }
  void after_backward(int i, int n) override {
    if (i + 1 == n) grads_.finish();
  }
  double grad_norm() override {
    torch::NoGradGuard no_grad;
    // Per-tensor L2 norms in the gradients' own precision (no copies), combined in double.
    std::vector<torch::Tensor> norms;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (counted_[k] && params_[k].grad().defined()) norms.push_back(torch::linalg_vector_norm(params_[k].grad()));
    }
    const double squares = norms.empty() ? 0.0 : torch::stack(norms).to(torch::kFloat64).pow(2).sum().item<double>();
    return std::sqrt(mp_.sum_over_groups(squares));
  }
  void step(double lr, double scale) override {
    if (scale != 1.0) {
      torch::NoGradGuard no_grad;
      for (auto& p : params_) {
        if (p.grad().defined()) p.mutable_grad().mul_(scale);
      }
    }
    adam_.step(lr);
    zero_grad();
  }
  void zero_grad() override {
    if (!grads_.zero_grad()) adam_.zero_grad();
  }
  ModelStateBytes state_bytes() const override {
    auto grads = grads_.buffers();
    for (const auto& p : params_) grads.push_back(p.grad());
    return {storage_bytes(params_), storage_bytes(grads), storage_bytes(adam_.moments()), storage_bytes(adam_.counters())};
  }
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
  ModelParallelNorm mp_;
  std::vector<torch::Tensor> params_;
  std::vector<bool> counted_;
};

}  // namespace

std::unique_ptr<StepOptimizer> make_replicated_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                         Communicator& dp, std::int64_t bucket_bytes,
                                                         const ModelParallelNorm& mp) {
  return std::make_unique<ReplicatedOptimizer>(params, options, dp, bucket_bytes, mp);
}

}  // namespace cpt::exec
