#pragma once
// Data parallelism without sharding (ZeRO-0): every replica holds all weights; after the last
// microbatch's backward of a step, each gradient is summed over the dp group. Gradients are packed
// into buckets (parameters in reverse registration order, which is roughly the order backward
// produces them, up to bucket_bytes each) and a bucket's all-reduce starts, asynchronously, as soon
// as backward has produced its last gradient of the step, so reductions overlap the rest of
// backward (DDP's design; picotron's bucket.py). "Last" is counted per parameter (its n-th
// gradient of a step of n microbatches), so it also holds under pipeline schedules, where one
// chunk's last backward comes before another chunk's earlier ones.
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
  // Registers gradient hooks on `params` (which must outlive this object). `dp`: the data-parallel
  // group (a group of one makes every call a no-op).
  DataParallelGrads(std::vector<torch::Tensor> params, Communicator& dp, std::int64_t bucket_bytes);
  ~DataParallelGrads();
  DataParallelGrads(const DataParallelGrads&) = delete;
  DataParallelGrads& operator=(const DataParallelGrads&) = delete;

  // Call before the step's first backward, with the number of backward passes of the step
  // (microbatches): each parameter's last gradient (plus what the earlier ones accumulated) fills
  // its bucket, and full buckets start reducing.
  void arm(int backwards_per_step);
  // Call after the step's last backward: waits for every bucket and writes the summed gradients to .grad.
  void finish();


 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::vector<std::int64_t> offsets;
    torch::Tensor flat;
    std::size_t filled = 0;
    std::unique_ptr<CommHandle> pending;
  };
  void on_grad(std::size_t param, const torch::Tensor& grad);

  std::vector<torch::Tensor> params_;
  Communicator& dp_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;    // per parameter
  std::vector<std::size_t> slot_of_;      // per parameter: its index in its bucket
  std::vector<int> count_;                // per parameter: gradients produced this step
  std::vector<bool> seen_;                // per parameter: its last gradient is in its bucket
  int expected_ = 0;
  bool armed_ = false;
};

}  // namespace cpt::exec
