#include "executor/parallel/fully_sharded.h"

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/measure/storage_bytes.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/gradient_hook.h"
#include "spec/shard_layout.h"

namespace cpt::exec {

namespace {

using core::str_cat;

// The unit of parameter `name`: its layer, or -1 (root) for everything outside the blocks.
int unit_of(const std::string& name) {
  if (!name.starts_with("layers.")) return ParameterResidency::kRoot;
  return std::stoi(name.substr(7, name.find('.', 7) - 7));
}

class FullyShardedImpl : public FullyShardedModel {
 public:
  // `frozen`: forward only (a teacher): no gradient or moment slices, no gradient hooks.
  FullyShardedImpl(const NamedParams& params, const AdamWOptions& options, Communicator& shard, Communicator* replicate,
                   const ModelParallelNorm& mp, bool frozen = false, bool offload = false)
      : options_(options), shard_(shard), replicate_(replicate), mp_(mp), frozen_(frozen), offload_(offload) {
    CPT_CHECK(!params.empty(), "nothing to shard");
    opts_ = torch::TensorOptions(torch::kFloat32).device(params.front().second.device());
    for (const auto& [name, p] : params) {
      const int u = unit_of(name);
      const auto index = u == kRoot ? std::size_t{0} : static_cast<std::size_t>(u) + 1;
      if (units_.size() <= index) units_.resize(index + 1);
      auto& unit = units_[index];
      params_.push_back({name, p, p.sizes().vec(), index, unit.numel});
      unit.params.push_back(params_.size() - 1);
      unit.numel += p.numel();
    }
    torch::NoGradGuard no_grad;
    const int n = shard_.size(), me = shard_.rank();
    // With offload the optimizer state lives in host memory and the update runs on the CPU.
    const auto state_opts = offload_ ? torch::TensorOptions(torch::kFloat32).device(torch::kCPU) : opts_;
    for (auto& unit : units_) {
      if (unit.params.empty()) continue;
      unit.layout = spec::ShardLayout(unit.numel, n);
      const auto mine = unit.layout.slice(me);
      auto flat = torch::zeros({unit.layout.padded_size()}, opts_);
      for (const auto k : unit.params) {
        const auto& p = params_[k];
        flat.narrow(0, p.offset, p.tensor.numel()).copy_(p.tensor.detach().reshape({-1}));
      }
      unit.shard = flat.narrow(0, mine.offset, mine.size).clone();
      if (!frozen_) {
        unit.grad_shard = torch::zeros({mine.size}, opts_);
        unit.exp_avg = torch::zeros({mine.size}, state_opts);
        unit.exp_avg_sq = torch::zeros({mine.size}, state_opts);
        if (offload_) unit.master = unit.shard.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
      }
      for (const auto k : unit.params) {
        const auto& p = params_[k];
        const auto begin = std::max(p.offset, mine.offset);
        const auto end = std::min(p.offset + p.tensor.numel(), mine.offset + mine.size);
        if (begin >= end) continue;
        unit.segments.push_back({k, begin - p.offset, begin - mine.offset, end - begin, !is_no_decay_parameter(p.name),
                                 mp.counts(p.name), torch::zeros({}, state_opts)});
      }
      unit.gathered = true;  // the parameters hold whole values now
    }
    for (std::size_t k = 0; k < params_.size() && !frozen_; ++k) {
      set_gradient_hook(params_[k].tensor, [this, k] { on_grad_in(k); });
    }
    release_all();
  }

  ~FullyShardedImpl() override {
    if (frozen_) return;
    for (auto& p : params_) clear_gradient_hook(p.tensor);
  }

  // ParameterResidency.
  // Gathers the unit and starts the all-gather of the next one (the root's next is block 0),
  // which then runs behind this unit's computation.
  void before_forward(int u) override {
    if (!has_unit(u)) return;
    const auto index = unit_index(u);
    gather(index);
    if (index + 1 < units_.size()) prefetch(index + 1);
  }

  torch::Tensor after_forward(int u, const torch::Tensor& output) override {
    if (!has_unit(u)) return output;
    const auto index = unit_index(u);
    const bool training = torch::GradMode::is_enabled() && output.requires_grad();
    if (u == kRoot) {
      // The root stays whole until its gradients are in; its gradient buffer is ready now.
      if (training) {
        prepare_gradients(index);
      } else {
        release(index);
      }
      return output;
    }
    release(index);
    if (!training) return output;
    auto hooked = output.view_as(output);
    hooked.register_hook([this, index](const torch::Tensor& grad) {
      gather(index);
      if (index > 1) prefetch(index - 1);  // backward runs the blocks in reverse
      prepare_gradients(index);
      return grad;
    });
    return hooked;
  }

