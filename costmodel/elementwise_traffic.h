#pragma once
// Bytes the element-wise operators move — reads plus writes of every operator that is neither a
// GEMM nor the attention core: norms, residual adds, RoPE, the MLP's activation, the gradients
// summed where a tensor feeds several operators — for one decoder layer and for the final norm,
// per rank and microbatch, by the runtime that dispatches them (CostModelOptions::dispatch). The
// cost model prices them at the device's memory bandwidth (layer_costs.cpp, "memory").
//
// kFused (Megatron-LM / Transformer Engine): each norm reads and writes its tensor once, each
// residual add reads two and writes one, the activation reads (gated: two) and writes one, RoPE
// reads and writes q and k, GPT's dropout writes a 1-byte mask; backward moves twice the forward.
//
// kEager (cpt's executor, executor/model/llama_blocks.cpp): its operators as written, counted
// operator by operator below autograd by bench/eager_traffic.py (a PyTorch replica of the layer
// under a dispatch mode; below). With T tokens per rank, h hidden, q
// and kv the query and key/value widths per rank (a·d/tp, g·d/tp), f the MLP width per rank, d the
// head dimension and s the sequence-parallel divisor (tp under sequence parallelism, else 1), in
// elements:
//   forward  20·T·h/s + 10·T·q + 10·T·kv + 5·T·f + 4·T·d + 12·T/s
//   backward 54·T·h/s + 9·T·h + 16·T·q + 16·T·kv + 9·T·f + 3·T·d + 22·T/s
// (per RMSNorm 7·T·h forward and 24·T·h backward: pow, mean, rsqrt, two multiplies, and the
// gradient of each; RoPE 10 and 16 per element of q and k: the negated half, the concatenation,
// two multiplies and an add, and backward the slices' zero-filled gradients; the 9·T·h are the
// input gradients of q/k/v and gate/up summed). Tensor parallelism adds the executor's copies
// around its collectives (executor/parallel/tensor_parallel.cpp): without sequence parallelism
// the clone each all-reduce makes, 4·T·h each pass; with it the transposes around the gathers
// and reduce-scatters, 4·T·h + 4·T·h/s each pass, and the five projections' copies of their
// gathered input (a transposed view), 10·T·h forward and 4·T·h backward. The final norm:
// 7·T·h/s + 6·T/s forward, 24·T·h/s + 11·T/s backward (the embedding's and head's own
// tensor-parallel copies are not counted). Eager mode thus moves 2.3x (forward) and 2.7x
// (backward) what the fused count says for the tiny model. Only the LLaMA family runs on cpt's
// executor; other families under kEager keep the fused count. The counts are in elements of the
// compute precision; a 16-bit run's norms compute in fp32 (not modelled: the executor trains fp32
// on CPU). bench/eager_traffic.py checks every coefficient (largest error 0.44% over 12 random
// shapes, with s = 1, 2 and 4).
#include "costmodel/cost_options.h"

namespace cpt::cost {

struct ActivationWidths {        // one microbatch on one rank
  double tokens = 0;             // T, after context parallelism
  double hidden = 0;             // h
  double query_width = 0;        // a·d / tp
  double key_value_width = 0;    // g·d / tp (each of K and V)
  double ffn_width = 0;          // f / tp
  double head_dim = 0;           // d
  double sequence_divisor = 1;   // tp under sequence parallelism, else 1
  bool tensor_parallel = false;  // tp > 1
  double element_bytes = 2;      // of the compute precision
  bool gated = true;             // SwiGLU (LLaMA family)
  bool dropout = false;          // the recipe stores dropout masks (CostModelOptions::dropout)
  bool rope = true;              // rotary positions on q and k (LLaMA family)
};

struct PassBytes {
  double forward = 0;
  double backward = 0;
};

PassBytes layer_elementwise_bytes(const ActivationWidths& x, KernelDispatch dispatch);
PassBytes final_norm_bytes(const ActivationWidths& x, KernelDispatch dispatch);

}  // namespace cpt::cost
