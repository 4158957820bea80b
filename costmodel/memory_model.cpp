#include "costmodel/memory_model.h"

#include <algorithm>
#include <cmath>

#include "costmodel/executor_buckets.h"
#include "costmodel/layer_costs.h"
#include "spec/executor_support.h"
#include "spec/shard_layout.h"

namespace cpt::cost {

using core::Bytes;

namespace {

// The nearest whole byte. For the sizes here (non-negative, far below 2^52) truncating v + 0.5 is
// llround's result at a fraction of its cost: the search evaluates it ~30 times per configuration.
Bytes bytes(double v) {
  return Bytes(v >= 0 ? static_cast<std::int64_t>(v + 0.5) : static_cast<std::int64_t>(std::llround(v)));
}

}  // namespace

double block_params_per_tp(const spec::ParamCounts& c, int tp) {
  const double replicated = static_cast<double>(c.norms_per_layer + c.attention_replicated_per_layer);
  const double attention = static_cast<double>(c.attention_per_layer - c.attention_replicated_per_layer);
  if (c.moe_layers == 0) return (attention + static_cast<double>(c.mlp_per_layer)) / tp + replicated;
  const double layers = c.dense_layers + c.moe_layers;
  const double mlp = (static_cast<double>(c.dense_layers) * static_cast<double>(c.mlp_per_layer) +
                      static_cast<double>(c.moe_layers) * static_cast<double>(c.shared_experts_per_layer)) /
                     layers;
  const double router = static_cast<double>(c.moe_layers) * static_cast<double>(c.router_per_layer) / layers;
  return (attention + mlp) / tp + replicated + router;
}

double expert_params_per_layer(const spec::ParamCounts& c, const spec::ParallelConfig& p) {
  if (c.moe_layers == 0) return 0;
  return static_cast<double>(c.moe_layers) * static_cast<double>(c.routed_experts_per_layer) /
         (static_cast<double>(c.dense_layers + c.moe_layers) * p.ep * p.etp);
}

double layer_params_per_tp(const spec::ParamCounts& c, int tp, LayerKind kind) {
  const double replicated = static_cast<double>(c.norms_per_layer + c.attention_replicated_per_layer);
  const double attention = static_cast<double>(c.attention_per_layer - c.attention_replicated_per_layer);
  if (kind == LayerKind::kDense) return (attention + static_cast<double>(c.mlp_per_layer)) / tp + replicated;
  return (attention + static_cast<double>(c.shared_experts_per_layer)) / tp + replicated +
         static_cast<double>(c.router_per_layer);
}

double params_of_layers(const spec::ParamCounts& c, const spec::ParallelConfig& p, const HeldLayers& held) {
  double params = held.dense_layers() * layer_params_per_tp(c, p.tp, LayerKind::kDense);
  if (held.moe_layers > 0) {
    params += held.moe_layers * (layer_params_per_tp(c, p.tp, LayerKind::kMoe) + expert_params_per_moe_layer(c, p));
  }
  return params;
}

double expert_params_per_moe_layer(const spec::ParamCounts& c, const spec::ParallelConfig& p) {
  return static_cast<double>(c.routed_experts_per_layer) / (static_cast<double>(p.ep) * p.etp);
}

int expert_shard_group(const spec::ParallelConfig& p) {
  return p.zero_stage >= 1 ? p.expert_dp() : 1;
}

double gradient_bytes_per_param(const CostModelOptions& o) {
  return (o.precision == spec::Precision::kFp32 || o.fp32_main_grads) ? 4 : 2;
}

MemoryBreakdown model_state_bytes(double psi, int zero_stage, int n, const CostModelOptions& o) {
  const bool fp32 = o.precision == spec::Precision::kFp32;
  const double weight_b = fp32 ? 4 : 2;
  const double grad_b = gradient_bytes_per_param(o);
  const double optim_b = fp32 ? 8 : 12;  // (master copy +) two Adam moments, fp32
  const auto shard = spec::zero_sharding(zero_stage);
  MemoryBreakdown m;
  m.weights = bytes(weight_b * psi / (shard.parameters ? n : 1));
  m.grads = bytes(grad_b * psi / (shard.gradients ? n : 1));
  m.optimizer = bytes(optim_b * psi / (shard.optimizer_state ? n : 1));
  return m;
}

double gemm_input_bytes(const CostModelOptions& o) {
  return o.precision == spec::Precision::kFp8 ? 1.0 : activation_bytes(o.precision);
}

double routed_token_load(const spec::ExpertSpec& e, const CostModelOptions& o) {
  return e.capacity_factor > 0 ? e.capacity_factor : o.moe_load_imbalance;
}

namespace {

// The MLP's stored activations of a layer of `kind` on `tokens` tokens per rank (before sequence
// parallelism): a dense MLP's gate, up and product (or GeLU's in and FC2's in); an MoE layer's
// router fp32 scores, the tokens permuted to their experts (each token k times, all-gathered over
// etp) and the experts' own, at the busiest rank's load, and the shared experts'.
double mlp_activation_bytes(const spec::ModelSpec& m, const spec::ParallelConfig& p, double tokens, double e,
                            double gemm_input, double load, LayerKind kind) {
  // Per inner element: SwiGLU's gate and up (16-bit) and their product (FC2's input), or GeLU's
  // input and output (FC2's input).
  const double per_inner = (m.mlp == spec::MlpKind::kSwiGLU ? 2 : 1) * e + gemm_input;
  const double t = p.tp;
  if (kind == LayerKind::kDense) return per_inner * tokens * m.ffn_hidden / t;
  const spec::ExpertSpec& x = m.moe;
  const double local = tokens / t;  // MoE layers run on the sequence-parallel shard
  const double routed = local * x.experts_per_token * load;
  return 4 * local * x.experts + gemm_input * routed * p.etp * m.hidden + per_inner * routed * x.expert_ffn_hidden +
         per_inner * tokens * x.shared_ffn_hidden / t;
}

}  // namespace

Bytes activation_bytes_per_layer(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len,
                                 const CostModelOptions& o, LayerKind kind) {
  const double e = activation_bytes(o.precision);
  const double t = p.tp;
  const double T = static_cast<double>(p.micro_batch) * seq_len / p.cp;  // tokens on this rank
  const double h = m.hidden, a = m.heads;
  const double sp = p.sequence_parallel ? t : 1.0;  // divisor of the tensors tp does not split
  const bool dropout = applies_dropout(m, o);

  if (p.recompute == spec::Recompute::kFull) return bytes(e * T * h / sp);  // the block input only

  const spec::AttentionWidths w = m.attention_widths();
  double v = 2 * e * T * h / sp;  // inputs of the two norms
  // A GEMM's input kept for its weight gradient: in FP8 Transformer Engine keeps the FP8 copy
  // it multiplied (1 byte) rather than the 16-bit tensor.
  const double gemm_input = gemm_input_bytes(o);
  v += gemm_input * T * h / sp;                           // QKV GEMM input
  v += e * T * static_cast<double>(w.query + w.key) / t;  // Q and K (after RoPE)
  v += e * T * static_cast<double>(w.value) / t;          // V
  if (m.mla.present()) {                                  // the latents, normed and not
    v += 2 * e * T * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim);
  }
  if (p.cp > 1 && o.context_parallel == ContextParallelKind::kAllGather) {
    v += e * T * static_cast<double>(w.key + w.value) / t * (p.cp - 1);  // K and V of the rest, gathered
  }
  // The attention output: kept for the attention core's backward, and as the output projection's
  // input (one tensor in 16 bits; in FP8 an FP8 copy beside it).
  v += (o.precision == spec::Precision::kFp8 ? e + gemm_input : e) * T * static_cast<double>(w.output) / t;
  v += gemm_input * T * h / sp;  // MLP input
  v += mlp_activation_bytes(m, p, T, e, gemm_input, m.moe.present() ? routed_token_load(m.moe, o) : 1.0, kind);
  if (dropout) v += 2 * T * h / sp;  // attention and MLP dropout masks, 1 byte
  const bool scores_stored = !o.flash_attention && p.recompute == spec::Recompute::kNone;
  if (scores_stored) {
    // softmax output (+ dropout mask and output for GPT): 5·a·s²·b / t with dropout.
    v += (dropout ? 2 * e + 1 : e) * (a / t) * T * seq_len;
  } else if (o.flash_attention) {
    v += 4 * (a / t) * T;  // FlashAttention's fp32 log-sum-exp per query and head
  }
  return bytes(v);
}