  void on_grad_in(std::size_t k) {
    auto& unit = units_[params_[k].unit];
    if (!unit.full_grad.defined()) return;  // not a ZeRO-3 backward (e.g. a parameter used outside forward)
    if (++unit.grads_in < static_cast<int>(unit.params.size())) return;
    if (alone()) {  // the gradients went straight into the shard (prepare_gradients)
      for (const auto j : unit.params) params_[j].tensor.mutable_grad() = torch::Tensor();
      unit.full_grad = torch::Tensor();
      release(params_[k].unit);
      return;
    }
    // Every gradient of the unit is in: reduce-scatter it, drop the whole tensors. One reduction in
    // flight at a time, so at most two whole gradient buffers exist (this one and the next unit's).
    drain_pending();
    auto part = torch::empty({unit.grad_shard.numel()}, opts_);
    Pending pending{params_[k].unit, part, unit.full_grad, shard_.reduce_scatter_sum(unit.full_grad, part)};
    pending_.push_back(std::move(pending));
    note_peak();
    for (const auto j : unit.params) params_[j].tensor.mutable_grad() = torch::Tensor();
    unit.full_grad = torch::Tensor();
    release(params_[k].unit);
  }

  // StepOptimizer.
  void before_backward(int, int) override {}

  void after_backward(int i, int n) override {
    drain_pending();
    // A unit whose backward did not complete (it never does in a correct step) would leak here.
    for (std::size_t u = 0; u < units_.size(); ++u) {
      CPT_CHECK(!units_[u].full_grad.defined(), "ZeRO-3 unit ", u, ": backward ended with ", units_[u].grads_in, " of ",
                units_[u].params.size(), " gradients");
    }
    if (ewc_lambda_ > 0 && i + 1 == n) add_ewc_gradient();
  }

  void set_ewc(const NamedParams& fisher, const NamedParams& anchor, double lambda) override {
    torch::NoGradGuard no_grad;
    auto by_name = [](const NamedParams& list, const std::string& name) {
      for (const auto& [n, t] : list) {
        if (n == name) return t;
      }
      CPT_UNREACHABLE("EWC holds no estimate for parameter ", name);
    };
    const int me = shard_.rank();
    for (auto& unit : units_) {
      if (unit.params.empty()) continue;
      auto f = torch::zeros({unit.layout.padded_size()}, opts_);
      auto a = torch::zeros({unit.layout.padded_size()}, opts_);
      for (const auto k : unit.params) {
        const auto& p = params_[k];
        const auto numel = shape_numel(p.shape);
        f.narrow(0, p.offset, numel).copy_(by_name(fisher, p.name).reshape({-1}));
        a.narrow(0, p.offset, numel).copy_(by_name(anchor, p.name).reshape({-1}));
      }
      const auto mine = unit.layout.slice(me);
      unit.ewc_fisher = f.narrow(0, mine.offset, mine.size).clone();
      unit.ewc_anchor = a.narrow(0, mine.offset, mine.size).clone();
    }
    ewc_lambda_ = lambda;
  }

  double ewc_penalty() const override { return ewc_penalty_; }

  double grad_norm() override {
    std::vector<torch::Tensor> norms;
    for (const auto& unit : units_) {
      for (const auto& s : unit.segments) {
        if (s.counted) norms.push_back(torch::linalg_vector_norm(unit.grad_shard.narrow(0, s.shard_offset, s.length)));
      }
    }
    auto sq = norms.empty() ? torch::zeros({1}, torch::kFloat64)
                            : torch::stack(norms).to(torch::kFloat64).pow(2).sum().reshape({1}).cpu();
    shard_.all_reduce_sum(sq)->wait();  // replicas hold the same shards: not over the replicate group
    return std::sqrt(mp_.sum_over_groups(sq.item<double>()));
  }

