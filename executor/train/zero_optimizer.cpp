// ZeRO-1/2 over the data-parallel group (Rajbhandari et al. 2020, P_os and P_os+g), with the
// gradient reduction in buckets overlapped with backward (Megatron's distributed optimizer,
// DeepSpeed's overlap_comm).
//
// Layout. The parameters are one flat vector in the order given (the trainer's: spec/
// parameter_order.h), cut into gradient buckets by spec::reverse_order_buckets (the order backward
// produces them), and each bucket is split over
// the group by spec::ShardLayout: rank r owns slice r of every bucket. Its shard is those slices
// one after the other (bucket 0 first). A segment is the part of one parameter inside one owned
// slice; AdamW runs per segment (so weight decay follows the parameter), and the parameters are
// fp32, so there is no separate master copy.
//
// Reduction. A bucket is reduce-scattered, asynchronously, as soon as backward has produced the
// gradients it waits for, so reductions overlap the rest of backward:
//  - accumulate (stage 1, and stage 2 under a pipeline schedule, whose microbatches' backward
//    passes interleave): every .grad is a view into one full gradient buffer (bucket by bucket,
//    each padded for its split), autograd accumulates the step's microbatches into it, and a
//    bucket reduces when each of its parameters has had its last gradient of the step; the slice
//    comes back into the buffer, which the step then reads.
//  - per microbatch (stage 2): there is no full buffer. Autograd hands each parameter's gradient
//    over in .grad, which a hook copies into its bucket's staging buffer and drops; a full bucket
//    reduce-scatters into a slice that is added into the gradient shard, and its staging buffer is
//    freed. One reduction is in flight while the next bucket fills, so stage 2 holds the shard and
//    about two buckets (measured.json reports the peak).
// Update: the global norm is the square root of the all-reduced shard norms²; after AdamW each
// bucket's updated slices are all-gathered (into the full buffer, or a buffer of the bucket's size)
// back into the parameters. Checkpoints gather the moments into the same per-parameter names as a
// single process, so a checkpoint moves between layouts.
#include <cmath>
#include <deque>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/measure/storage_bytes.h"
#include "executor/model/llama_model.h"
#include "executor/parallel/gradient_hook.h"
#include "executor/train/step_optimizer.h"
#include "spec/gradient_buckets.h"
#include "spec/shard_layout.h"

namespace cpt::exec {

namespace {

using core::str_cat;

class ZeroOptimizer : public StepOptimizer {
 public:
  ZeroOptimizer(const NamedParams& params, const AdamWOptions& options, Communicator& dp, const ZeroOptions& zero,
                const ModelParallelNorm& mp)
      : options_(options), dp_(dp), mp_(mp), offload_(zero.offload),
        per_microbatch_(zero.stage == 2 && zero.reduce_each_microbatch) {
    CPT_CHECK(zero.stage == 1 || zero.stage == 2, "ZeRO stage ", zero.stage, " is not this optimizer's");
    CPT_CHECK(!params.empty(), "nothing to optimize");
    std::vector<std::int64_t> numels;
    std::int64_t at = 0;
    for (const auto& [name, p] : params) {
      params_.push_back({name, p, at, 0});
      numels.push_back(p.numel());
      at += p.numel();
    }
    opts_ = torch::TensorOptions(torch::kFloat32).device(params.front().second.device());
    const auto cap = std::max<std::int64_t>(1, zero.bucket_bytes / static_cast<std::int64_t>(sizeof(float)));
    const int n = dp_.size(), me = dp_.rank();
    std::int64_t shard_at = 0, buffer_at = 0;
    for (const auto& range : spec::reverse_order_buckets(numels, cap)) {
      Bucket b{range, spec::ShardLayout(range.size(), n), shard_at, buffer_at};
      for (std::size_t k = range.first_param; k < range.end_param; ++k) params_[k].bucket = buckets_.size();
      shard_at += b.layout.shard_size();
      buffer_at += b.layout.padded_size();
      buckets_.push_back(std::move(b));
    }
    // With offload the optimizer state (moments, the shard's fp32 master and the step counts) lives
    // in host memory and the update runs on the CPU (DeepSpeed's ZeRO-Offload).
    const auto state_opts = offload_ ? torch::TensorOptions(torch::kFloat32).device(torch::kCPU) : opts_;
    exp_avg_ = torch::zeros({shard_at}, state_opts);
    exp_avg_sq_ = torch::zeros({shard_at}, state_opts);
    if (offload_) master_ = torch::zeros({shard_at}, state_opts);
    if (per_microbatch_) {
      grad_shard_ = torch::zeros({shard_at}, opts_);
    } else {
      buffer_ = torch::zeros({buffer_at}, opts_);
    }
    for (const auto& b : buckets_) {
      const auto mine = b.layout.unpadded_slice(me);  // bucket-local
      for (std::size_t k = b.range.first_param; k < b.range.end_param; ++k) {
        const auto& p = params_[k];
        const auto local = p.offset - b.range.begin;  // the parameter's first element in the bucket
        const auto begin = std::max(local, mine.offset);
        const auto end = std::min(local + p.tensor.numel(), mine.offset + mine.size);
        if (begin >= end) continue;
        Segment s{k, begin - local, b.shard_offset + (begin - mine.offset), end - begin, !is_no_decay_parameter(p.name),
                  mp.counts(p.name), torch::zeros({}, state_opts), {}};
        // Where the reduced gradient of the segment is read: the shard, or this rank's slice of the
        // bucket inside the full buffer.
        s.grad = per_microbatch_ ? grad_shard_.narrow(0, s.shard_offset, s.length)
                                 : buffer_.narrow(0, b.buffer_offset + begin, s.length);
        segments_.push_back(std::move(s));
      }
    }
    torch::NoGradGuard no_grad;
    refresh_master();
    for (auto& p : params_) {
      if (!per_microbatch_) {
        auto view = buffer_view(p);
        if (p.tensor.grad().defined()) view.copy_(p.tensor.grad());  // a half-done step's gradients move in
        p.tensor.mutable_grad() = view;
      } else {
        p.tensor.mutable_grad() = torch::Tensor();  // autograd hands each gradient over fresh
      }
    }
    for (std::size_t k = 0; k < params_.size(); ++k) {
      set_gradient_hook(params_[k].tensor, [this, k] { on_gradient(k); });
    }
  }