HeldLayers held_layers(const spec::ModelSpec& m, const spec::StagePartition& stages, int pp_rank) {
  HeldLayers held;
  held.pp_rank = pp_rank;
  held.first_layer = stages.first_layer(stages.stage_of(pp_rank, 0));
  for (int s : stages.stages_of_rank(pp_rank)) {
    held.layers += stages.layers_in(s);
    held.moe_layers += m.moe_layers_in(stages.first_layer(s), stages.layers_in(s));
  }
  return held;
}

HeldLayers balanced_held_layers(const spec::ModelSpec& m, int pp, int v, int pp_rank) {
  HeldLayers held;
  held.pp_rank = pp_rank;
  held.first_layer = spec::StagePartition::balanced_first_layer(m.layers, pp, v, pp_rank);
  for (int c = 0; c < v; ++c) {  // its chunks: stages c * pp + pp_rank
    const int stage = c * pp + pp_rank;
    const int layers = spec::StagePartition::balanced_layers_in(m.layers, pp, v, stage);
    held.layers += layers;
    if (m.moe.present()) {
      held.moe_layers += m.moe_layers_in(spec::StagePartition::balanced_first_layer(m.layers, pp, v, stage), layers);
    }
  }
  return held;
}

double params_of_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p, const spec::StagePartition& stages,
                         int pp_rank) {
  return params_of_layers(m.param_counts(), p, held_layers(m, stages, pp_rank)) +
         root_params_of_pp_rank(m, p, stages, pp_rank);
}

