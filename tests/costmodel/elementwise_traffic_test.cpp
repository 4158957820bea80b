#include "costmodel/elementwise_traffic.h"

#include <gtest/gtest.h>

namespace cpt::cost {
namespace {

// The tiny model's layer (T = 1,024 tokens, h = 64, 4 heads of 16 on 2 key/value heads, MLP 176)
// as one rank runs it alone, under TP2 and under TP2 with sequence parallelism.
ActivationWidths tiny(int tp, bool sequence_parallel) {
  ActivationWidths w;
  w.tokens = 1024;
  w.hidden = 64;
  w.query_width = 64.0 / tp;
  w.key_value_width = 32.0 / tp;
  w.ffn_width = 176.0 / tp;
  w.head_dim = 16;
  w.sequence_divisor = sequence_parallel ? tp : 1;
  w.tensor_parallel = tp > 1;
  w.element_bytes = 4;
  return w;
}

// Measured: fp32 elements the replica of the executor's layer moved, forward and backward,
// counted by `bench/eager_traffic.py` (its `measure`: (8, 128, 64, 4, 2, 16, 176, 1, "none"),
// (8, 128, 64, 2, 1, 16, 88, 1, "tp", 2), (8, 128, 64, 2, 1, 16, 88, 2, "sp", 2)). The cost model's
// coefficients must reproduce them within 0.5%; rerun the script when the layer changes.
TEST(ElementwiseTraffic, EagerLayerMatchesTheCountedOperators) {
  struct Case {
    int tp;
    bool sp;
    double forward_elements, backward_elements;
  };
  for (const Case& c : {Case{1, false, 3272832, 7407872}, Case{2, false, 2592896, 6039808}, Case{2, true, 2717824, 4654336}}) {
    const PassBytes b = layer_elementwise_bytes(tiny(c.tp, c.sp), KernelDispatch::kEager);
    EXPECT_NEAR(b.forward / 4 / c.forward_elements, 1.0, 0.005) << "tp " << c.tp << " sp " << c.sp;
    EXPECT_NEAR(b.backward / 4 / c.backward_elements, 1.0, 0.005) << "tp " << c.tp << " sp " << c.sp;
  }
}

// Megatron's fused kernels: norms and residuals 10·T·h/s, the gated activation 3·T·f, RoPE
// 2·T·(q + kv); backward twice. A GELU (GPT) model under eager dispatch keeps that count (the
// executor runs only the LLaMA family) and adds its 1-byte dropout masks.
TEST(ElementwiseTraffic, FusedCountAndItsFallback) {
  const auto w = tiny(1, false);
  const PassBytes fused = layer_elementwise_bytes(w, KernelDispatch::kFused);
  const double expected = 4 * (10 * 1024 * 64 + 3 * 1024 * 176 + 2 * 1024 * (64 + 32));
  EXPECT_DOUBLE_EQ(fused.forward, expected);
  EXPECT_DOUBLE_EQ(fused.backward, 2 * expected);
  EXPECT_GT(layer_elementwise_bytes(w, KernelDispatch::kEager).forward, 2 * fused.forward);
  auto gpt = w;
  gpt.gated = false;
  gpt.dropout = true;
  gpt.rope = false;  // learned positions
  const PassBytes gpt_eager = layer_elementwise_bytes(gpt, KernelDispatch::kEager);
  EXPECT_DOUBLE_EQ(gpt_eager.forward, layer_elementwise_bytes(gpt, KernelDispatch::kFused).forward);
  EXPECT_DOUBLE_EQ(gpt_eager.forward, 4 * (10 * 1024 * 64 + 2 * 1024 * 176) + 2 * 1024 * 64);
  // The final norm: 7·T·h + 6·T forward, 24·T·h + 11·T backward, split over tp under SP.
  const PassBytes norm = final_norm_bytes(tiny(2, true), KernelDispatch::kEager);
  EXPECT_DOUBLE_EQ(norm.forward, 4 * (7 * 1024 * 64 + 6 * 1024) / 2.0);
  EXPECT_DOUBLE_EQ(norm.backward, 4 * (24 * 1024 * 64 + 11 * 1024) / 2.0);
}

}  // namespace
}  // namespace cpt::cost
