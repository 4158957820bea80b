// ZeRO-1/2 over the data-parallel group (Rajbhandari et al. 2020, P_os and P_os+g). The parameters
// are seen as one flat vector in registration order, padded and split by spec::ShardLayout; rank i
// owns slice i. Every parameter's .grad is a view into one flat gradient buffer, so autograd
// accumulates straight into it. Per step: the buffer is reduce-scattered (stage 1: once, after the
// last microbatch, the result written back into this rank's slice of the buffer; stage 2: after
// every microbatch, added into a separate gradient shard and the buffer zeroed), the global norm is
// the square root of the all-reduced shard norms², AdamW (the same fused kernel as the replicated
// path) updates this rank's slice of the parameters in place, segment by segment (a segment = the
// part of one parameter inside the slice, so weight decay follows the parameter; the parameters
// are fp32, so no separate master copy), and the updated slices are all-gathered through the
// gradient buffer, which the step no longer needs, back into every parameter.
// Weaker than ZeRO-2 proper: the flat buffer is full size, so stage 2 holds 4Ψ + 4Ψ/N gradient
// bytes where bucketed reduce-scatter would hold 4Ψ/N plus one bucket.
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/measure/storage_bytes.h"
#include "executor/model/llama_model.h"
#include "executor/train/step_optimizer.h"
#include "spec/shard_layout.h"

namespace cpt::exec {

namespace {

using core::str_cat;

class ZeroOptimizer : public StepOptimizer {
 public:
  ZeroOptimizer(const NamedParams& params, const AdamWOptions& options, Communicator& dp, int stage,
                const ModelParallelNorm& mp, bool offload)
      : options_(options), dp_(dp), stage_(stage), mp_(mp), offload_(offload), layout_(total(params), dp.size()) {
    CPT_CHECK(stage == 1 || stage == 2, "ZeRO stage ", stage, " is not this optimizer's");
    std::int64_t at = 0;
    for (const auto& [name, p] : params) {
      params_.push_back({name, p, at});
      at += p.numel();
    }
    const auto mine = layout_.slice(dp_.rank());
    const auto opts = torch::TensorOptions(torch::kFloat32).device(params.front().second.device());
    // With offload the optimizer state (moments, the slice's fp32 master and the step counts) lives
    // in host memory and the update runs on the CPU (DeepSpeed's ZeRO-Offload).
    const auto state_opts = offload_ ? torch::TensorOptions(torch::kFloat32).device(torch::kCPU) : opts;
    exp_avg_ = torch::zeros({mine.size}, state_opts);
    exp_avg_sq_ = torch::zeros({mine.size}, state_opts);
    if (offload_) master_ = torch::zeros({mine.size}, state_opts);
    flat_ = torch::zeros({layout_.padded_size()}, opts);
    // Stage 1 reduces once, into its own slice of the buffer; stage 2 accumulates reduced shards.
    grad_shard_ = stage_ == 1 ? flat_.narrow(0, mine.offset, mine.size) : torch::zeros({mine.size}, opts);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto& p = params_[k];
      const auto begin = std::max(p.offset, mine.offset);
      const auto end = std::min(p.offset + p.tensor.numel(), mine.offset + mine.size);
      if (begin >= end) continue;
      segments_.push_back({k, begin - p.offset, begin - mine.offset, end - begin, !is_no_decay_parameter(p.name),
                           mp.counts(p.name), torch::zeros({}, state_opts)});
    }
    torch::NoGradGuard no_grad;
    refresh_master();
    for (auto& p : params_) {
      auto view = flat_.narrow(0, p.offset, p.tensor.numel()).view_as(p.tensor);
      if (p.tensor.grad().defined()) view.copy_(p.tensor.grad());
      p.tensor.mutable_grad() = view;
    }
  }

  void before_backward(int, int) override {}