  void step(double lr, double scale) override {
    torch::NoGradGuard no_grad;
    for (auto& unit : units_) {
      if (unit.params.empty()) continue;
      if (scale != 1.0) unit.grad_shard.mul_(scale);
      // With offload: the gradient shard to the host (a copy there, also on a CPU device), AdamW on
      // the host master, the result back into the shard.
      const auto grads = offload_ ? unit.grad_shard.to(torch::kCPU, false, /*copy=*/true) : unit.grad_shard;
      const auto& weights = offload_ ? unit.master : unit.shard;
      for (const bool decay : {true, false}) {
        std::vector<torch::Tensor> w, g, m, v, steps;
        for (auto& s : unit.segments) {
          if (s.decay != decay) continue;
          w.push_back(weights.narrow(0, s.shard_offset, s.length));
          g.push_back(grads.narrow(0, s.shard_offset, s.length));
          m.push_back(unit.exp_avg.narrow(0, s.shard_offset, s.length));
          v.push_back(unit.exp_avg_sq.narrow(0, s.shard_offset, s.length));
          s.step.add_(1);  // the fused kernel reads the count but does not advance it
          steps.push_back(s.step);
        }
        if (w.empty()) continue;
        at::_fused_adamw_(w, g, m, v, {}, steps, lr, options_.beta1, options_.beta2,
                          decay ? options_.weight_decay : 0.0, options_.eps, false, false);
      }
      if (offload_) unit.shard.copy_(unit.master);
    }
    ++steps_done_;
    zero_grad();
    peak_ = {};  // the next step's peak
  }

  void zero_grad() override {
    torch::NoGradGuard no_grad;
    for (auto& unit : units_) {
      if (!unit.params.empty()) unit.grad_shard.zero_();
    }
  }

  NamedParams full_state() override {
    NamedParams out;
    for (auto& unit : units_) {
      if (unit.params.empty()) continue;
      auto m = torch::empty({unit.layout.padded_size()}, opts_);
      auto v = torch::empty({unit.layout.padded_size()}, opts_);
      // Gathered on the parameters' device (the communicator's), wherever the state lives.
      shard_.all_gather(unit.exp_avg.to(opts_.device()), m)->wait();
      shard_.all_gather(unit.exp_avg_sq.to(opts_.device()), v)->wait();
      for (const auto k : unit.params) {
        const auto& p = params_[k];
        const auto numel = shape_numel(p.shape);
        out.emplace_back(p.name + "/exp_avg", m.narrow(0, p.offset, numel).view(p.shape).clone());
        out.emplace_back(p.name + "/exp_avg_sq", v.narrow(0, p.offset, numel).view(p.shape).clone());
        out.emplace_back(p.name + "/step", torch::full({}, static_cast<float>(steps_done_), torch::kFloat32));
      }
    }
    return out;
  }

  void load_full_state(const std::function<torch::Tensor(const std::string&)>& get,
                       const std::string& origin) override {
    torch::NoGradGuard no_grad;
    double count = 0;
    for (auto& unit : units_) {
      for (auto& s : unit.segments) {
        const auto& p = params_[s.param];
        for (auto [suffix, target] :
             {std::pair{"/exp_avg", &unit.exp_avg}, std::pair{"/exp_avg_sq", &unit.exp_avg_sq}}) {
          const auto t = get(p.name + suffix);
          if (!t.sizes().equals(p.shape)) {
            throw core::ConfigError(str_cat(origin, ": optimizer state ", p.name, suffix, " has shape ", t.sizes(),
                                            ", the model needs ", c10::IntArrayRef(p.shape)));
          }
          target->narrow(0, s.shard_offset, s.length).copy_(t.reshape({-1}).narrow(0, s.param_offset, s.length));
        }
        count = get(p.name + "/step").item<double>();
      }
    }
    // Ranks that own no segment still need the count: the largest over the group (all are equal).
    auto t = torch::tensor({count}, torch::kFloat64);
    auto all = torch::empty({shard_.size()}, torch::kFloat64);
    shard_.all_gather(t, all)->wait();
    steps_done_ = static_cast<std::int64_t>(std::llround(all.max().item<double>()));
    for (auto& unit : units_) {
      for (auto& s : unit.segments) s.step.fill_(static_cast<float>(steps_done_));
    }
  }

  // Weights and gradients: the largest this step held (shards plus whole units and gradient
  // buffers alive at once, sampled at every gather, gradient buffer and reduction).
  std::int64_t ewc_bytes() const override {
    std::vector<torch::Tensor> slices;
    for (const auto& unit : units_) {
      slices.push_back(unit.ewc_fisher);
      slices.push_back(unit.ewc_anchor);
    }
    return storage_bytes(slices);
  }
  ModelStateBytes state_bytes() const override {
    std::vector<torch::Tensor> moments, counters;
    bool on_device = true;  // offloaded to a GPU's host, the optimizer state is 0 on the device
    for (const auto& unit : units_) {
      moments.push_back(unit.exp_avg);
      moments.push_back(unit.exp_avg_sq);
      moments.push_back(unit.master);
      for (const auto& s : unit.segments) counters.push_back(s.step);
      if (unit.exp_avg.defined() && unit.exp_avg.device() != opts_.device()) on_device = false;
    }
    const auto now = current();
    return {std::max(peak_.weights, now.weights), std::max(peak_.grads, now.grads),
            on_device ? storage_bytes(moments) : 0, on_device ? storage_bytes(counters) : 0};
  }