double root_params(const spec::ModelSpec& m, const spec::ParamCounts& c, int tp, bool holds_first, bool holds_last,
                   bool single_stage) {
  const double vocab_rows = static_cast<double>(m.tp_padded_vocab(tp)) / tp;
  double psi = 0;
  if (holds_first) psi += vocab_rows * m.hidden + static_cast<double>(c.position);
  if (holds_last) {
    psi += static_cast<double>(c.final_norm);
    if (!m.tied_embeddings || !single_stage) psi += vocab_rows * m.hidden;
  }
  return psi;
}

double root_params_of_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p,
                              const spec::StagePartition& stages, int pp_rank) {
  const int last = stages.num_stages() - 1;
  // Stage 0 is chunk 0 of pp rank 0; the last stage is the last chunk of pp rank pp - 1.
  return root_params(m, m.param_counts(), p.tp, pp_rank == 0, pp_rank == stages.pp_rank_of(last), last == 0);
}

MemoryTerms memory_terms(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len, int shard_group,
                         const CostModelOptions& o) {
  MemoryTerms t;
  t.model = &m;
  t.shard_group = shard_group;
  const bool has_moe = m.moe.present(), has_dense = m.moe_layers_in(0, m.layers) < m.layers;
  if (has_dense) {
    t.activation_per_dense_layer =
        static_cast<double>(activation_bytes_per_layer(m, p, seq_len, o, LayerKind::kDense).value());
  }
  if (has_moe) {
    t.activation_per_moe_layer =
        static_cast<double>(activation_bytes_per_layer(m, p, seq_len, o, LayerKind::kMoe).value());
  }
  const double e = activation_bytes(o.precision);
  const double T = static_cast<double>(p.micro_batch) * seq_len / p.cp;
  t.logits = T * static_cast<double>(m.tp_padded_vocab(p.tp)) / p.tp * (o.fused_cross_entropy ? 2 * e : e + 4);
  if (o.distill_teacher) t.kl_logits = T * static_cast<double>(m.tp_padded_vocab(p.tp)) / p.tp * (e + 3 * 4);
  if (p.recompute == spec::Recompute::kFull) {
    spec::ParallelConfig none = p;
    none.recompute = spec::Recompute::kNone;
    for (const LayerKind kind : {LayerKind::kDense, LayerKind::kMoe}) {  // the larger kind's
      if (kind == LayerKind::kDense ? !has_dense : !has_moe) continue;
      t.recompute_buffer = std::max(t.recompute_buffer,
                                    static_cast<double>(activation_bytes_per_layer(m, none, seq_len, o, kind).value()));
    }
  }
  const auto c = m.param_counts();
  t.dense_block_params = layer_params_per_tp(c, p.tp, LayerKind::kDense);
  t.moe_block_params = has_moe ? layer_params_per_tp(c, p.tp, LayerKind::kMoe) : 0.0;
  t.expert_params = has_moe ? expert_params_per_moe_layer(c, p) : 0.0;
  t.expert_shard_group = expert_shard_group(p);
  if (p.experts_with_their_layer()) {  // one block: its buckets, shards and ZeRO-3 unit hold them
    t.moe_block_params += t.expert_params;
    t.expert_params = 0;
  }
  // Groups this rank talks in (each holds NCCL buffers): the axes', expert-dp where the routed
  // experts reduce apart from their layer (a communicator of its own), and with both ep and etp the
  // ep × etp ranks the dispatch gathers its counts over (Megatron-Core's tp_ep group).
  int groups = 0;
  for (int d : {p.tp, p.cp, p.dp, p.pp, p.ep, p.etp}) groups += d > 1 ? 1 : 0;
  if (m.moe.present() && !p.experts_with_their_layer() && p.expert_dp() > 1) ++groups;
  if (p.ep > 1 && p.etp > 1) ++groups;
  t.comm_buffers = static_cast<double>(o.comm_buffer_per_group.value()) * groups;
  return t;
}