  void after_backward(int i, int n) override {
    if (stage_ == 1 && i + 1 < n) return;  // stage 1 accumulates full gradients until the last
    torch::NoGradGuard no_grad;
    auto part = torch::empty({grad_shard_.numel()}, grad_shard_.options());
    dp_.reduce_scatter_sum(flat_, part)->wait();
    if (stage_ == 1) {
      grad_shard_.copy_(part);
    } else {
      grad_shard_.add_(part);
      flat_.zero_();
    }
  }

  double grad_norm() override {
    std::vector<torch::Tensor> norms;
    for (const auto& s : segments_) {
      if (s.counted) norms.push_back(torch::linalg_vector_norm(grad_shard_.narrow(0, s.shard_offset, s.length)));
    }
    auto sq = norms.empty() ? torch::zeros({1}, torch::kFloat64)
                            : torch::stack(norms).to(torch::kFloat64).pow(2).sum().reshape({1}).cpu();
    dp_.all_reduce_sum(sq)->wait();
    return std::sqrt(mp_.sum_over_groups(sq.item<double>()));
  }

  void step(double lr, double scale) override {
    torch::NoGradGuard no_grad;
    // The gradient shard goes to the host with offload (a copy there, also on a CPU device).
    auto grads = offload_ ? grad_shard_.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : grad_shard_;
    if (scale != 1.0) grads.mul_(scale);
    for (const bool decay : {true, false}) {
      std::vector<torch::Tensor> w, g, m, v, steps;
      for (auto& s : segments_) {
        if (s.decay != decay) continue;
        w.push_back(offload_ ? master_.narrow(0, s.shard_offset, s.length) : piece(s));
        g.push_back(grads.narrow(0, s.shard_offset, s.length));
        m.push_back(exp_avg_.narrow(0, s.shard_offset, s.length));
        v.push_back(exp_avg_sq_.narrow(0, s.shard_offset, s.length));
        s.step.add_(1);  // the fused kernel reads the count but does not advance it
        steps.push_back(s.step);
      }
      if (w.empty()) continue;
      at::_fused_adamw_(w, g, m, v, {}, steps, lr, options_.beta1, options_.beta2, decay ? options_.weight_decay : 0.0,
                        options_.eps, false, false);
    }
    ++steps_done_;
    // Every rank's updated slice, back into every parameter, through the gradient buffer.
    auto mine = torch::zeros({grad_shard_.numel()}, flat_.options());
    for (const auto& s : segments_) {
      mine.narrow(0, s.shard_offset, s.length).copy_(offload_ ? master_.narrow(0, s.shard_offset, s.length) : piece(s));
    }
    dp_.all_gather(mine, flat_)->wait();
    for (auto& p : params_) p.tensor.detach().copy_(flat_.narrow(0, p.offset, p.tensor.numel()).view_as(p.tensor));
    zero_grad();
  }

  void zero_grad() override {
    torch::NoGradGuard no_grad;
    flat_.zero_();
    if (stage_ == 2) grad_shard_.zero_();
  }

  ModelStateBytes state_bytes() const override {
    std::vector<torch::Tensor> weights, grads{flat_, grad_shard_}, counters;
    for (const auto& p : params_) {
      weights.push_back(p.tensor);
      grads.push_back(p.tensor.grad());
    }
    for (const auto& s : segments_) counters.push_back(s.step);
    // Optimizer state counted where the parameters live: offloaded to a GPU's host it is 0 here.
    const bool on_device = !offload_ || exp_avg_.device() == flat_.device();
    return {storage_bytes(weights), storage_bytes(grads),
            on_device ? storage_bytes({exp_avg_, exp_avg_sq_, master_}) : 0, on_device ? storage_bytes(counters) : 0};
  }

