#include "executor/parallel/data_parallel.h"

#include <algorithm>

#include "core/check.h"
#include "executor/parallel/gradient_hook.h"
#include "spec/gradient_buckets.h"

namespace cpt::exec {

DataParallelGrads::DataParallelGrads(std::vector<torch::Tensor> params, Communicator& dp, std::int64_t bucket_bytes)
    : params_(std::move(params)), dp_(dp) {
  bucket_of_.assign(params_.size(), 0);
  count_.assign(params_.size(), 0);
  if (dp_.size() == 1) return;
  // The bucket rule lives in spec (reverse registration order, whole parameters up to the cap).
  std::vector<std::int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  const auto element_bytes = static_cast<std::int64_t>(params_.front().element_size());
  for (const auto& range : spec::reverse_order_buckets(numels, std::max<std::int64_t>(1, bucket_bytes / element_bytes))) {
    buckets_.emplace_back();
    for (std::size_t k = range.end_param; k-- > range.first_param;) {
      bucket_of_[k] = buckets_.size() - 1;
      buckets_.back().params.push_back(k);
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    std::int64_t n = 0;
    for (const auto k : bucket.params) n += params_[k].numel();
    bucket.flat = torch::zeros({n}, params_[bucket.params.front()].options());
    std::int64_t at = 0;
    for (const auto k : bucket.params) {
      auto& p = params_[k];
      // Accumulated gradients so far (a resumed or half-done step) move into the bucket.
      auto view = bucket.flat.narrow(0, at, p.numel()).view_as(p);
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      at += p.numel();
    }
  }
  for (std::size_t k = 0; k < params_.size(); ++k) {
    set_gradient_hook(params_[k], [this, k] { on_accumulated(k); });
  }
}

DataParallelGrads::~DataParallelGrads() {
  for (auto& p : params_) {
    if (dp_.size() > 1) clear_gradient_hook(p);
  }
}

void DataParallelGrads::arm(int backwards_per_step) {
  if (dp_.size() == 1) return;
  armed_ = true;
  expected_ = backwards_per_step;
  std::fill(count_.begin(), count_.end(), 0);
  for (auto& b : buckets_) b.filled = 0;
}

void DataParallelGrads::on_accumulated(std::size_t k) {
  if (!armed_) return;
  CPT_CHECK(count_[k] < expected_, "parameter ", k, " produced more gradients than backward passes in one step");
  CPT_CHECK(params_[k].grad().data_ptr() != nullptr &&
                params_[k].grad().storage().is_alias_of(buckets_[bucket_of_[k]].flat.storage()),
            "parameter ", k, "'s gradient left its bucket");
  if (++count_[k] < expected_) return;
  auto& b = buckets_[bucket_of_[k]];
  if (++b.filled == b.params.size()) b.pending = dp_.all_reduce_sum(b.flat);
}

void DataParallelGrads::finish() {
  if (dp_.size() == 1) return;
  armed_ = false;
  // A bucket with a parameter that got fewer gradients (unused) still joins the reduction with
  // what it holds, so every replica reduces the same buckets.
  for (auto& b : buckets_) {
    if (!b.pending) b.pending = dp_.all_reduce_sum(b.flat);
  }
  for (auto& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
  }
}

bool DataParallelGrads::zero_grad() {
  if (dp_.size() == 1) return false;
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) b.flat.zero_();
  return true;
}

std::vector<torch::Tensor> DataParallelGrads::buffers() const {
  std::vector<torch::Tensor> v;
  for (const auto& b : buckets_) v.push_back(b.flat);
  return v;
}

}  // namespace cpt::exec