namespace {

// The routed experts' model state on a rank holding `held`: Ψ_e over expert-dp as
// model_state_bytes counts it, and under ZeRO-3 the running and prefetched blocks' experts whole.
void add_expert_state(const MemoryTerms& t, const spec::ParallelConfig& p, const HeldLayers& held, bool holds_first,
                      bool holds_last, const CostModelOptions& o, MemoryBreakdown& mb) {
  const double layers = held.moe_layers;  // the blocks with experts
  if (t.expert_params <= 0 || layers <= 0) return;
  const MemoryBreakdown experts = model_state_bytes(layers * t.expert_params, p.zero_stage, t.expert_shard_group, o);
  const bool eager_zero2 = p.zero_stage == 2 && o.dispatch == KernelDispatch::kEager;
  mb.weights += experts.weights;
  // The executor under a pipeline schedule accumulates whole gradients like ZeRO-1 (rank_memory).
  mb.grads += eager_zero2 && !spec::executor_zero2_reduces_each_microbatch(p)
                  ? bytes(gradient_bytes_per_param(o) * layers * t.expert_params)
                  : experts.grads;
  mb.optimizer += experts.optimizer;
  // The executor's ZeRO-2 over expert-dp keeps the experts' buckets being reduced beside their
  // shard, as rank_memory's dense part does (its own optimizer, train/optimizer_choice.cpp).
  if (eager_zero2 && t.model != nullptr && spec::executor_zero2_reduces_each_microbatch(p)) {
    const double reducing =
        executor_gradient_buckets(
            *t.model, p.tp,
            spec::StagePartition::balanced_ranges_of_rank(t.model->layers, p.pp, p.virtual_stages, held.pp_rank),
            holds_first, holds_last, p.pp * p.virtual_stages == 1, o.bucket_elements, 1,
            spec::ParameterSubset::kRoutedExperts, p.ep, p.etp)
            .largest_pair;
    mb.grads += bytes(gradient_bytes_per_param(o) * std::min(layers * t.expert_params, reducing));
  }
  // Under ZeRO-3 over expert-dp > 1 the running and prefetched blocks' experts are gathered beside
  // their shards, and their gradients are whole buffers (one filling, one reducing) beside the
  // slice being reduced into; over a group of one the shard is the whole unit, used in place
  // (parallel/fully_sharded.h).
  if (p.zero_stage == 3 && t.expert_shard_group > 1 && layers > 0) {
    const double e = activation_bytes(o.precision);
    mb.weights += bytes(e * t.expert_params * std::min(static_cast<double>(o.zero3_prefetch_blocks), layers));
    mb.grads += bytes(e * t.expert_params * std::min(2.0, layers) +
                      gradient_bytes_per_param(o) * t.expert_params / t.expert_shard_group);
  }
}

}  // namespace

