#include "executor/parallel/data_parallel.h"

#include "core/check.h"

namespace cpt::exec {

DataParallelGrads::DataParallelGrads(std::vector<torch::Tensor> params, Communicator& dp, std::int64_t bucket_bytes)
    : params_(std::move(params)), dp_(dp) {
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  seen_.assign(params_.size(), false);
  count_.assign(params_.size(), 0);
  if (dp_.size() == 1) return;
  std::int64_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const std::int64_t b = p.numel() * static_cast<std::int64_t>(p.element_size());
    if (buckets_.empty() || (bytes > 0 && bytes + b > bucket_bytes)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    auto& bucket = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = bucket.params.size();
    bucket.params.push_back(k);
    bytes += b;
  }
  for (auto& bucket : buckets_) {
    std::int64_t n = 0;
    for (const auto k : bucket.params) {
      bucket.offsets.push_back(n);
      n += params_[k].numel();
    }
    bucket.flat = torch::zeros({n}, params_[bucket.params.front()].options());
  }
  for (std::size_t k = 0; k < params_.size(); ++k) {
    params_[k].register_hook([this, k](torch::Tensor grad) {
      if (armed_ && ++count_[k] == expected_) on_grad(k, grad);
      return grad;
    });
  }
}

DataParallelGrads::~DataParallelGrads() = default;

void DataParallelGrads::arm(int backwards_per_step) {
  if (dp_.size() == 1) return;
  armed_ = true;
  expected_ = backwards_per_step;
  std::fill(seen_.begin(), seen_.end(), false);
  std::fill(count_.begin(), count_.end(), 0);
  for (auto& b : buckets_) b.filled = 0;
}

void DataParallelGrads::on_grad(std::size_t k, const torch::Tensor& grad) {
  CPT_CHECK(!seen_[k], "parameter ", k, " produced more gradients than backward passes in one step");
  seen_[k] = true;
  auto& b = buckets_[bucket_of_[k]];
  auto slot = b.flat.narrow(0, b.offsets[slot_of_[k]], params_[k].numel()).view_as(params_[k]);
  torch::NoGradGuard no_grad;
  // The gradient this backward produces plus what earlier microbatches accumulated in .grad.
  const auto& acc = params_[k].grad();
  if (acc.defined()) {
    torch::add_out(slot, acc, grad);
  } else {
    slot.copy_(grad);
  }
  if (++b.filled == b.params.size()) b.pending = dp_.all_reduce_sum(b.flat);
}

void DataParallelGrads::finish() {
  if (dp_.size() == 1) return;
  armed_ = false;
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    // A parameter without a gradient in this backward (unused) still joins the reduction, as zeros
    // or what it accumulated, so every replica reduces the same buckets.
    if (!b.pending) {
      for (std::size_t i = 0; i < b.params.size(); ++i) {
        const auto k = b.params[i];
        if (seen_[k]) continue;
        auto slot = b.flat.narrow(0, b.offsets[i], params_[k].numel()).view_as(params_[k]);
        if (params_[k].grad().defined()) {
          slot.copy_(params_[k].grad());
        } else {
          slot.zero_();
        }
      }
      b.pending = dp_.all_reduce_sum(b.flat);
    }
  }
  for (auto& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      const auto k = b.params[i];
      auto reduced = b.flat.narrow(0, b.offsets[i], params_[k].numel()).view_as(params_[k]);
      if (params_[k].grad().defined()) {
        params_[k].mutable_grad().copy_(reduced);
      } else {
        params_[k].mutable_grad() = reduced.clone();
      }
    }
  }
}

}  // namespace cpt::exec
