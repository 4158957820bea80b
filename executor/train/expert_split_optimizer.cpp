// make_expert_split_optimizer (step_optimizer.h): two step optimizers over disjoint parameters, as
// one. Every call reaches both, the dense one first, so both's collectives run in the same order on
// every rank.
#include <cmath>

#include "executor/train/step_optimizer.h"

namespace cpt::exec {

namespace {

class ExpertSplitOptimizer : public StepOptimizer {
 public:
  ExpertSplitOptimizer(std::unique_ptr<StepOptimizer> dense, std::unique_ptr<StepOptimizer> experts,
                       const ModelParallelNorm& expert_norm)
      : dense_(std::move(dense)), experts_(std::move(experts)), expert_norm_(expert_norm) {}
  void before_backward(int i, int n) override {
    dense_->before_backward(i, n);
    if (experts_) experts_->before_backward(i, n);
  }
  void after_backward(int i, int n) override {
    dense_->after_backward(i, n);
    if (experts_) experts_->after_backward(i, n);
  }
  // Each part's norm is global over its own groups; the parts are disjoint.
  double grad_norm() override {
    const double dense = dense_->grad_norm();
    const double experts = experts_ ? experts_->grad_norm() : std::sqrt(expert_norm_.sum_over_groups(0.0));
    return std::sqrt(dense * dense + experts * experts);
  }
  void step(double lr, double scale) override {
    dense_->step(lr, scale);
    if (experts_) experts_->step(lr, scale);
  }
  void zero_grad() override {
    dense_->zero_grad();
    if (experts_) experts_->zero_grad();
  }
  ModelStateBytes state_bytes() const override {
    const auto a = dense_->state_bytes(), b = experts_ ? experts_->state_bytes() : ModelStateBytes{};
    return {a.weights + b.weights, a.grads + b.grads, a.optimizer + b.optimizer,
            a.optimizer_counters + b.optimizer_counters};
  }
  NamedParams full_state() override {
    auto state = dense_->full_state();
    if (experts_) {
      for (auto& entry : experts_->full_state()) state.push_back(std::move(entry));
    }
    return state;
  }
  void load_full_state(const std::function<torch::Tensor(const std::string&)>& get,
                       const std::string& origin) override {
    dense_->load_full_state(get, origin);
    if (experts_) experts_->load_full_state(get, origin);
  }

 private:
  std::unique_ptr<StepOptimizer> dense_, experts_;  // experts_: null on a stage without them
  ModelParallelNorm expert_norm_;
};

}  // namespace

std::unique_ptr<StepOptimizer> make_expert_split_optimizer(std::unique_ptr<StepOptimizer> dense,
                                                           std::unique_ptr<StepOptimizer> experts,
                                                           const ModelParallelNorm& expert_norm) {
  return std::make_unique<ExpertSplitOptimizer>(std::move(dense), std::move(experts), expert_norm);
}

}  // namespace cpt::exec