MemoryBreakdown rank_memory(const MemoryTerms& t, const spec::ParallelConfig& p, const HeldLayers& held,
                            double root_psi, double live_activations, bool holds_first, bool holds_last,
                            const CostModelOptions& o) {
  const int n = t.shard_group;
  const double e = activation_bytes(o.precision);
  const double layers = held.layers;
  const double blocks = t.blocks_of(held);      // its blocks' parameters but the routed experts apart
  const double block = t.heaviest_block(held);  // the largest unit ZeRO-3 gathers whole
  MemoryBreakdown mb = model_state_bytes(blocks + root_psi, p.zero_stage, n, o);
  const double grad_b = gradient_bytes_per_param(o);
  // ZeRO-2 keeps its gradient shard and the buckets being reduced: one reducing while the next
  // fills (DeepSpeed's overlap_comm; cpt's executor, train/zero_optimizer.cpp), never more than
  // the whole gradient.
  if (p.zero_stage == 2 && o.dispatch == KernelDispatch::kEager && !spec::executor_zero2_reduces_each_microbatch(p)) {
    // cpt's executor under a pipeline schedule accumulates whole gradients like ZeRO-1.
    mb.grads = bytes(grad_b * (blocks + root_psi));
  } else if (p.zero_stage == 2) {
    // The executor's buckets; under expert parallelism its dense optimizer's (the routed experts'
    // own staging is add_expert_state's).
    const auto subset = t.expert_params > 0 ? spec::ParameterSubset::kAllButRoutedExperts : spec::ParameterSubset::kAll;
    const double reducing =
        o.dispatch == KernelDispatch::kEager && t.model != nullptr
            ? executor_gradient_buckets(
                  *t.model, p.tp,
                  spec::StagePartition::balanced_ranges_of_rank(t.model->layers, p.pp, p.virtual_stages, held.pp_rank),
                  holds_first, holds_last, p.pp * p.virtual_stages == 1, o.bucket_elements, 1, subset, p.ep, p.etp)
                  .largest_pair
            : 2.0 * static_cast<double>(o.bucket_elements);
    mb.grads += bytes(grad_b * std::min(blocks + root_psi, reducing));
  }
  if (p.zero_stage == 3) {
    // FSDP's residency (and the executor's, parallel/fully_sharded.h): every unit keeps its shard,
    // and a gathered unit is a whole buffer beside it. The root unit (embedding, final norm, LM
    // head) is whole for a whole microbatch, forward and backward, and so is its gradient buffer
    // (allocated when its forward ends, reduce-scattered when its backward ends); a block is whole
    // while it runs, with the next one prefetched.
    mb.weights += bytes(e * (root_psi + block * std::min(static_cast<double>(o.zero3_prefetch_blocks), layers)));
    // Gradients: whole buffers are autograd's, in the compute precision; slices are reduced in
    // the gradients' precision. One reduction in flight: while block i's gradients arrive, block
    // i + 1's whole buffer is being reduce-scattered into a slice; at the end the root's is.
    const double blocks_whole = std::min(2.0, layers);
    const double in_flight = e * block * blocks_whole + grad_b * (layers > 0 ? block / n : 0);
    mb.grads += bytes(e * root_psi + std::max(in_flight, grad_b * root_psi / n));
  }
  add_expert_state(t, p, held, holds_first, holds_last, o, mb);
  const double block_experts = held.moe_layers > 0 ? t.expert_params : 0.0;  // a block's routed experts apart
  if (p.offload != spec::Offload::kNone) mb.optimizer = Bytes(0);
  if (p.offload == spec::Offload::kOptimizerAndParams) {
    mb.weights = bytes(
        e * (root_psi + (block + block_experts) * std::min(static_cast<double>(o.zero3_prefetch_blocks), layers)));
  }

  // The parameters the rank holds, and under ZeRO-3 its shards (the routed experts over expert-dp).
  const double experts = held.moe_layers * t.expert_params;
  const double all = blocks + root_psi + experts;
  const double sharded = (blocks + root_psi) / n + experts / t.expert_shard_group;
  if (o.distill_teacher) {
    // The teacher's running and prefetched blocks gathered beside their shards; its routed experts
    // apart over an expert-dp of one are used in place (parallel/fully_sharded.h), as the student's.
    const double gathered_experts = t.expert_shard_group > 1 ? block_experts : 0.0;
    const double gathered =
        root_psi + (block + gathered_experts) * std::min(static_cast<double>(o.zero3_prefetch_blocks), layers);
    mb.teacher = bytes(e * (p.zero_stage == 3 ? sharded + gathered : all));
  }
  if (o.ewc) mb.ewc = bytes(2 * 4 * (p.zero_stage == 3 ? sharded : all));

  double act = live_activations;
  if (holds_last) act += t.logits + t.kl_logits;
  act += t.recompute_buffer;
  mb.activations = bytes(act);
  mb.other = o.cuda_context + bytes(t.comm_buffers + o.fragmentation * (act + t.comm_buffers));
  return mb;
}

