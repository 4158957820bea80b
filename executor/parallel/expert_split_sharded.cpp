// make_expert_split_fully_sharded (fully_sharded.h): ZeRO-3 of a model whose routed experts are
// apart from their layer, as two FullyShardedModels over disjoint parameters behind one. Every call
// reaches both, the dense one first, so each group's collectives run in the same order on every
// rank; a block's two units are gathered, released and reduced together.
#include <cmath>

#include "executor/parallel/fully_sharded.h"

namespace cpt::exec {

namespace {

class ExpertSplitFullySharded : public FullyShardedModel {
 public:
  ExpertSplitFullySharded(std::unique_ptr<FullyShardedModel> dense, std::unique_ptr<FullyShardedModel> experts)
      : dense_(std::move(dense)), experts_(std::move(experts)) {}

  // ParameterResidency: a unit's dense part, then its experts (prefetches too).
  void before_forward(int unit) override {
    dense_->before_forward(unit);
    experts_->before_forward(unit);
  }
  torch::Tensor after_forward(int unit, const torch::Tensor& output) override {
    return experts_->after_forward(unit, dense_->after_forward(unit, output));
  }

  // StepOptimizer.
  void before_backward(int i, int n) override {
    dense_->before_backward(i, n);
    experts_->before_backward(i, n);
  }
  void after_backward(int i, int n) override {
    dense_->after_backward(i, n);
    experts_->after_backward(i, n);
  }
  // Each part's norm is global over its own groups (the experts' over expert-dp, ep and pp).
  double grad_norm() override {
    const double dense = dense_->grad_norm();
    const double experts = experts_->grad_norm();
    return std::sqrt(dense * dense + experts * experts);
  }
  void step(double lr, double scale) override {
    dense_->step(lr, scale);
    experts_->step(lr, scale);
  }
  void zero_grad() override {
    dense_->zero_grad();
    experts_->zero_grad();
  }
  ModelStateBytes state_bytes() const override {
    const auto a = dense_->state_bytes(), b = experts_->state_bytes();
    return {a.weights + b.weights, a.grads + b.grads, a.optimizer + b.optimizer,
            a.optimizer_counters + b.optimizer_counters};
  }
  NamedParams full_state() override {
    auto state = dense_->full_state();
    for (auto& entry : experts_->full_state()) state.push_back(std::move(entry));
    return state;
  }
  void load_full_state(const std::function<torch::Tensor(const std::string&)>& get,
                       const std::string& origin) override {
    dense_->load_full_state(get, origin);
    experts_->load_full_state(get, origin);
  }

  // FullyShardedModel: each part keeps the slices of its own parameters.
  void set_ewc(const NamedParams& fisher, const NamedParams& anchor, double lambda) override {
    dense_->set_ewc(fisher, anchor, lambda);
    experts_->set_ewc(fisher, anchor, lambda);
  }
  double ewc_penalty() const override { return dense_->ewc_penalty() + experts_->ewc_penalty(); }
  std::int64_t ewc_bytes() const override { return dense_->ewc_bytes() + experts_->ewc_bytes(); }
  void gather_all() override {
    dense_->gather_all();
    experts_->gather_all();
  }
  void release_all() override {
    dense_->release_all();
    experts_->release_all();
  }
  void reshard_from_params() override {
    dense_->reshard_from_params();
    experts_->reshard_from_params();
  }

 private:
  std::unique_ptr<FullyShardedModel> dense_, experts_;
};

}  // namespace

std::unique_ptr<FullyShardedModel> make_expert_split_fully_sharded(std::unique_ptr<FullyShardedModel> dense,
                                                                   std::unique_ptr<FullyShardedModel> experts) {
  return std::make_unique<ExpertSplitFullySharded>(std::move(dense), std::move(experts));
}

}  // namespace cpt::exec
