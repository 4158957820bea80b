#include "executor/parallel/context_parallel.h"

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/sequence_split.h"

namespace cpt::exec {

namespace {

torch::Tensor index_tensor(const std::vector<std::int64_t>& v, const torch::Device& device) {
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kInt64)).to(device);
}

}  // namespace

Batch context_parallel_slice(const Batch& full, const ContextParallel& cp) {
  if (!cp.active()) return full;
  const std::int64_t S = full.tokens.size(1);
  if (auto e = spec::find_sequence_split_error(S, cp.size())) throw core::ConfigError(core::str_cat("context parallelism: ", *e));
  const auto idx = index_tensor(spec::sequence_positions_of_rank(S, cp.size(), cp.rank()), full.tokens.device());
  Batch b;
  b.tokens = full.tokens.index_select(1, idx);
  b.targets = full.targets.index_select(1, idx);
  b.positions = full.positions.index_select(1, idx);
  // Rows of this rank's queries against all S keys: the document mask's, or the causal one.
  const auto mask = full.mask.defined()
                        ? full.mask
                        : torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(full.tokens.device()))
                              .tril()
                              .view({1, 1, S, S});
  b.mask = mask.index_select(2, idx).contiguous();
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<std::int64_t>();
  return b;
}

torch::Tensor gather_context(const torch::Tensor& local, const ContextParallel& cp) {
  if (!cp.active()) return local;
  // Rows of the gathered tensor: rank 0's tokens, rank 1's, ...; put back in sequence order.
  const auto gathered = gather_sequence(local.contiguous(), *cp.group);
  const std::int64_t S = gathered.size(1);
  return gathered.index_select(1, index_tensor(spec::gathered_row_of_position(S, cp.size()), local.device()));
}

}  // namespace cpt::exec
