#include "costmodel/memory_model.h"

#include <algorithm>
#include <cmath>

#include "costmodel/layer_costs.h"
#include "spec/shard_layout.h"

namespace cpt::cost {

using core::Bytes;

namespace {

Bytes bytes(double v) { return Bytes(static_cast<std::int64_t>(std::llround(v))); }

// Parameters of one transformer block per tp rank: attention and MLP matrices split over tp,
// norms (and row-parallel biases) replicated.
double block_params_per_tp(const spec::ModelSpec& m, int tp) {
  const auto c = m.param_counts();
  return static_cast<double>(c.attention_per_layer + c.mlp_per_layer) / tp + static_cast<double>(c.norms_per_layer);
}

}  // namespace

MemoryBreakdown model_state_bytes(double psi, int zero_stage, int n, const CostModelOptions& o) {
  const bool fp32 = o.precision == spec::Precision::kFp32;
  const double weight_b = fp32 ? 4 : 2;
  const double grad_b = (fp32 || o.fp32_main_grads) ? 4 : 2;
  const double optim_b = fp32 ? 8 : 12;  // (master copy +) two Adam moments, fp32
  const auto shard = spec::zero_sharding(zero_stage);
  MemoryBreakdown m;
  m.weights = bytes(weight_b * psi / (shard.parameters ? n : 1));
  m.grads = bytes(grad_b * psi / (shard.gradients ? n : 1));
  m.optimizer = bytes(optim_b * psi / (shard.optimizer_state ? n : 1));
  return m;
}

Bytes activation_bytes_per_layer(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len,
                                 const CostModelOptions& o) {
  const double e = activation_bytes(o.precision);
  const double t = p.tp;
  const double T = static_cast<double>(p.micro_batch) * seq_len / p.cp;  // tokens on this rank
  const double h = m.hidden, f = m.ffn_hidden, d = m.head_dim(), a = m.heads, g = m.kv_heads;
  const double sp = p.sequence_parallel ? t : 1.0;  // divisor of the tensors tp does not split
  const bool dropout = m.mlp == spec::MlpKind::kGelu;

  if (p.recompute == spec::Recompute::kFull) return bytes(e * T * h / sp);  // the block input only

  double v = 2 * e * T * h / sp;                  // inputs of the two norms
  v += e * T * h / sp;                            // QKV GEMM input
  v += e * T * (a + g) * d / t;                   // Q and K (after RoPE)
  v += e * T * g * d / t;                         // V
  v += e * T * a * d / t;                         // attention output = output-projection input
  v += e * T * h / sp;                            // MLP input
  v += (m.mlp == spec::MlpKind::kSwiGLU ? 3 : 2) * e * T * f / t;  // gate/up/product or GeLU in + FC2 in
  if (dropout) v += 2 * T * h / sp;               // attention and MLP dropout masks, 1 byte
  const bool scores_stored = !o.flash_attention && p.recompute == spec::Recompute::kNone;
  if (scores_stored) {
    // softmax output (+ dropout mask and output for GPT): 5·a·s²·b / t with dropout.
    v += (dropout ? 2 * e + 1 : e) * (a / t) * T * seq_len;
  } else if (o.flash_attention) {
    v += 4 * (a / t) * T;  // FlashAttention's fp32 log-sum-exp per query and head
  }
  return bytes(v);
}

double params_of_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p, const spec::StagePartition& stages,
                         int pp_rank) {
  return stages.layers_of_rank(pp_rank) * block_params_per_tp(m, p.tp) + root_params_of_pp_rank(m, p, stages, pp_rank);
}

double root_params_of_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p,
                              const spec::StagePartition& stages, int pp_rank) {
  const auto c = m.param_counts();
  const double vocab_rows = static_cast<double>(m.tp_padded_vocab(p.tp)) / p.tp;
  const int last = stages.num_stages() - 1;
  double psi = 0;
  for (int s : stages.stages_of_rank(pp_rank)) {
    if (s == 0) psi += vocab_rows * m.hidden + static_cast<double>(c.position);
    if (s == last) {
      psi += static_cast<double>(c.final_norm);
      if (!m.tied_embeddings || last != 0) psi += vocab_rows * m.hidden;
    }
  }
  return psi;
}

