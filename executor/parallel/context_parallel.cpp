#include "executor/parallel/context_parallel.h"

#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/parallel/tensor_parallel.h"
#include "spec/sequence_split.h"

namespace cpt::exec {

namespace {

torch::Tensor index_tensor(const std::vector<std::int64_t>& v, const torch::Device& device) {
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kInt64)).to(device);
}

// What the split of an S-token sequence over `cp` needs on `device`, built once per (S, cp, rank,
// device): a step slices every microbatch and gathers keys and values in every layer. The
// reference is valid until the next call.
struct SplitTensors {
  torch::Tensor positions;       // this rank's positions (spec::sequence_positions_of_rank)
  torch::Tensor gathered_order;  // gathered row of each position (spec::gathered_row_of_position)
  torch::Tensor causal_rows;     // [1, 1, S/cp, S] causal mask rows of this rank's queries
};

const SplitTensors& split_tensors(std::int64_t S, const ContextParallel& cp, const torch::Device& device) {
  thread_local std::map<std::tuple<std::int64_t, int, int, std::string>, SplitTensors> cache;
  const auto key = std::make_tuple(S, cp.size(), cp.rank(), device.str());
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  // Padded packing gives each microbatch its own width: keep a few, not every width seen.
  if (cache.size() >= 8) cache.clear();
  SplitTensors t;
  t.positions = index_tensor(spec::sequence_positions_of_rank(S, cp.size(), cp.rank()), device);
  t.gathered_order = index_tensor(spec::gathered_row_of_position(S, cp.size()), device);
  t.causal_rows = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(device))
                      .tril()
                      .index_select(0, t.positions)
                      .view({1, 1, -1, S})
                      .contiguous();
  return cache.emplace(key, std::move(t)).first->second;
}

}  // namespace

Batch context_parallel_slice(const Batch& full, const ContextParallel& cp) {
  if (!cp.active()) return full;
  const std::int64_t S = full.tokens.size(1);
  if (auto e = spec::find_sequence_split_error(S, cp.size()))
    throw core::ConfigError(core::str_cat("context parallelism: ", *e));
  const auto& split = split_tensors(S, cp, full.tokens.device());
  const auto& idx = split.positions;
  Batch b;
  b.tokens = full.tokens.index_select(1, idx);
  b.targets = full.targets.index_select(1, idx);
  b.positions = full.positions.index_select(1, idx);
  // Rows of this rank's queries against all S keys: the document mask's, or the causal one.
  b.mask = full.mask.defined() ? full.mask.index_select(2, idx).contiguous() : split.causal_rows;
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<std::int64_t>();
  if (full.real_tokens.defined()) b.real_tokens = full.real_tokens.index_select(1, idx);
  return b;
}

torch::Tensor gather_context(const torch::Tensor& local, const ContextParallel& cp) {
  if (!cp.active()) return local;
  // Rows of the gathered tensor: rank 0's tokens, rank 1's, ...; put back in sequence order.
  const auto gathered = gather_sequence(local.contiguous(), *cp.group);
  return gathered.index_select(1, split_tensors(gathered.size(1), cp, local.device()).gathered_order);
}

}  // namespace cpt::exec
