#include "costmodel/kernel_dispatch.h"

namespace cpt::cost {

namespace {

bool eager(const CostModelOptions& o) { return o.dispatch == KernelDispatch::kEager; }

// Tensor-parallel calls per layer per pass: Megatron's two all-reduces (f and g), or under
// sequence parallelism an all-gather and a reduce-scatter in their place.
int layer_tp_calls(const spec::ParallelConfig& p) {
  if (p.tp <= 1) return 0;
  return p.sequence_parallel ? 4 : 2;
}

// Context-parallel calls per layer per pass in the all-gather form: K and V gathered forward,
// their gradients reduce-scattered backward.
int layer_cp_calls(const spec::ParallelConfig& p, const CostModelOptions& o) {
  return p.cp > 1 && o.context_parallel == ContextParallelKind::kAllGather ? 2 : 0;
}

constexpr double kEagerLayerForward = 57;
constexpr double kEagerLayerBackward = 76;
constexpr double kEagerPerCall = 5;
constexpr double kEagerPerCpCall = 6;  // on top of kEagerPerCall
constexpr double kEagerSelectiveRecompute = 4;

}  // namespace

double kernels_per_call(const CostModelOptions& o) { return eager(o) ? kEagerPerCall : 0; }

PassKernels layer_kernels(const spec::ParallelConfig& p, const CostModelOptions& o) {
  if (!eager(o)) {
    const double fwd = o.flash_attention ? 12 : 15;
    return {fwd, 2 * fwd};
  }
  const double tp = layer_tp_calls(p) * kEagerPerCall;
  const double cp = layer_cp_calls(p, o) * (kEagerPerCall + kEagerPerCpCall);
  // ZeRO-3 gathers the layer's parameters forward and again backward, and reduce-scatters its
  // gradients.
  const bool zero3 = p.zero_stage == 3 && p.dp * p.cp > 1;
  const double z3_fwd = zero3 ? kEagerPerCall : 0, z3_bwd = zero3 ? 2 * kEagerPerCall : 0;
  return {kEagerLayerForward + tp + cp + z3_fwd, kEagerLayerBackward + tp + cp + z3_bwd};
}

double recompute_kernels(const spec::ParallelConfig& p, const CostModelOptions& o) {
  switch (p.recompute) {
    case spec::Recompute::kNone:
      return 0;
    case spec::Recompute::kSelective:
      if (!eager(o)) return o.flash_attention ? 1 : 4;
      return kEagerSelectiveRecompute;
    case spec::Recompute::kFull:
      return layer_kernels(p, o).forward;
  }
  return 0;
}

PassKernels embedding_kernels(const spec::ParallelConfig& p, const CostModelOptions& o) {
  if (!eager(o)) return {2, 2};
  const double tp = p.tp > 1 ? kEagerPerCall : 0;  // the sum over vocabulary shards
  // ZeRO-3's root unit (embedding, final norm, LM head) is gathered and reduce-scattered like a layer.
  const bool zero3 = p.zero_stage == 3 && p.dp * p.cp > 1;
  return {2 + tp + (zero3 ? kEagerPerCall : 0), 2 + (zero3 ? 2 * kEagerPerCall : 0)};
}

PassKernels head_kernels(const spec::ParallelConfig& p, const CostModelOptions& o) {
  if (!eager(o)) return {6, 6};
  // Vocabulary-parallel loss: 3 all-reduces forward; the head's input: 1 backward (+ 1 all-gather
  // forward under sequence parallelism).
  const double fwd_calls = p.tp > 1 ? 3 + (p.sequence_parallel ? 1 : 0) : 0;
  const double bwd_calls = p.tp > 1 ? 1 : 0;
  return {29 + fwd_calls * kEagerPerCall, 16 + bwd_calls * kEagerPerCall};
}

double step_kernels(const spec::ModelSpec& m, const spec::ParallelConfig& p, double layers, bool first, bool last,
                    const CostModelOptions& o) {
  if (!eager(o)) return 4;
  // Parameter tensors: per layer two norms, q, k, v, o and the MLP's (three for SwiGLU, two else);
  // the embedding; the final norm and the LM head (none apart when tied).
  const double per_layer = 6 + (m.mlp == spec::MlpKind::kSwiGLU ? 3 : 2);
  const double tensors = per_layer * layers + (first ? 1 : 0) + (last ? (m.tied_embeddings ? 1 : 2) : 0);
  double per_tensor = 2;
  if (p.zero_stage == 3) {
    per_tensor += 8;
  } else if (p.zero_stage >= 1) {
    per_tensor += 9;
  }
  return 22 + per_tensor * tensors;
}

}  // namespace cpt::cost