  // FullyShardedModel.
  void gather_all() override {
    for (std::size_t u = 0; u < units_.size(); ++u) gather(u);
  }
  void release_all() override {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);
  }
  void reshard_from_params() override {
    torch::NoGradGuard no_grad;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      auto& unit = units_[u];
      if (unit.params.empty()) continue;
      CPT_CHECK(unit.gathered, "reshard of ZeRO-3 unit ", u, " that is not gathered");
      const auto mine = unit.layout.slice(shard_.rank());
      unit.shard.copy_(unit.full.narrow(0, mine.offset, mine.size));
      if (offload_) unit.master.copy_(unit.shard);
    }
    release_all();
  }

 private:
  struct Segment {
    std::size_t param;
    std::int64_t param_offset, shard_offset, length;
    bool decay, counted;
    torch::Tensor step;
  };
  struct Unit {
    std::vector<std::size_t> params;
    std::int64_t numel = 0;
    spec::ShardLayout layout{0, 1};
    torch::Tensor shard, grad_shard, exp_avg, exp_avg_sq;  // this rank's slices
    torch::Tensor ewc_fisher, ewc_anchor;                  // this rank's slices, with EWC
    torch::Tensor master;                                  // offload: the shard's fp32 master, on the host
    torch::Tensor full, full_grad;                         // whole, while gathered / while its backward runs
    std::unique_ptr<CommHandle> gathering;                 // a prefetch under way into `full`
    std::vector<Segment> segments;
    int grads_in = 0;
    bool gathered = false;
  };
  struct Param {
    std::string name;
    torch::Tensor tensor;
    std::vector<std::int64_t> shape;
    std::size_t unit;
    std::int64_t offset;  // in the unit's flat vector
  };
  struct Pending {
    std::size_t unit;
    torch::Tensor part, input;  // kept alive until the reduce-scatter completes
    std::unique_ptr<CommHandle> handle;
  };

  static std::int64_t shape_numel(const std::vector<std::int64_t>& s) {
    std::int64_t n = 1;
    for (const auto d : s) n *= d;
    return n;
  }
  // Whether unit u holds parameters here: the experts' part (make_expert_split_fully_sharded) has
  // no root and no unit for the dense layers after its last MoE layer.
  bool has_unit(int u) const {
    const auto index = u == kRoot ? std::size_t{0} : static_cast<std::size_t>(u) + 1;
    return index < units_.size() && !units_[index].params.empty();
  }
  std::size_t unit_index(int u) const {
    const auto index = u == kRoot ? std::size_t{0} : static_cast<std::size_t>(u) + 1;
    CPT_CHECK(index < units_.size(), "ZeRO-3: no unit ", u);
    return index;
  }

  // The EWC gradient into the gradient shards, and the whole model's penalty (counted like the
  // gradient norm: tensor-replicated parameters once) at the current weights.
  void add_ewc_gradient() {
    torch::NoGradGuard no_grad;
    torch::Tensor local;  // summed on the device, read once (not one host synchronisation per segment)
    for (auto& unit : units_) {
      if (!unit.ewc_fisher.defined()) continue;
      const auto diff = unit.shard - unit.ewc_anchor;
      unit.grad_shard.add_(unit.ewc_fisher * diff, ewc_lambda_);
      const auto terms = unit.ewc_fisher * diff.pow(2);
      for (const auto& s : unit.segments) {
        if (!s.counted) continue;
        const auto part = terms.narrow(0, s.shard_offset, s.length).sum().to(torch::kFloat64);
        local = local.defined() ? local + part : part;
      }
    }
    auto t = local.defined() ? local.to(torch::kCPU).reshape({1}) : torch::zeros({1}, torch::kFloat64);
    shard_.all_reduce_sum(t)->wait();  // replicas hold the same shards: not over the replicate group
    ewc_penalty_ = mp_.sum_over_groups(t.item<double>()) * ewc_lambda_ / 2;
  }