  ~ZeroOptimizer() override {
    for (auto& p : params_) clear_gradient_hook(p.tensor);
  }

  void before_backward(int i, int n) override {
    if (per_microbatch_) {
      arm(1);  // each microbatch's gradients are reduced on their own
    } else if (i == 0) {
      arm(n);
    }
  }

  void after_backward(int i, int n) override {
    if (!per_microbatch_ && i + 1 < n) return;
    finish();
  }

  void on_gradient(std::size_t k) {
    if (!armed_) return;
    auto& p = params_[k];
    CPT_CHECK(p.count < expected_, "parameter ", p.name, " produced more gradients than backward passes");
    auto& b = buckets_[p.bucket];
    if (per_microbatch_) {
      torch::NoGradGuard no_grad;
      if (!b.staging.defined()) {
        b.staging = take_staging(b);
        note_peak();
      }
      b.staging.narrow(0, p.offset - b.range.begin, p.tensor.numel()).view_as(p.tensor).copy_(p.tensor.grad());
      p.tensor.mutable_grad() = torch::Tensor();
    } else {
      CPT_CHECK(p.tensor.grad().storage().is_alias_of(buffer_.storage()), "parameter ", p.name,
                "'s gradient left the gradient buffer");
    }
    if (++p.count < expected_) return;
    if (++b.filled == b.range.end_param - b.range.first_param) reduce(p.bucket);
  }

  double grad_norm() override {
    std::vector<torch::Tensor> norms;
    for (const auto& s : segments_) {
      if (s.counted) norms.push_back(torch::linalg_vector_norm(s.grad));
    }
    auto sq = norms.empty() ? torch::zeros({1}, torch::kFloat64)
                            : torch::stack(norms).to(torch::kFloat64).pow(2).sum().reshape({1}).cpu();
    dp_.all_reduce_sum(sq)->wait();
    return std::sqrt(mp_.sum_over_groups(sq.item<double>()));
  }

