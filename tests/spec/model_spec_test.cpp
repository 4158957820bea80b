#include "spec/model_spec.h"

#include <gtest/gtest.h>

#include "spec/model_catalog.h"

namespace cpt::spec {
namespace {

// The test model: 2 layers, h 64, 4 heads of 16, 2 KV heads, f 176, V 512, untied, SwiGLU, RMSNorm.
TEST(ModelSpec, TinyCountByHand) {
  const ModelSpec m = find_catalog_model("tiny")->spec;
  const auto c = m.param_counts();
  EXPECT_EQ(c.attention_per_layer, 2 * 64 * 64 + 2 * 64 * 32);  // q,o: 64x64; k,v: 64x(2·16)
  EXPECT_EQ(c.mlp_per_layer, 3 * 64 * 176);
  EXPECT_EQ(c.norms_per_layer, 2 * 64);
  EXPECT_EQ(c.embedding, 512 * 64);
  EXPECT_EQ(c.lm_head, 512 * 64);
  EXPECT_EQ(c.final_norm, 64);
  EXPECT_EQ(c.position, 0);
  EXPECT_EQ(m.num_params(), 2 * (12'288 + 33'792 + 128) + 32'768 + 32'768 + 64);
  EXPECT_EQ(m.num_params(), 158'016);
}

// GPT family (f = 4h, MHA, biases, LayerNorm, learned positions, tied): Narayanan et al. 2021
// eq. (2) gives 12·L·h² + 13·L·h + (V + s)·h, plus the final LayerNorm's 2h.
TEST(ModelSpec, GptMatchesMegatronEquationTwo) {
  for (const char* name : {"megatron-1.7b", "megatron-145.6b", "megatron-1t", "gpt3-175b"}) {
    const ModelSpec m = find_catalog_model(name)->spec;
    const std::int64_t L = m.layers, h = m.hidden, V = m.vocab, s = m.max_seq_len;
    EXPECT_EQ(m.num_params(), 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h) << name;
  }
}

TEST(ModelSpec, TiedEmbeddingsDropTheHead) {
  ModelSpec m = find_catalog_model("tiny")->spec;
  const auto untied = m.num_params();
  m.tied_embeddings = true;
  EXPECT_EQ(untied - m.num_params(), 512 * 64);
}

TEST(ModelSpec, PaddedVocab) {
  ModelSpec m = find_catalog_model("llama3-8b")->spec;
  m.vocab = 50257;
  // The tensor-parallel rule: unpadded at tp 1, a multiple of 128·tp above (515 -> 768 at tp 2).
  EXPECT_EQ(tp_padded_vocab(50257, 1), 50257);
  EXPECT_EQ(tp_padded_vocab(515, 2), 768);
  EXPECT_EQ(tp_padded_vocab(128256, 8), 129'024);
  EXPECT_EQ(m.tp_padded_vocab(4), 50'688);  // 99·512 = 50,688 >= 50,257
}

TEST(ModelSpec, ErrorsNameTheFields) {
  ModelSpec m = find_catalog_model("tiny")->spec;
  EXPECT_TRUE(find_model_spec_errors(m).empty());
  m.kv_heads = 3;
  m.hidden = 66;
  const auto e = find_model_spec_errors(m);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0], "hidden (66) must be divisible by heads (4)");
  EXPECT_EQ(e[1], "heads (4) must be divisible by kv_heads (3)");
  m.layers = 0;
  EXPECT_EQ(find_model_spec_errors(m)[0], "layers must be >= 1, got 0");
}

// Dimensions each within what a model file accepts (2^30) but whose parameter count is beyond 64
// bits are an error naming them (`models show` printed a wrapped, smaller-than-a-layer count).
TEST(ModelSpec, DimensionsWhoseCountWrapsAreAnError) {
  ModelSpec m = find_catalog_model("tiny")->spec;
  m.layers = 1 << 30;
  m.hidden = 1 << 30;
  m.heads = 1 << 20;
  m.kv_heads = 1 << 20;
  m.ffn_hidden = 1 << 30;
  const auto e = find_model_spec_errors(m);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "layers (1073741824), hidden (1073741824), ffn_hidden (1073741824) and vocab (512) give more "
                  "parameters than 64 bits count");
}

}  // namespace
}  // namespace cpt::spec
