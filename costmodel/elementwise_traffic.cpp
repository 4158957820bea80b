#include "costmodel/elementwise_traffic.h"

namespace cpt::cost {

namespace {

// cpt's executor runs only the LLaMA family (SwiGLU, RMSNorm, RoPE); its operators are counted.
bool counted_eager(const ActivationWidths& widths, KernelDispatch dispatch) {
  return dispatch == KernelDispatch::kEager && widths.gated && !widths.dropout;
}

}  // namespace

PassBytes layer_elementwise_bytes(const ActivationWidths& widths, KernelDispatch dispatch) {
  const double T = widths.tokens, s = widths.sequence_divisor, e = widths.element_bytes;
  const double h = widths.hidden, q = widths.query_width, kv = widths.key_value_width, f = widths.ffn_width,
               d = widths.head_dim;
  if (counted_eager(widths, dispatch)) {
    double fwd = 20 * T * h / s + 10 * T * q + 10 * T * kv + 5 * T * f + 4 * T * d + 12 * T / s;
    double bwd = 54 * T * h / s + 9 * T * h + 16 * T * q + 16 * T * kv + 9 * T * f + 3 * T * d + 22 * T / s;
    if (widths.sequence_divisor > 1) {
      // The projections copy their gathered input (a transposed view); the regions' transposes.
      fwd += 10 * T * h + 4 * T * h + 4 * T * h / s;
      bwd += 4 * T * h + 4 * T * h + 4 * T * h / s;
    } else if (widths.tensor_parallel) {
      fwd += 4 * T * h;  // the clone each all-reduce makes of its input
      bwd += 4 * T * h;
    }
    return {fwd * e, bwd * e};
  }
  // Norms read + write, residual adds read 2 write 1 (split over tp under sequence parallelism),
  // the activation, RoPE on q and k (LLaMA family), dropout masks (1 byte).
  double fwd = (2 * 2 + 2 * 3) * T * h * e / s;
  fwd += (widths.gated ? 3 : 2) * T * f * e;
  if (widths.rope) fwd += 2 * T * (q + kv) * e;
  if (widths.dropout) fwd += 2 * T * h / s;
  return {fwd, 2 * fwd};
}

PassBytes final_norm_bytes(const ActivationWidths& widths, KernelDispatch dispatch) {
  const double T = widths.tokens, s = widths.sequence_divisor, e = widths.element_bytes, h = widths.hidden;
  if (counted_eager(widths, dispatch)) return {(7 * T * h + 6 * T) / s * e, (24 * T * h + 11 * T) / s * e};
  const double fwd = 2 * T * h * e / s;
  return {fwd, 2 * fwd};
}

}  // namespace cpt::cost
