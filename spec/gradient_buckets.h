#pragma once
// Gradient buckets: how the parameters (a flat vector in registration order) are grouped for the
// data-parallel reduction. Backward produces gradients roughly in reverse registration order, so
// the buckets are filled from the last parameter back (DDP's and Megatron's rule): each bucket is
// a run of whole parameters, a contiguous range of the flat vector, of at most `cap_elements`
// elements; a parameter larger than the cap is a bucket alone. Bucket 0 holds the last parameters.
// Used by the executor's replicated buckets (parallel/data_parallel.h) and its ZeRO-1/2 optimizer
// (train/zero_optimizer.cpp, where each bucket is split over the shard group by ShardLayout).
//
// Example: parameters of 4, 4, 2 and 6 elements, cap 7 -> buckets [10, 16) (parameter 3),
// [4, 10) (parameters 1 and 2), [0, 4) (parameter 0).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace cpt::spec {

// The executor's default bucket (train config `dp_bucket_mib`, torch DDP's 25 MiB); the cost model
// prices cpt's executor with it (cost::as_run_by_cpt_executor).
inline constexpr std::int64_t kDefaultGradientBucketBytes = 25LL * 1024 * 1024;

struct GradientBucket {
  std::int64_t begin = 0;       // in elements of the flat vector
  std::int64_t end = 0;         // exclusive
  std::size_t first_param = 0;  // the parameters [first_param, end_param), in registration order
  std::size_t end_param = 0;
  [[nodiscard]] std::int64_t size() const { return end - begin; }
  bool operator==(const GradientBucket&) const = default;
};

// REQUIRES: cap_elements >= 1, every numel >= 0.
std::vector<GradientBucket> reverse_order_buckets(std::span<const std::int64_t> numels, std::int64_t cap_elements);

}  // namespace cpt::spec
