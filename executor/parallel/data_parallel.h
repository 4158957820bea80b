#pragma once
// Data parallelism without sharding (ZeRO-0): every replica holds all weights; after the last
// microbatch's backward of a step, each gradient is summed over the dp group. Gradients live in
// buckets (spec::reverse_order_buckets: the parameters in reverse of the order given — the
// trainer's, spec/parameter_order.h, whose reverse is the order backward produces them — up to
// bucket_bytes each): each parameter's .grad is a view into its bucket, so autograd
// accumulates straight into the buffer that is reduced and no gradient is stored twice (DDP's
// gradient_as_bucket_view). A bucket's all-reduce starts, asynchronously, as soon as backward has
// produced the last gradient of the step of each of its parameters, so reductions overlap the rest
// of backward (DDP's design; picotron's bucket.py). "Last" is counted per parameter (its n-th
// gradient of a step of n microbatches, seen by a post-accumulate-grad hook), so it also holds
// under pipeline schedules, where one chunk's last backward comes before another chunk's earlier
// ones.
//
// Gradients are summed, not averaged: the trainer scales each microbatch's loss by 1 / (loss tokens
// of the whole step over all replicas), so the sum is the gradient of the step's per-token mean.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/dist/communicator.h"

namespace cpt::exec {

class DataParallelGrads {
 public:
  // Registers gradient hooks on `params` (which must outlive this object) and, for a group of more
  // than one, points their .grad into the buckets. `dp`: the data-parallel group (a group of one
  // makes every call a no-op and leaves .grad to autograd).
  DataParallelGrads(std::vector<torch::Tensor> params, Communicator& dp, std::int64_t bucket_bytes);
  ~DataParallelGrads();
  DataParallelGrads(const DataParallelGrads&) = delete;
  DataParallelGrads& operator=(const DataParallelGrads&) = delete;

  // Call before the step's first backward, with the number of backward passes of the step
  // (microbatches): each parameter's last gradient completes its part of its bucket, and complete
  // buckets start reducing.
  void arm(int backwards_per_step);
  // Call after the step's last backward: waits for every bucket; .grad then holds the sums.
  void finish();
  // Zeroes the gradients in place (the views stay). False for a group of one (nothing to zero:
  // the caller clears .grad itself).
  bool zero_grad();
  // The buckets (empty for a group of one), for memory accounting.
  [[nodiscard]] std::vector<torch::Tensor> buffers() const;

 private:
  void on_accumulated(std::size_t param);  // the gradient hook of parameter `param`

  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    torch::Tensor flat;
    std::size_t filled = 0;
    std::unique_ptr<CommHandle> pending;
  };

  std::vector<torch::Tensor> params_;
  Communicator& dp_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<int> count_;              // per parameter: gradients accumulated this step
  int expected_ = 0;
  bool armed_ = false;
};

}  // namespace cpt::exec
