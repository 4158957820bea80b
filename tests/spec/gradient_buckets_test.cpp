#include "spec/gradient_buckets.h"

#include "spec/model_catalog.h"
#include "spec/parameter_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>

namespace cpt::spec {
namespace {

TEST(GradientBuckets, WorkedExample) {
  const std::vector<std::int64_t> numels{4, 4, 2, 6};
  const auto b = reverse_order_buckets(numels, 7);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (GradientBucket{10, 16, 3, 4}));
  EXPECT_EQ(b[1], (GradientBucket{4, 10, 1, 3}));
  EXPECT_EQ(b[2], (GradientBucket{0, 4, 0, 1}));
}

// Over random parameter lists: the buckets tile the flat vector from its end back without gap,
// hold whole parameters, never exceed the cap unless one parameter (with empty ones) does, and none could have
// taken the next parameter without exceeding the cap (greedy: as few buckets as the order allows).
TEST(GradientBuckets, TileTheFlatVectorInReverseOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int64_t> numels(std::uniform_int_distribution<std::size_t>(1, 30)(rng));
    for (auto& n : numels) n = std::uniform_int_distribution<std::int64_t>(0, 100)(rng);
    const std::int64_t cap = std::uniform_int_distribution<std::int64_t>(1, 300)(rng);
    const auto buckets = reverse_order_buckets(numels, cap);
    std::int64_t total = 0;
    for (const auto n : numels) total += n;
    std::int64_t end = total;
    std::size_t end_param = numels.size();
    for (const auto& b : buckets) {
      ASSERT_EQ(b.end, end);
      ASSERT_EQ(b.end_param, end_param);
      ASSERT_LT(b.first_param, b.end_param);
      std::int64_t sum = 0;
      for (std::size_t k = b.first_param; k < b.end_param; ++k) sum += numels[k];
      ASSERT_EQ(b.size(), sum);
      int nonempty = 0;
      for (std::size_t k = b.first_param; k < b.end_param; ++k) nonempty += numels[k] > 0 ? 1 : 0;
      ASSERT_TRUE(b.size() <= cap || nonempty == 1) << "trial " << trial;
      if (b.first_param > 0) {
        ASSERT_GT(b.size() + numels[b.first_param - 1], cap) << "trial " << trial;
      }
      end = b.begin;
      end_param = b.first_param;
    }
    EXPECT_EQ(end, 0);
    EXPECT_EQ(end_param, 0u);
  }
}

// The executor sorts its parameters' names by gradient_order_key; the cost model visits their sizes
// with visit_gradient_order. Both give the forward-consumption order: norms before the part they
// feed, biases after their weights, the final norm and the head last.
TEST(ParameterOrder, NamesSortIntoTheVisitedOrder) {
  std::vector<std::string> names{"lm_head.weight", "norm.weight"};
  for (int layer = 1; layer >= 0; --layer) {
    for (const char* t : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                          "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}) {
      names.push_back("layers." + std::to_string(layer) + "." + t);  // Hugging Face's order, layers reversed
    }
  }
  names.push_back("embed_tokens.weight");
  names.push_back("teacher.unknown");
  std::stable_sort(names.begin(), names.end(),
                   [](const auto& a, const auto& b) { return gradient_order_key(a) < gradient_order_key(b); });
  const std::vector<std::string> block{
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.up_proj.weight",      "mlp.gate_proj.weight",    "mlp.down_proj.weight"};
  std::vector<std::string> expected{"embed_tokens.weight"};
  for (int layer = 0; layer < 2; ++layer) {
    for (const auto& t : block) expected.push_back("layers." + std::to_string(layer) + "." + t);
  }
  expected.insert(expected.end(), {"norm.weight", "lm_head.weight", "teacher.unknown"});
  EXPECT_EQ(names, expected);

  const auto tiny = find_catalog_model("tiny")->spec;  // h 64, 4 heads of 16, 2 kv heads, ffn 176, vocab 512
  std::vector<std::int64_t> numels;
  visit_gradient_order(tiny, 1, 0, 2, true, true, true, [&](std::int64_t n) { numels.push_back(n); });
  std::vector<std::int64_t> want{512 * 64};
  for (int layer = 0; layer < 2; ++layer)
    want.insert(want.end(), {64, 4096, 2048, 2048, 4096, 64, 11264, 11264, 11264});
  want.insert(want.end(), {64, 512 * 64});
  EXPECT_EQ(numels, want);
}

// A rank of an interleaved pipeline holds its chunks' layers, not contiguous ones: the visit walks
// each range, so a dense layer and an MoE layer apart from each other are visited as they are held.
TEST(ParameterOrder, ARanksChunksAreVisitedRangeByRange) {
  auto model = find_catalog_model("tiny-moe")->spec;
  model.layers = 4;
  model.moe.first_dense_layers = 2;  // layers 0, 1 dense; 2, 3 MoE
  auto visited = [&](std::span<const LayerRange> held, bool first, bool last) {
    std::vector<std::int64_t> numels;
    visit_gradient_order(model, 1, held, first, last, false, [&](std::int64_t n) { numels.push_back(n); });
    return numels;
  };
  const std::vector<LayerRange> chunks{{0, 1}, {2, 1}};  // pp 2 × v 2, rank 0
  auto expected = visited(std::vector<LayerRange>{{0, 1}}, true, false);
  const auto moe_chunk = visited(std::vector<LayerRange>{{2, 1}}, false, false);
  expected.insert(expected.end(), moe_chunk.begin(), moe_chunk.end());
  EXPECT_EQ(visited(chunks, true, false), expected);
  EXPECT_NE(visited(std::vector<LayerRange>{{0, 2}}, true, false), expected);  // two dense layers
}

}  // namespace
}  // namespace cpt::spec