std::vector<MemoryBreakdown> memory_per_pp_rank(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len,
                                                const spec::StagePartition& stages,
                                                const spec::PipelineSchedule* schedule, const spec::RankLayout& layout,
                                                const CostModelOptions& o) {
  const MemoryTerms terms = memory_terms(m, p, seq_len, layout.zero_shard_group_size(), o);
  std::vector<double> stage_weight(static_cast<std::size_t>(stages.num_stages()));
  for (int s = 0; s < stages.num_stages(); ++s) {
    const double layers = stages.layers_in(s);
    stage_weight[static_cast<std::size_t>(s)] = terms.activations_of(
        {layers, static_cast<double>(m.moe_layers_in(stages.first_layer(s), stages.layers_in(s)))});
  }
  const int last = stages.num_stages() - 1;
  std::vector<MemoryBreakdown> out;
  out.reserve(static_cast<std::size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    double act = 0;
    if (schedule != nullptr) {
      act = spec::max_live_weight(*schedule, r, stage_weight);
    } else {
      // The heaviest chunk times the live count: exact for uniform chunks and never below the
      // schedule's value otherwise, so a search never keeps a plan the exact model rejects.
      double heaviest = 0;
      for (int s : stages.stages_of_rank(r)) heaviest = std::max(heaviest, stage_weight[static_cast<std::size_t>(s)]);
      act = heaviest * spec::in_flight_closed_form(p.schedule, p.pp, p.virtual_stages, p.grad_accum(), r);
    }
    out.push_back(rank_memory(terms, p, held_layers(m, stages, r), root_params_of_pp_rank(m, p, stages, r), act, r == 0,
                              stages.pp_rank_of(last) == r, o));
  }
  return out;
}

}  // namespace cpt::cost