  NamedParams full_state() override {
    // Gathered on the parameters' device (the communicator's), wherever the state lives.
    auto m = torch::empty({layout_.padded_size()}, flat_.options());
    auto v = torch::empty({layout_.padded_size()}, flat_.options());
    dp_.all_gather(exp_avg_.to(flat_.device()), m)->wait();
    dp_.all_gather(exp_avg_sq_.to(flat_.device()), v)->wait();
    NamedParams out;
    for (const auto& p : params_) {
      out.emplace_back(p.name + "/exp_avg", m.narrow(0, p.offset, p.tensor.numel()).view_as(p.tensor).clone());
      out.emplace_back(p.name + "/exp_avg_sq", v.narrow(0, p.offset, p.tensor.numel()).view_as(p.tensor).clone());
      out.emplace_back(p.name + "/step", torch::full({}, static_cast<float>(steps_done_), torch::kFloat32));
    }
    return out;
  }

  void load_full_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& origin) override {
    torch::NoGradGuard no_grad;
    float count = -1;
    for (const auto& s : segments_) {
      const auto& p = params_[s.param];
      for (auto [suffix, target] : {std::pair{"/exp_avg", &exp_avg_}, std::pair{"/exp_avg_sq", &exp_avg_sq_}}) {
        const auto t = get(p.name + suffix);
        if (!t.sizes().equals(p.tensor.sizes())) {
          throw core::ConfigError(str_cat(origin, ": optimizer state ", p.name, suffix, " has shape ", t.sizes(),
                                          ", the model needs ", p.tensor.sizes()));
        }
        target->narrow(0, s.shard_offset, s.length).copy_(t.reshape({-1}).narrow(0, s.param_offset, s.length));
      }
      const float c = get(p.name + "/step").item<float>();
      if (count >= 0 && c != count) {
        throw core::ConfigError(str_cat(origin, ": optimizer steps differ between parameters (", count, " and ", c, ")"));
      }
      count = c;
      s.step.fill_(c);
    }
    // Every rank must agree on the count, also one that owns no segment (its slice is all padding).
    auto t = torch::tensor({count >= 0 ? static_cast<double>(count) : 0.0, count >= 0 ? 1.0 : 0.0}, torch::kFloat64);
    dp_.all_reduce_sum(t)->wait();
    const double owners = t[1].item<double>();
    steps_done_ = owners > 0 ? static_cast<std::int64_t>(std::llround(t[0].item<double>() / owners)) : 0;
    for (auto& s : segments_) s.step.fill_(static_cast<float>(steps_done_));
    refresh_master();  // the weights were loaded before the state
  }

 private:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    std::int64_t offset;  // in the flat vector
  };
  struct Segment {
    std::size_t param;
    std::int64_t param_offset;  // first element inside the parameter
    std::int64_t shard_offset;  // first element inside this rank's slice
    std::int64_t length;
    bool decay;
    bool counted;  // in the global gradient norm (ModelParallelNorm::counts)
    torch::Tensor step;
  };
  static std::int64_t total(const NamedParams& params) {
    std::int64_t n = 0;
    for (const auto& [name, p] : params) n += p.numel();
    return n;
  }
  // The host master copy of this rank's slice, from the parameters (offload only).
  void refresh_master() {
    if (!offload_) return;
    for (const auto& s : segments_) master_.narrow(0, s.shard_offset, s.length).copy_(piece(s));
  }
  torch::Tensor piece(const Segment& s) const {
    return params_[s.param].tensor.detach().view({-1}).narrow(0, s.param_offset, s.length);  // a view: updated in place
  }

  AdamWOptions options_;
  Communicator& dp_;
  int stage_;
  ModelParallelNorm mp_;
  bool offload_;
  spec::ShardLayout layout_;
  std::vector<Param> params_;
  std::vector<Segment> segments_;
  torch::Tensor exp_avg_, exp_avg_sq_, grad_shard_, flat_;
  torch::Tensor master_;  // offload only: this rank's slice of the parameters, fp32, on the host
  std::int64_t steps_done_ = 0;
};

}  // namespace

std::unique_ptr<StepOptimizer> make_zero_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                   Communicator& dp, int stage, const ModelParallelNorm& mp,
                                                   bool offload) {
  return std::make_unique<ZeroOptimizer>(params, options, dp, stage, mp, offload);
}

}  // namespace cpt::exec
