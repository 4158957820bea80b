#pragma once
// Bytes of tensor storage actually allocated, each storage counted once however many tensors view
// it (a .grad that is a view into a bucket, a narrow of a flat buffer): the executor's memory
// accounting by category (weights, gradients, optimizer state) that measured.json reports and the
// cost model predicts.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace cpt::exec {

// Σ nbytes of the distinct storages behind `tensors` (undefined tensors skipped).
std::int64_t storage_bytes(const std::vector<torch::Tensor>& tensors);

}  // namespace cpt::exec
