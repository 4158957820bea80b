#include "executor/parallel/tensor_parallel.h"

#include <ATen/record_function.h>

#include <limits>

#include "core/check.h"
#include "executor/data/batch.h"
#include "executor/measure/op_kind.h"
#include "spec/model_spec.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The communicator travels through the autograd context as an integer: groups outlive every step.
std::int64_t as_int(Communicator& c) {
  return reinterpret_cast<std::int64_t>(&c);
}
Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

torch::Tensor all_reduced(const torch::Tensor& x, Communicator& c) {
  auto y = x.contiguous().clone();
  c.all_reduce_sum(y)->wait();
  return y;
}

// [B, S_local, ...] of every rank -> [B, size·S_local, ...], rank order along S.
torch::Tensor all_gathered_dim1(const torch::Tensor& x, Communicator& c) {
  auto t = x.transpose(0, 1).contiguous();  // [S_local, B, ...]
  auto sizes = t.sizes().vec();
  sizes[0] *= c.size();
  auto out = torch::empty(sizes, t.options());
  c.all_gather(t, out)->wait();
  return out.transpose(0, 1);
}

// [B, S, ...] summed over the ranks -> this rank's [B, S/size, ...].
torch::Tensor reduce_scattered_dim1(const torch::Tensor& x, Communicator& c) {
  auto t = x.transpose(0, 1).contiguous();  // [S, B, ...]
  CPT_CHECK(t.size(0) % c.size() == 0, "sequence of ", t.size(0), " not divisible by the tensor-parallel size ",
            c.size());
  auto sizes = t.sizes().vec();
  sizes[0] /= c.size();
  auto out = torch::empty(sizes, t.options());
  c.reduce_scatter_sum(t, out)->wait();
  return out.transpose(0, 1);
}

struct CopyToTp : public torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_reduced(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

struct GatherSequence : public torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_gathered_dim1(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduce_scattered_dim1(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

struct ReduceScatterSequence : public torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return reduce_scattered_dim1(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gathered_dim1(g[0], comm_of(ctx)), torch::Tensor()};
  }
};

std::int64_t rows_per_rank(std::int64_t rows, int tp) {
  return rows / tp;
}

}  // namespace

TpSplit tp_split_of(const std::string& name) {
  if (name == "embed_tokens.weight" || name == "lm_head.weight") return TpSplit::kVocabRows;
  for (const char* m : {"q_proj.", "k_proj.", "v_proj.", "q_b_proj.", "kv_b_proj.", "gate_proj.", "up_proj."}) {
    if (name.find(m) != std::string::npos) return TpSplit::kRows;
  }
  for (const char* m : {"o_proj.", "down_proj."}) {
    if (name.find(m) != std::string::npos) return TpSplit::kColumns;
  }
  return TpSplit::kReplicated;
}

const TensorParallel& ParameterSplits::group_of(const std::string& name) const {
  return spec::is_routed_expert(name) ? etp : tp;
}

torch::Tensor tp_shard_of_full(const std::string& name, const torch::Tensor& full, std::int64_t vocab,
                               const ParameterSplits& splits) {
  const TensorParallel& tp = splits.group_of(name);
  if (!tp.active()) return full;
  const int n = tp.size(), r = tp.rank();
  switch (tp_split_of(name)) {
    case TpSplit::kReplicated:
      return full;
    case TpSplit::kRows: {
      CPT_CHECK(full.size(0) % n == 0, name, ": ", full.size(0), " rows not divisible by tp ", n);
      const auto k = rows_per_rank(full.size(0), n);
      return full.narrow(0, r * k, k);
    }
    case TpSplit::kColumns: {
      CPT_CHECK(full.size(1) % n == 0, name, ": ", full.size(1), " columns not divisible by tp ", n);
      const auto k = full.size(1) / n;
      return full.narrow(1, r * k, k);
    }
    case TpSplit::kVocabRows: {
      CPT_CHECK(full.size(0) == vocab, name, ": ", full.size(0), " rows, the vocabulary is ", vocab);
      const auto k = spec::tp_padded_vocab(vocab, n) / n;
      const auto begin = r * k;
      const auto real = std::max<std::int64_t>(0, std::min(vocab, begin + k) - begin);
      auto shard = torch::zeros({k, full.size(1)}, full.options());
      if (real > 0) shard.narrow(0, 0, real).copy_(full.narrow(0, begin, real));
      return shard;
    }
  }
  return full;
}

std::vector<std::int64_t> tp_full_shape(const std::string& name, c10::IntArrayRef local, std::int64_t vocab,
                                        const ParameterSplits& splits) {
  const TensorParallel& tp = splits.group_of(name);
  auto s = local.vec();
  switch (tp_split_of(name)) {
    case TpSplit::kReplicated:
      break;
    case TpSplit::kRows:
      s[0] *= tp.size();
      break;
    case TpSplit::kColumns:
      s[1] *= tp.size();
      break;
    case TpSplit::kVocabRows:
      s[0] = vocab;
      break;
  }
  return s;
}

torch::Tensor tp_full_from_shards(const std::string& name, const torch::Tensor& shard, std::int64_t vocab,
                                  const ParameterSplits& splits) {
  const TensorParallel& tp = splits.group_of(name);
  const auto split = tp_split_of(name);
  if (!tp.active() || split == TpSplit::kReplicated) return shard;
  auto& c = *tp.group;
  const int n = c.size();
  auto local = shard.detach().contiguous();
  auto sizes = local.sizes().vec();
  sizes.insert(sizes.begin(), n);
  auto gathered = torch::empty(sizes, local.options());  // [tp, local...]
  c.all_gather(local, gathered)->wait();
  switch (split) {
    case TpSplit::kRows:
      return gathered.reshape(tp_full_shape(name, local.sizes(), vocab, splits));
    case TpSplit::kColumns:  // [tp, out, k] -> [out, tp·k]
      return gathered.permute({1, 0, 2}).reshape({local.size(0), n * local.size(1)});
    case TpSplit::kVocabRows:
      return gathered.reshape({n * local.size(0), local.size(1)}).narrow(0, 0, vocab).contiguous();
    case TpSplit::kReplicated:
      break;
  }
  return shard;
}

torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : CopyToTp::apply(x, as_int(tp));
}
torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : ReduceFromTp::apply(x, as_int(tp));
}
torch::Tensor gather_sequence(const torch::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : GatherSequence::apply(x, as_int(tp));
}
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Communicator& tp) {
  return tp.size() == 1 ? x : ReduceScatterSequence::apply(x, as_int(tp));
}

torch::Tensor enter_tp_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return tp.sp() ? gather_sequence(x, *tp.group) : copy_to_tp(x, *tp.group);
}
torch::Tensor leave_tp_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return tp.sp() ? reduce_scatter_sequence(x, *tp.group) : reduce_from_tp(x, *tp.group);
}

torch::Tensor vocab_parallel_embedding_partial(const torch::Tensor& tokens, const torch::Tensor& weight,
                                               std::int64_t first_row) {
  const auto outside = (tokens < first_row).logical_or(tokens >= first_row + weight.size(0));
  const auto local = (tokens - first_row).masked_fill(outside, 0);
  return torch::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
}

namespace {

// Megatron-LM's vocabulary-parallel cross-entropy as one autograd function: forward shifts the
// rank's fp32 copy of its logits by the global max, picks the target logits it holds, takes exp in
// place and sums it, reduces the sums and the picked logits over the group in one all-reduce, and
// keeps the softmax of its columns; backward is softmax − one-hot on this rank's columns times the
// incoming gradient, no communication (the loss is the same whole number on every rank). Five
// passes over [B, S, V_r] forward and two backward, where composing ATen operators took a dozen
// (the exp twice, a gather's backward into a zeroed copy).
struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local_logits, const torch::Tensor& targets,
                               std::int64_t first_row, std::int64_t comm) {
    RECORD_USER_SCOPE(kCrossEntropyScope);  // a step profile's "loss" (measure/op_kind.h)
    auto& tp = *reinterpret_cast<Communicator*>(comm);
    auto probs = local_logits.detach().to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);  // [B, S, V_r]
    const auto local_max = probs.amax(-1).contiguous();                                             // [B, S]
    auto sizes = local_max.sizes().vec();
    sizes.insert(sizes.begin(), tp.size());
    auto maxima = torch::empty(sizes, local_max.options());
    tp.all_gather(local_max, maxima)->wait();
    probs.sub_(maxima.amax(0).unsqueeze(-1));
    const auto v = probs.size(-1);
    const auto mine = (targets >= first_row).logical_and(targets < first_row + v);  // [B, S]
    const auto index = (targets - first_row).masked_fill(mine.logical_not(), 0).unsqueeze(-1);
    const auto mine_f = mine.to(torch::kFloat32);
    const auto picked = probs.gather(-1, index).squeeze(-1) * mine_f;  // before exp_ below
    auto sums = torch::stack({picked, probs.exp_().sum(-1)});          // [2, B, S]
    tp.all_reduce_sum(sums)->wait();
    const auto valid = (targets != kIgnoreIndex).to(torch::kFloat32);
    const auto loss = ((sums[1].log() - sums[0]) * valid).sum();
    probs.div_(sums[1].unsqueeze(-1));  // the softmax of this rank's columns
    ctx->save_for_backward({probs, index, mine_f, valid});
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(local_logits.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    auto grad = saved[0];  // the softmax, used once: updated in place
    grad.scatter_add_(-1, saved[1], -saved[2].unsqueeze(-1));
    grad.mul_((saved[3] * g[0]).unsqueeze(-1));
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// logits − (the global max over the vocabulary), detached max; [B, S, V_r] fp32.
torch::Tensor shifted_by_global_max(const torch::Tensor& local_logits, Communicator& tp) {
  const auto logits = local_logits.to(torch::kFloat32);
  const auto local_max = std::get<0>(logits.detach().max(-1)).contiguous();  // [B, S]
  auto sizes = local_max.sizes().vec();
  sizes.insert(sizes.begin(), tp.size());
  auto all = torch::empty(sizes, local_max.options());
  tp.all_gather(local_max, all)->wait();
  return logits - std::get<0>(all.max(0)).unsqueeze(-1);
}

}  // namespace

torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                               std::int64_t first_row, Communicator& tp) {
  return VocabParallelCrossEntropy::apply(local_logits, targets, first_row, as_int(tp));
}

torch::Tensor vocab_parallel_log_softmax(const torch::Tensor& local_logits, Communicator& tp) {
  const auto shifted = shifted_by_global_max(local_logits, tp);
  // Z = Σ over ranks of each rank's Σ exp. The loss built on these columns is a sum over ranks of
  // per-rank terms, each depending on Z: ∂L/∂Z is the sum of every rank's part, so the backward of
  // the sum is an all-reduce too (copy_to_tp inside reduce_from_tp), unlike the cross-entropy's,
  // whose loss is computed whole on every rank after the reductions.
  const auto normaliser = reduce_from_tp(copy_to_tp(shifted.exp().sum(-1, /*keepdim=*/true), tp), tp);
  return shifted - normaliser.log();
}

}  // namespace cpt::exec