  // Completes the reductions in flight: each reduced slice (all-reduced over the replicate group
  // with hybrid sharding) added into its unit's gradient shard.
  void drain_pending() {
    torch::NoGradGuard no_grad;
    for (auto& p : pending_) {
      p.handle->wait();
      if (replicate_ != nullptr && replicate_->size() > 1) replicate_->all_reduce_sum(p.part)->wait();
      units_[p.unit].grad_shard.add_(p.part);
    }
    pending_.clear();
  }

  ModelStateBytes current() const {
    std::vector<torch::Tensor> weights, grads;
    for (const auto& unit : units_) {
      weights.push_back(unit.shard);
      weights.push_back(unit.full);
      grads.push_back(unit.grad_shard);
      grads.push_back(unit.full_grad);
    }
    for (const auto& p : pending_) {
      grads.push_back(p.part);
      grads.push_back(p.input);
    }
    ModelStateBytes b;
    b.weights = storage_bytes(weights);
    b.grads = storage_bytes(grads);
    return b;
  }
  void note_peak() {
    const auto now = current();
    peak_.weights = std::max(peak_.weights, now.weights);
    peak_.grads = std::max(peak_.grads, now.grads);
  }

  // A group of one (the routed experts over an expert-dp of 1): the shard is the whole unit, which
  // is then used in place (no gathered copy), and gradients accumulate into it directly.
  bool alone() const { return shard_.size() == 1; }

  // Starts gathering unit u into a whole buffer, asynchronously (no-op when gathered or under way).
  void prefetch(std::size_t u) {
    auto& unit = units_[u];
    if (unit.gathered || unit.gathering || unit.params.empty() || alone()) return;
    torch::NoGradGuard no_grad;
    unit.full = torch::empty({unit.layout.padded_size()}, opts_);
    unit.gathering = shard_.all_gather(unit.shard, unit.full);
    note_peak();
  }

  void gather(std::size_t u) {
    auto& unit = units_[u];
    if (unit.gathered || unit.params.empty()) return;
    torch::NoGradGuard no_grad;
    if (alone()) {
      unit.full = unit.shard;
    } else {
      prefetch(u);
      unit.gathering->wait();
      unit.gathering.reset();
    }
    for (const auto k : unit.params) {
      auto& p = params_[k];
      p.tensor.set_data(unit.full.narrow(0, p.offset, shape_numel(p.shape)).view(p.shape));
    }
    unit.gathered = true;
    note_peak();
  }

  void release(std::size_t u) {
    auto& unit = units_[u];
    if (unit.gathering) {  // prefetched, never used: finish the collective before dropping its buffer
      unit.gathering->wait();
      unit.gathering.reset();
      unit.full = torch::Tensor();
    }
    if (!unit.gathered) return;
    for (const auto k : unit.params) params_[k].tensor.set_data(torch::empty({0}, opts_));
    unit.full = torch::Tensor();
    unit.gathered = false;
  }

  void prepare_gradients(std::size_t u) {
    auto& unit = units_[u];
    if (unit.full_grad.defined() || unit.params.empty()) return;  // the experts' part has no root
    unit.full_grad = alone() ? unit.grad_shard : torch::zeros({unit.layout.padded_size()}, opts_);
    unit.grads_in = 0;
    for (const auto k : unit.params) {
      auto& p = params_[k];
      p.tensor.mutable_grad() = unit.full_grad.narrow(0, p.offset, shape_numel(p.shape)).view(p.shape);
    }
    note_peak();
  }

  AdamWOptions options_;
  Communicator& shard_;
  Communicator* replicate_;
  ModelParallelNorm mp_;
  torch::TensorOptions opts_;
  std::vector<Param> params_;
  std::vector<Unit> units_;  // [0] root, [1 + i] layer i
  std::vector<Pending> pending_;
  bool frozen_ = false;
  bool offload_ = false;
  std::int64_t steps_done_ = 0;
  double ewc_lambda_ = 0;
  double ewc_penalty_ = 0;
  ModelStateBytes peak_;
};

}  // namespace

std::unique_ptr<FullyShardedModel> make_fully_sharded(const NamedParams& params, const AdamWOptions& options,
                                                      Communicator& shard, Communicator* replicate,
                                                      const ModelParallelNorm& mp, bool offload_optimizer) {
  return std::make_unique<FullyShardedImpl>(params, options, shard, replicate, mp, /*frozen=*/false, offload_optimizer);
}

std::unique_ptr<FullyShardedModel> make_fully_sharded_frozen(const NamedParams& params, Communicator& shard) {
  return std::make_unique<FullyShardedImpl>(params, AdamWOptions{}, shard, nullptr, ModelParallelNorm{},
                                            /*frozen=*/true);
}

}  // namespace cpt::exec
