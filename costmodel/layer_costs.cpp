#include "costmodel/layer_costs.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "costmodel/elementwise_traffic.h"
#include "costmodel/kernel_dispatch.h"
#include "costmodel/memory_model.h"

namespace cpt::cost {

using core::Seconds;

int activation_bytes(spec::Precision p) {
  return p == spec::Precision::kFp32 ? 4 : 2;
}

bool applies_dropout(const spec::ModelSpec& model, const CostModelOptions& options) {
  return options.dropout.value_or(model.mlp == spec::MlpKind::kGelu);
}

namespace {

// Where `key` falls among `points` (ascending by key_of): the bracketing pair's indices and the
// weight of the upper one, linear in log(key); held at the ends (weight 0 on the nearest point).
// REQUIRES: points non-empty.
template <class Points, class KeyOf>
std::tuple<std::size_t, std::size_t, double> log_bracket(const Points& points, double key, KeyOf key_of) {
  const std::size_t last = points.size() - 1;
  if (key <= key_of(points.front())) return {0, 0, 0.0};
  if (key >= key_of(points.back())) return {last, last, 0.0};
  std::size_t hi = 1;
  while (key_of(points[hi]) < key) ++hi;
  const double lo_key = key_of(points[hi - 1]);
  return {hi - 1, hi, std::log(key / lo_key) / std::log(key_of(points[hi]) / lo_key)};
}

// The matrix-engine peak for the options' precision; bf16 when the part lacks it (documented:
// e.g. fp8 on A100 falls back to bf16).
double peak(const spec::GpuSpec& gpu, spec::Precision p) {
  if (auto v = gpu.peak(p)) return v->value();
  return gpu.peak(spec::Precision::kBf16)->value();
}

// `bytes` as the fused count gives them, moved as the runtime's kernels move them.
Seconds memory_time(double bytes, const spec::GpuSpec& gpu, const CostModelOptions& o) {
  return Seconds(bytes * o.memory_traffic_scale / (gpu.hbm_bandwidth.value() * o.hbm_efficiency));
}

PassTime pass(Seconds gemm, Seconds attention, Seconds memory, double kernels, const CostModelOptions& o) {
  return {gemm, attention, memory, o.kernel_overhead * kernels, kernels, Seconds(0)};
}

struct Shape {
  double T;  // tokens per rank
  double h, f, d, a, g, s, V;
  // Per rank (after tp): the q, k, v and output-projection widths; the attention core's mean head
  // width (q·k and attention·v widths averaged: d, or latent attention's (192 + 128) / 2).
  double q_width, k_width, v_width, out_width;
  double tp, cp;
  bool sp;
  double e;  // bytes per activation element
  bool gated;
  bool dropout;  // applies_dropout
  bool rope;
};

Shape shape_of(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len, const CostModelOptions& o) {
  Shape shape{};
  shape.T = static_cast<double>(p.micro_batch) * seq_len / p.cp;
  shape.h = m.hidden;
  shape.f = m.ffn_hidden;
  const spec::AttentionWidths widths = m.attention_widths();
  shape.d = (widths.qk_head_dim + widths.v_head_dim) / 2.0;
  shape.q_width = static_cast<double>(widths.query) / p.tp;
  shape.k_width = static_cast<double>(widths.key) / p.tp;
  shape.v_width = static_cast<double>(widths.value) / p.tp;
  shape.out_width = static_cast<double>(widths.output) / p.tp;
  shape.a = m.heads;
  shape.g = m.kv_heads;
  shape.s = seq_len;
  shape.V = static_cast<double>(m.tp_padded_vocab(p.tp));
  shape.tp = p.tp;
  shape.cp = p.cp;
  shape.sp = p.sequence_parallel;
  shape.e = activation_bytes(o.precision);
  shape.gated = m.mlp == spec::MlpKind::kSwiGLU;
  shape.dropout = applies_dropout(m, o);
  shape.rope = m.position == spec::PositionKind::kRoPE;
  return shape;
}

ActivationWidths widths_of(const Shape& shape) {
  ActivationWidths w;
  w.tokens = shape.T;
  w.hidden = shape.h;
  w.query_width = shape.q_width;
  w.key_value_width = (shape.k_width + shape.v_width) / 2;
  w.ffn_width = shape.f / shape.tp;
  w.head_dim = shape.d;
  w.sequence_divisor = shape.sp ? shape.tp : 1.0;
  w.tensor_parallel = shape.tp > 1;
  w.element_bytes = shape.e;
  w.gated = shape.gated;
  w.dropout = shape.dropout;
  w.rope = shape.rope;
  return w;
}

}  // namespace

std::optional<spec::CrossEntropyPoint> cross_entropy_rates_at(const spec::GpuSpec& gpu, double logits) {
  const auto& c = gpu.cross_entropy_rates;
  if (c.empty()) return std::nullopt;
  const auto [lo, hi, w] = log_bracket(c, logits, [](const spec::CrossEntropyPoint& p) { return p.logits; });
  auto mix = [w = w](double a, double b) { return a + w * (b - a); };
  return spec::CrossEntropyPoint{logits, mix(c[lo].forward_logits_per_s, c[hi].forward_logits_per_s),
                                 mix(c[lo].backward_logits_per_s, c[hi].backward_logits_per_s)};
}

double causal_attention_forward_flops(double queries, double keys, double head_dim, double heads) {
  return 2 * queries * keys * head_dim * heads;
}

double causal_attention_backward_flops(double forward_flops) {
  return 2.5 * forward_flops;
}

double gemm_efficiency_at(double flops, double min_dim, const spec::GpuSpec& gpu, const CostModelOptions& o) {
  const auto index = static_cast<std::size_t>(o.precision);
  if (const auto& shaped = gpu.gemm_efficiency_by_min_dim[index]; !shaped.empty()) {
    const auto [lo, hi, w] = log_bracket(shaped, min_dim, [](const spec::GemmShapeCurve& c) { return c.min_dim; });
    const double a = interpolate_efficiency(shaped[lo].points, flops);
    return w == 0.0 ? a : a + w * (interpolate_efficiency(shaped[hi].points, flops) - a);
  }
  const auto& measured = gpu.gemm_efficiency[index];
  const double efficiency = measured.empty() ? o.gemm_efficiency.at(flops) : interpolate_efficiency(measured, flops);
  return o.precision == spec::Precision::kFp8 ? efficiency * o.fp8_gemm_scale : efficiency;
}

Seconds gemm_time(double flops, double min_dim, const spec::GpuSpec& gpu, const CostModelOptions& o) {
  if (flops <= 0) return Seconds(0);
  return Seconds(flops / (peak(gpu, o.precision) * gemm_efficiency_at(flops, min_dim, gpu, o)));
}

namespace {

// The attention core's forward and backward time: the fused kernel (causal, half the work, at
// the attention curve times the runtime's kernel scale), or materialised scores (GEMMs plus their
// memory traffic). `full`: 4·T·s·d per head over the rank's heads, the non-causal count.
std::pair<Seconds, Seconds> attention_core(const Shape& shape, double full, const spec::GpuSpec& gpu,
                                           const CostModelOptions& o) {
  if (o.flash_attention) {
    const double forward_flops = causal_attention_forward_flops(shape.T, shape.s, shape.d, shape.a / shape.tp);
    const double backward_flops = causal_attention_backward_flops(forward_flops);
    // FP8 recipes run the attention core in BF16: Transformer Engine's FP8 applies to its linear
    // layers unless FP8 dot-product attention is asked for (fp8_dpa, off by default), and
    // llm-foundry's FP8 swaps in Transformer Engine's linear layers only.
    const spec::Precision core_precision = o.precision == spec::Precision::kFp8 ? spec::Precision::kBf16 : o.precision;
    const double pk = peak(gpu, core_precision);
    const auto& measured = gpu.attention_efficiency[static_cast<std::size_t>(core_precision)];
    auto efficiency = [&](double flops) {
      const double curve =
          measured.empty() ? o.attention_efficiency.at(flops) : interpolate_efficiency(measured, flops);
      return curve * o.attention_kernel_scale;
    };
    return {Seconds(forward_flops / (pk * efficiency(forward_flops))),
            Seconds(backward_flops / (pk * efficiency(backward_flops)))};
  }
  // Materialised scores [b, a/tp, T, s]: written by QK^T, softmax read + write, dropout read +
  // write + 1-byte mask, read by AV (Korthikanti et al. 2022 §4.1 lists the stored tensors).
  const double scores = shape.T * shape.s * (shape.a / shape.tp);
  const double score_bytes = scores * (5 * shape.e + 1);
  // QK^T and AV, batched over the heads: [T, d] x [d, s] and [T, s] x [s, d].
  return {gemm_time(full, shape.d, gpu, o) + memory_time(score_bytes, gpu, o),
          gemm_time(2 * full, shape.d, gpu, o) + memory_time(2 * score_bytes, gpu, o)};
}

}  // namespace

namespace {

// The GEMMs of one pass of a layer's part: their time and FLOPs (2·m·n·k each, per rank).
struct Gemms {
  Seconds time;
  double flops = 0;
  void add(double tokens, double in, double out, const spec::GpuSpec& gpu, const CostModelOptions& o,
           double count = 1) {
    const double f = 2 * tokens * in * out;
    time += gemm_time(f, std::min({tokens, in, out}), gpu, o) * count;
    flops += f * count;
  }
};

// The attention's projections. Megatron fuses Q, K and V into one GEMM; cpt's executor (eager)
// runs each as its own (executor/model/llama_blocks.cpp). Latent attention: the down projections
// to the latents run on every token of the tp group (not split), the up projections and the output
// split over tp.
Gemms attention_gemms(const spec::ModelSpec& m, const Shape& shape, const spec::GpuSpec& gpu,
                      const CostModelOptions& o) {
  Gemms g;
  g.add(shape.T, shape.out_width, shape.h, gpu, o);  // output projection
  if (m.mla.present()) {
    const spec::LatentAttention& l = m.mla;
    const double kv_b = shape.k_width - shape.a / shape.tp * l.qk_rope_head_dim + shape.v_width;
    g.add(shape.T, shape.h, l.kv_lora_rank + l.qk_rope_head_dim, gpu, o);
    g.add(shape.T, l.kv_lora_rank, kv_b, gpu, o);
    if (l.q_lora_rank > 0) {
      g.add(shape.T, shape.h, l.q_lora_rank, gpu, o);
      g.add(shape.T, l.q_lora_rank, shape.q_width, gpu, o);
    } else {
      g.add(shape.T, shape.h, shape.q_width, gpu, o);
    }
  } else if (o.dispatch == KernelDispatch::kEager) {
    g.add(shape.T, shape.h, shape.q_width, gpu, o);
    g.add(shape.T, shape.h, shape.k_width, gpu, o);
    g.add(shape.T, shape.h, shape.v_width, gpu, o);
  } else {
    g.add(shape.T, shape.h, shape.q_width + shape.k_width + shape.v_width, gpu, o);
  }
  return g;
}

// One MLP of inner width `width` per rank on `tokens` tokens: SwiGLU's gate and up (one fused GEMM,
// or two under eager dispatch) and down, or GeLU's two; `count` such MLPs.
void add_mlp(Gemms& g, double tokens, double width, const Shape& shape, const spec::GpuSpec& gpu,
             const CostModelOptions& o, double count = 1) {
  if (shape.gated && o.dispatch == KernelDispatch::kEager) {
    g.add(tokens, shape.h, width, gpu, o, 2 * count);
  } else {
    g.add(tokens, shape.h, (shape.gated ? 2 : 1) * width, gpu, o, count);
  }
  g.add(tokens, width, shape.h, gpu, o, count);
}

// A layer's MLP: the dense MLP on a dense layer; on an MoE layer the router, the shared experts
// (split over tp like the dense MLP) and the routed experts. Routed: the rank's T/tp tokens
// (MoE layers run on the sequence-parallel shard) are sent k times to the ep·etp ranks of its
// expert group, so each of its E/ep experts takes ep·etp·(T/tp)·k/E tokens (times the busiest
// rank's load) on its slice f_e/etp: 6·(T/tp)·k·h·f_e FLOPs per rank whatever ep and etp, in
// GEMMs that shrink as E grows (grouped GEMMs of small experts run below the GPU's peak).
// `model_flops` receives the balanced (load 1) FLOPs.
Gemms mlp_gemms(const spec::ModelSpec& m, const spec::ParallelConfig& p, const Shape& shape, const spec::GpuSpec& gpu,
                const CostModelOptions& o, LayerKind kind, double& model_flops) {
  if (kind == LayerKind::kDense) {
    Gemms dense;
    add_mlp(dense, shape.T, shape.f / shape.tp, shape, gpu, o);
    model_flops = dense.flops;
    return dense;
  }
  const spec::ExpertSpec& x = m.moe;
  Gemms moe;
  const double local = shape.T / shape.tp;
  moe.add(local, shape.h, x.experts, gpu, o);  // router
  if (x.shared_ffn_hidden > 0) add_mlp(moe, shape.T, x.shared_ffn_hidden / shape.tp, shape, gpu, o);
  const double balanced_flops =
      moe.flops + 2 * local * x.experts_per_token * shape.h * x.expert_ffn_hidden * (shape.gated ? 3 : 2);
  const double per_expert =
      static_cast<double>(p.ep) * p.etp * local * x.experts_per_token / x.experts * routed_token_load(x, o);
  add_mlp(moe, per_expert, static_cast<double>(x.expert_ffn_hidden) / p.etp, shape, gpu, o,
          static_cast<double>(x.experts) / p.ep);
  model_flops = balanced_flops;
  return moe;
}

// The element-wise traffic of a layer's MLP inner width: a dense layer's f/tp, an MoE layer's
// k·f_e (at the load) and shared experts per token; and an MoE layer's permutation of the tokens
// to their experts and back (read and written, forward; again backward).
std::pair<double, double> mlp_widths_and_permute_bytes(const spec::ModelSpec& m, const spec::ParallelConfig& p,
                                                       const Shape& shape, const CostModelOptions& o, LayerKind kind) {
  if (kind == LayerKind::kDense) return {shape.f / shape.tp, 0.0};
  const spec::ExpertSpec& x = m.moe;
  const double load = routed_token_load(x, o);
  const double moe_width = (x.experts_per_token * x.expert_ffn_hidden * load + x.shared_ffn_hidden) / shape.tp;
  const double permuted = shape.T / shape.tp * x.experts_per_token * load * p.etp * shape.h * shape.e;
  return {moe_width, 2 * 2 * permuted};
}

}  // namespace

BlockCosts block_costs(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len, const spec::GpuSpec& gpu,
                       const CostModelOptions& o, LayerKind kind) {
  CPT_CHECK(kind == LayerKind::kDense || m.moe.present(), "an MoE layer's costs for a model without experts");
  const Shape shape = shape_of(m, p, seq_len, o);
  BlockCosts c;
  const Gemms attention = attention_gemms(m, shape, gpu, o);
  double mlp_model_flops = 0;
  const Gemms mlp = mlp_gemms(m, p, shape, gpu, o, kind, mlp_model_flops);
  const Seconds gemm_fwd = attention.time + mlp.time;

  // Attention core: QK^T and AV, 2·T·s·(qk + v width) per head (attention_core).
  const double attn_full = 4 * shape.T * shape.s * shape.d * (shape.a / shape.tp);
  const auto [attn_fwd, attn_bwd] = attention_core(shape, attn_full, gpu, o);

  // Element-wise traffic (costmodel/elementwise_traffic.h): as the runtime dispatches it.
  ActivationWidths widths = widths_of(shape);
  const auto [ffn_width, permute_bytes] = mlp_widths_and_permute_bytes(m, p, shape, o, kind);
  widths.ffn_width = ffn_width;
  const PassBytes elementwise = layer_elementwise_bytes(widths, o.dispatch);
  const Seconds mem_fwd = memory_time(elementwise.forward + permute_bytes, gpu, o);
  const Seconds mem_bwd = memory_time(elementwise.backward + permute_bytes, gpu, o);

  // Kernels: the layer's own; those around its communication calls are the step inventory's
  // (step_inventory.h).
  PassKernels own = layer_kernels(o);
  const PassKernels moe = kind == LayerKind::kMoe ? moe_layer_kernels(m, p, o) : PassKernels{};
  const PassKernels qk_norms = qk_norm_kernels(m, o);
  const PassKernels latent = latent_attention_kernels(m, o);
  own.forward += moe.forward + qk_norms.forward + latent.forward;
  own.backward += moe.backward + qk_norms.backward + latent.backward;
  c.forward = pass(gemm_fwd, attn_fwd, mem_fwd, own.forward, o);
  c.backward = pass(gemm_fwd * 2.0, attn_bwd, mem_bwd, own.backward, o);
  switch (p.recompute) {
    case spec::Recompute::kNone:
      break;
    case spec::Recompute::kSelective:  // the attention core only (Korthikanti et al. 2022 §4.2)
      c.recompute = pass(Seconds(0), attn_fwd, Seconds(0), selective_recompute_kernels(o), o);
      break;
    case spec::Recompute::kFull:
      c.recompute = c.forward;
      break;
  }
  if (o.distill_teacher) c.teacher = c.forward;  // the same forward, without a graph
  // The published convention: non-causal attention, forward + 2x backward (Korthikanti et al. 2022
  // eq. 7), routed experts at their balanced share (active parameters); hardware FLOPs add the
  // recomputed forward work in the same convention.
  const double gemm_flops = attention.flops + mlp_model_flops;
  c.model_flops = core::Flops(3 * (gemm_flops + attn_full));
  double recompute_flops = 0;
  if (p.recompute == spec::Recompute::kFull) recompute_flops = gemm_flops + attn_full;
  if (p.recompute == spec::Recompute::kSelective) recompute_flops = attn_full;
  c.hardware_flops = core::Flops(3 * (gemm_flops + attn_full) + recompute_flops);
  return c;
}

HeadCosts head_costs(const spec::ModelSpec& m, const spec::ParallelConfig& p, int seq_len, const spec::GpuSpec& gpu,
                     const CostModelOptions& o) {
  const Shape shape = shape_of(m, p, seq_len, o);
  HeadCosts c;
  // Embedding: a gather (write T·h) forward, a scatter-add of the gradient backward.
  const double emb_bytes = 2 * shape.T * shape.h * shape.e;
  // Kernels: their own; those around their communication calls are the step inventory's.
  const PassKernels emb_k = embedding_kernels(o), head_k = head_kernels(o);
  c.embedding_forward = pass(Seconds(0), Seconds(0), memory_time(emb_bytes, gpu, o), emb_k.forward, o);
  c.embedding_backward = pass(Seconds(0), Seconds(0), memory_time(2 * emb_bytes, gpu, o), emb_k.backward, o);
  // LM head [T, h] x [h, V/tp], then the vocab-parallel cross-entropy: logits in fp32, softmax
  // read + write, gradient write.
  const double head = 2 * shape.T * shape.h * shape.V / shape.tp;
  const double logits = shape.T * shape.V / shape.tp;
  const double ce_bytes = logits * (shape.e + 4 * 3);
  const PassBytes norm = final_norm_bytes(widths_of(shape), o.dispatch);
  // A profile with measured cross-entropy rates (a CPU's, bound by its exponentials) prices the
  // loss by its logits instead of its bytes: at this size where measured at several.
  const auto rates = cross_entropy_rates_at(gpu, logits);
  const Seconds ce_fwd = rates ? Seconds(logits / rates->forward_logits_per_s) : memory_time(ce_bytes, gpu, o);
  const Seconds ce_bwd =
      rates ? Seconds(logits / rates->backward_logits_per_s) : memory_time(logits * (4 + shape.e), gpu, o);
  const Seconds head_gemm = gemm_time(head, std::min({shape.T, shape.h, shape.V / shape.tp}), gpu, o);
  c.head_forward = pass(head_gemm, Seconds(0), ce_fwd + memory_time(norm.forward, gpu, o), head_k.forward, o);
  c.head_backward = pass(head_gemm * 2.0, Seconds(0), ce_bwd + memory_time(norm.backward, gpu, o), head_k.backward, o);
  c.loss_forward = ce_fwd;
  c.loss_backward = ce_bwd;
  // The rotary rows, where a chunk looks them up: cos and sin of the rank's T positions, gathered
  // and cast (read and write).
  if (const double entry_kernels = chunk_entry_kernels(o); entry_kernels > 0) {
    const double rotary_bytes = 2 * 2 * shape.T * m.rotary_dim() * shape.e;
    c.chunk_entry = pass(Seconds(0), Seconds(0), memory_time(rotary_bytes, gpu, o), entry_kernels, o);
  }
  c.batch_entry = pass(Seconds(0), Seconds(0), Seconds(0), batch_entry_kernels(o), o);
  if (o.distill_teacher) {
    c.teacher_chunk_entry = c.chunk_entry;
    // The teacher's embedding and head forward, then the KL over both fp32 logits
    // (executor/train/regularizers.h kl_sum). Forward: two log-softmaxes, each a cross-entropy
    // forward's work (the same exponentials and reductions, priced as the loss is), then exp,
    // difference, product and sum (36 bytes per logit). Backward: one log-softmax backward, a
    // cross-entropy backward's work, then the product's and the exponential's gradients and their
    // sum (48 bytes per logit).
    c.teacher_embedding = c.embedding_forward;
    const Seconds kl_forward = ce_fwd * 2.0 + memory_time(logits * 36, gpu, o);
    const DistillationKernels kl_k = distillation_kernels(o);
    c.teacher_head = pass(head_gemm, Seconds(0), kl_forward + memory_time(norm.forward, gpu, o),
                          kl_k.teacher_head + kl_k.kl.forward, o);
    c.head_backward.memory += ce_bwd + memory_time(logits * 48, gpu, o);
    c.head_backward.kernels += kl_k.kl.backward;
    c.head_backward.overhead += o.kernel_overhead * kl_k.kl.backward;
    c.loss_forward += ce_fwd * 2.0;
    c.loss_backward += ce_bwd;
  }
  c.model_flops = core::Flops(3 * head);
  return c;
}

}  // namespace cpt::cost