int shard_group_size(const spec::ParallelConfig& p, const spec::RankLayout& layout) {
  return static_cast<int>(layout.dp_shard_group(0).size()) * p.cp;
}

std::vector<MemoryBreakdown> memory_per_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len,
                                                const spec::StagePartition& stages,
                                                const spec::PipelineSchedule* schedule, const spec::RankLayout& layout,
                                                const CostModelOptions& o) {
  const int n = shard_group_size(p, layout);
  const double per_layer = static_cast<double>(activation_bytes_per_layer(m, p, seq_len, o).value());
  std::vector<double> stage_weight(static_cast<std::size_t>(stages.num_stages()));
  for (int s = 0; s < stages.num_stages(); ++s) stage_weight[static_cast<std::size_t>(s)] = per_layer * stages.layers_in(s);
  const double e = activation_bytes(o.precision);
  const double T = static_cast<double>(p.micro_batch) * seq_len / p.cp;
  const double logits = T * static_cast<double>(m.tp_padded_vocab(p.tp)) / p.tp * (e + 4);  // bf16 + fp32 in CE

  // Groups this rank talks in (each holds NCCL buffers).
  int groups = 0;
  for (int d : {p.tp, p.cp, p.dp, p.pp}) groups += d > 1 ? 1 : 0;

  std::vector<MemoryBreakdown> out;
  for (int r = 0; r < p.pp; ++r) {
    const double psi = params_of_pp_rank(m, p, stages, r);
    MemoryBreakdown mb = model_state_bytes(psi, p.zero_stage, n, o);
    const double block = static_cast<double>(m.param_counts().attention_per_layer + m.param_counts().mlp_per_layer) / p.tp;
    const double grad_b = (o.precision == spec::Precision::kFp32 || o.fp32_main_grads) ? 4 : 2;
    if (p.zero_stage >= 2) mb.grads += bytes(grad_b * std::min(psi, static_cast<double>(o.bucket_elements)));
    if (p.zero_stage == 3) {
      mb.weights += bytes(e * block * o.zero3_prefetch_blocks);
      // The root unit (embedding, final norm, LM head) is whole for a whole microbatch, forward
      // and backward, with its whole gradient until its backward ends (FSDP's root; cpt's
      // executor, parallel/fully_sharded.h): its unsharded part on top of the shards.
      const double root = root_params_of_pp_rank(m, p, stages, r) * (1.0 - 1.0 / n);
      mb.weights += bytes(e * root);
      mb.grads += bytes(grad_b * root);
    }
    if (p.offload != spec::Offload::kNone) mb.optimizer = Bytes(0);
    if (p.offload == spec::Offload::kOptimizerAndParams) mb.weights = bytes(e * block * o.zero3_prefetch_blocks);

    const auto rank_stages = stages.stages_of_rank(r);
    double act = 0;
    if (schedule != nullptr) {
      act = spec::max_live_weight(*schedule, r, stage_weight);
    } else {
      // The heaviest chunk times the live count: exact for uniform chunks and never below the
      // schedule's value otherwise, so a search never keeps a plan the exact model rejects.
      double heaviest = 0;
      for (int s : rank_stages) heaviest = std::max(heaviest, stage_weight[static_cast<std::size_t>(s)]);
      act = heaviest * spec::in_flight_closed_form(p.schedule, p.pp, p.virtual_stages, p.grad_accum(), r);
    }
    if (std::find(rank_stages.begin(), rank_stages.end(), stages.num_stages() - 1) != rank_stages.end()) act += logits;
    if (p.recompute == spec::Recompute::kFull) {
      spec::ParallelConfig none = p;
      none.recompute = spec::Recompute::kNone;
      act += static_cast<double>(activation_bytes_per_layer(m, none, seq_len, o).value());
    }
    mb.activations = bytes(act);
    const double buffers = static_cast<double>(o.comm_buffer_per_group.value()) * groups;
    mb.other = o.cuda_context + bytes(buffers + o.fragmentation * (act + buffers));
    out.push_back(mb);
  }
  return out;
}

}  // namespace cpt::cost