  void step(double lr, double scale) override {
    torch::NoGradGuard no_grad;
    for (const bool decay : {true, false}) {
      std::vector<torch::Tensor> w, g, m, v, steps;
      for (auto& s : segments_) {
        if (s.decay != decay) continue;
        // The gradient goes to the host with offload (a copy there, also on a CPU device).
        auto grad = offload_ ? s.grad.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : s.grad;
        if (scale != 1.0) grad.mul_(scale);
        w.push_back(offload_ ? master_.narrow(0, s.shard_offset, s.length) : piece(s));
        g.push_back(grad);
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
    gather_parameters();
    zero_grad();
  }

  void zero_grad() override {
    torch::NoGradGuard no_grad;
    if (per_microbatch_) {
      grad_shard_.zero_();
    } else {
      buffer_.zero_();
    }
  }

  ModelStateBytes state_bytes() const override {
    std::vector<torch::Tensor> weights, grads{buffer_, grad_shard_}, counters;
    for (const auto& p : params_) {
      weights.push_back(p.tensor);
      grads.push_back(p.tensor.grad());
    }
    for (const auto& s : segments_) counters.push_back(s.step);
    // Optimizer state counted where the parameters live: offloaded to a GPU's host it is 0 here.
    const bool on_device = !offload_ || exp_avg_.device() == opts_.device();
    // Per microbatch the gradients' peak is inside backward (the shard and the staging buffers).
    return {storage_bytes(weights), std::max(peak_grads_, storage_bytes(grads)),
            on_device ? storage_bytes({exp_avg_, exp_avg_sq_, master_}) : 0, on_device ? storage_bytes(counters) : 0};
  }

  NamedParams full_state() override {
    // Gathered on the parameters' device (the communicator's), wherever the state lives.
    const auto m = unshard(exp_avg_), v = unshard(exp_avg_sq_);
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
    // Every rank must agree on the count, also one that owns no segment (its slices are all padding).
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
    std::size_t bucket;
    int count = 0;  // gradients accumulated since arm()
  };
  struct Bucket {
    spec::GradientBucket range;
    spec::ShardLayout layout;  // the bucket split over the group
    std::int64_t shard_offset;   // this rank's slice of the bucket inside its shard
    std::int64_t buffer_offset;  // the (padded) bucket inside the full buffer (accumulate mode)
    std::size_t filled = 0;      // parameters complete since arm()
    torch::Tensor staging{};     // per-microbatch mode, while filling or reducing
  };
  struct Segment {
    std::size_t param;
    std::int64_t param_offset;  // first element inside the parameter
    std::int64_t shard_offset;  // first element inside this rank's shard
    std::int64_t length;
    bool decay;
    bool counted;  // in the global gradient norm (ModelParallelNorm::counts)
    torch::Tensor step;
    torch::Tensor grad;  // the reduced gradient of the segment (a view)
  };
  struct Reduction {
    std::size_t bucket;
    torch::Tensor part;  // this rank's slice of the sum
    std::unique_ptr<CommHandle> handle;
  };

  void arm(int backwards) {
    armed_ = true;
    expected_ = backwards;
    for (auto& p : params_) p.count = 0;
    for (auto& b : buckets_) b.filled = 0;
  }

  // Every bucket not reduced yet (a parameter without a gradient this time: zeros) joins in bucket
  // order; then all reductions land. Buckets reduce in the order they complete, which is the same
  // on every rank as long as every rank's backward produces the same gradients in the same order
  // (the same model and schedule; DDP assumes the same).
  void finish() {
    armed_ = false;
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      auto& b = buckets_[k];
      if (b.filled == b.range.end_param - b.range.first_param) continue;
      if (per_microbatch_ && !b.staging.defined()) {
        b.staging = take_staging(b);
        note_peak();
      }
      b.filled = b.range.end_param - b.range.first_param;
      reduce(k);
    }
    while (!in_flight_.empty()) land_oldest();
  }

  // Starts the reduce-scatter of bucket k into a slice of its own. Per microbatch, one reduction is
  // in flight while the next bucket fills (the one before lands first), so two buckets' staging
  // buffers exist at a time, like FSDP's one reduce-scatter in flight.
  void reduce(std::size_t k) {
    if (per_microbatch_) {
      while (!in_flight_.empty()) land_oldest();
    }
    auto& b = buckets_[k];
    const auto input = per_microbatch_ ? b.staging.narrow(0, 0, b.layout.padded_size())
                                       : buffer_.narrow(0, b.buffer_offset, b.layout.padded_size());
    auto part = torch::empty({b.layout.shard_size()}, opts_);
    auto handle = dp_.reduce_scatter_sum(input, part);
    in_flight_.push_back({k, part, std::move(handle)});
  }

  // Waits for the oldest reduction and puts its slice where the step reads it.
  void land_oldest() {
    torch::NoGradGuard no_grad;
    auto r = std::move(in_flight_.front());
    in_flight_.pop_front();
    r.handle->wait();
    auto& b = buckets_[r.bucket];
    if (per_microbatch_) {
      grad_shard_.narrow(0, b.shard_offset, b.layout.shard_size()).add_(r.part);
      b.staging = torch::Tensor();
    } else {
      buffer_.narrow(0, b.buffer_offset + b.layout.slice(dp_.rank()).offset, b.layout.shard_size()).copy_(r.part);
    }
  }

  // A zeroed staging buffer of bucket b's (padded) size, freed when its reduction lands.
  torch::Tensor take_staging(const Bucket& b) {
    return torch::zeros({b.layout.padded_size()}, opts_);
  }

  // The largest gradient storage this step held: the shard plus the staging buffers alive at once.
  void note_peak() {
    std::vector<torch::Tensor> grads{grad_shard_};
    for (const auto& b : buckets_) grads.push_back(b.staging);
    peak_grads_ = std::max(peak_grads_, storage_bytes(grads));
  }

  // Every rank's updated slices, back into every parameter, bucket by bucket, through the full
  // buffer (no longer needed by the step) or the staging buffers.
  void gather_parameters() {
    torch::NoGradGuard no_grad;
    // This rank's updated shard (the host master with offload; padding zero).
    auto mine = torch::zeros({exp_avg_.numel()}, opts_);
    for (const auto& s : segments_) {
      mine.narrow(0, s.shard_offset, s.length).copy_(offload_ ? master_.narrow(0, s.shard_offset, s.length) : piece(s));
    }
    for (const auto& b : buckets_) {
      // The whole bucket: the full buffer (no longer needed by the step) or a buffer of the bucket's
      // size (per microbatch, where every staging buffer has been freed by now).
      auto whole = per_microbatch_ ? torch::empty({b.layout.padded_size()}, opts_)
                                   : buffer_.narrow(0, b.buffer_offset, b.layout.padded_size());
      dp_.all_gather(mine.narrow(0, b.shard_offset, b.layout.shard_size()), whole)->wait();
      for (std::size_t j = b.range.first_param; j < b.range.end_param; ++j) {
        auto& p = params_[j];
        p.tensor.detach().copy_(whole.narrow(0, p.offset - b.range.begin, p.tensor.numel()).view_as(p.tensor));
      }
    }
  }

  // A shard-shaped tensor of every rank, gathered and put back in flat (registration) order.
  torch::Tensor unshard(const torch::Tensor& shard) {
    const int n = dp_.size();
    auto gathered = torch::empty({n * shard.numel()}, opts_);
    dp_.all_gather(shard.to(opts_.device()), gathered)->wait();
    const auto rows = gathered.view({n, shard.numel()});
    auto flat = torch::empty({params_.empty() ? 0 : buckets_.front().range.end}, opts_);
    for (const auto& b : buckets_) {
      const auto whole = rows.narrow(1, b.shard_offset, b.layout.shard_size()).reshape({-1});
      flat.narrow(0, b.range.begin, b.range.size()).copy_(whole.narrow(0, 0, b.range.size()));
    }
    return flat;
  }

  torch::Tensor buffer_view(const Param& p) const {
    const auto& b = buckets_[p.bucket];
    return buffer_.narrow(0, b.buffer_offset + (p.offset - b.range.begin), p.tensor.numel()).view_as(p.tensor);
  }
  // The shard's fp32 master copy on the host, from the parameters (offload only).
  void refresh_master() {
    if (!offload_) return;
    for (const auto& s : segments_) master_.narrow(0, s.shard_offset, s.length).copy_(piece(s));
  }
  torch::Tensor piece(const Segment& s) const {
    return params_[s.param].tensor.detach().view({-1}).narrow(0, s.param_offset, s.length);  // a view: updated in place
  }

  AdamWOptions options_;
  Communicator& dp_;
  ModelParallelNorm mp_;
  bool offload_;
  bool per_microbatch_;
  torch::TensorOptions opts_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<Segment> segments_;
  std::int64_t peak_grads_ = 0;  // bytes, per-microbatch mode (note_peak)
  torch::Tensor exp_avg_, exp_avg_sq_;
  torch::Tensor buffer_;      // accumulate mode: the full gradient buffer
  torch::Tensor grad_shard_;  // per-microbatch mode: the summed gradient of this rank's slices
  std::deque<Reduction> in_flight_;
  torch::Tensor master_;  // offload only: this rank's shard of the parameters, fp32, on the host
  std::int64_t steps_done_ = 0;
  bool armed_ = false;
  int expected_ = 0;
};

}  // namespace

std::unique_ptr<StepOptimizer> make_zero_optimizer(const NamedParams& params, const AdamWOptions& options,
                                                   Communicator& dp, const ZeroOptions& zero,
                                                   const ModelParallelNorm& mp) {
  return std::make_unique<ZeroOptimizer>(params, options, dp, zero, mp);
}

}  // namespace cpt::exec
