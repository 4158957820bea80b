#include "costmodel/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "costmodel/executor_buckets.h"
#include "spec/model_catalog.h"

namespace cpt::cost {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(CPT_SOURCE_DIR) + "/tests/golden/published.json");
  return nlohmann::json::parse(in);
}

// Rajbhandari et al. 2020 Table 1, to the paper's 0.1 GB (16-bit gradients, as the paper counts).
TEST(MemoryModel, ZeroPaperTableOne) {
  const auto g = golden()["zero_table1"];
  CostModelOptions o;
  o.fp32_main_grads = false;
  for (int stage = 0; stage <= 3; ++stage) {
    const auto m = model_state_bytes(g["params"].get<double>(), stage, g["dp"].get<int>(), o);
    const double gb = static_cast<double>((m.weights + m.grads + m.optimizer).value()) / 1e9;
    EXPECT_NEAR(std::round(gb * 10) / 10, g["GB_by_stage"][static_cast<std::size_t>(stage)].get<double>(), 1e-9)
        << "stage " << stage << ": " << gb;
  }
}

TEST(MemoryModel, MegatronCountsEighteenBytesPerParameter) {
  const auto m = model_state_bytes(1e9, 0, 8, CostModelOptions{});
  EXPECT_EQ((m.weights + m.grads + m.optimizer).value(), 18'000'000'000);
  const auto z1 = model_state_bytes(1e9, 1, 8, CostModelOptions{});  // 6 + 12/N
  EXPECT_EQ((z1.weights + z1.grads + z1.optimizer).value(), 7'500'000'000);
}

// Korthikanti et al. 2022 Table 2, bytes per layer for a GPT layer (b 1, s 2048, h 6144, a 64, t 8),
// 16-bit activations, attention scores materialised (their setting: no flash attention).
TEST(MemoryModel, KorthikantiTableTwoEveryCase) {
  const spec::ModelSpec m = spec::find_catalog_model("megatron-22b")->spec;
  const double s = 2048, b = 1, h = 6144, a = 64, t = 8;
  const double sbh = s * b * h;
  CostModelOptions o;
  o.flash_attention = false;
  struct Case {
    const char* name;
    int tp;
    bool sp;
    spec::Recompute rc;
    double expected;
  };
  const Case cases[] = {
      {"no parallelism", 1, false, spec::Recompute::kNone, sbh * (34 + 5 * a * s / h)},
      {"TP", 8, false, spec::Recompute::kNone, sbh * (10 + 24 / t + 5 * a * s / (h * t))},
      {"TP + SP", 8, true, spec::Recompute::kNone, sbh / t * (34 + 5 * a * s / h)},
      {"TP + selective", 8, false, spec::Recompute::kSelective, sbh * (10 + 24 / t)},
      {"TP + SP + selective", 8, true, spec::Recompute::kSelective, 34 * sbh / t},
      {"full recompute", 8, false, spec::Recompute::kFull, 2 * sbh},
      {"full recompute + SP (cpt: checkpoints split by tp)", 8, true, spec::Recompute::kFull, 2 * sbh / t},
  };
  for (const Case& c : cases) {
    spec::ParallelConfig p{.tp = c.tp, .micro_batch = 1, .recompute = c.rc, .sequence_parallel = c.sp};
    EXPECT_NEAR(static_cast<double>(activation_bytes_per_layer(m, p, 2048, o, LayerKind::kDense).value()), c.expected,
                1.0)
        << c.name;
  }
  // FlashAttention stores no s² scores: only a 4-byte log-sum-exp per query and head remains.
  o.flash_attention = true;
  spec::ParallelConfig p{.tp = 8, .micro_batch = 1};
  EXPECT_NEAR(static_cast<double>(activation_bytes_per_layer(m, p, 2048, o, LayerKind::kDense).value()),
              sbh * (10 + 24 / t) + 4 * (a / t) * s, 1.0);
}

// LLaMA layer (GQA, SwiGLU, no dropout), by hand: tiny model, b 2, s 128, tp 2:
// T = 256 tokens; norms 2·2·T·64, QKV input 2·T·64, Q+K 2·T·(4+2)·16/2, V 2·T·2·16/2, attention out
// 2·T·4·16/2, MLP input 2·T·64, gate/up/product 3·2·T·176/2, flash LSE 4·2·T.
TEST(MemoryModel, LlamaLayerByHand) {
  const spec::ModelSpec m = spec::find_catalog_model("tiny")->spec;
  const double T = 256;
  const double expected =
      4 * T * 64 + 2 * T * 64 + 2 * T * 48 + 2 * T * 16 + 2 * T * 32 + 2 * T * 64 + 3 * 2 * T * 88 + 4 * 2 * T;
  spec::ParallelConfig p{.tp = 2, .micro_batch = 2};
  EXPECT_EQ(activation_bytes_per_layer(m, p, 128, CostModelOptions{}, LayerKind::kDense).value(),
            static_cast<std::int64_t>(expected));
}

// The first 1F1B stage holds p microbatches of L/p layers (Korthikanti §4.2.3: L layers' worth);
// interleaving multiplies that by 1 + (p − 1)/(p·v).
// Dropout masks (1 byte per element, after attention and after the MLP) are stored only when the
// recipe applies dropout: GPT-style models by default (Megatron's recipe), not a recipe that turns
// it off (MPT, llm-foundry), nor LLaMA-style models unless asked.
TEST(MemoryModel, DropoutMasksFollowTheRecipe) {
  const auto gpt = spec::find_catalog_model("gpt3-175b")->spec;
  const auto llama = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig p{.tp = 4, .micro_batch = 2, .sequence_parallel = true};
  const double tokens = 2.0 * 2048, masks = 2 * tokens * gpt.hidden / 4;
  CostModelOptions with, without;
  without.dropout = false;
  EXPECT_EQ(activation_bytes_per_layer(gpt, p, 2048, with, LayerKind::kDense).value() -
                activation_bytes_per_layer(gpt, p, 2048, without, LayerKind::kDense).value(),
            static_cast<std::int64_t>(masks));
  EXPECT_EQ(activation_bytes_per_layer(llama, p, 2048, with, LayerKind::kDense),
            activation_bytes_per_layer(llama, p, 2048, without, LayerKind::kDense));
  with.dropout = true;
  EXPECT_EQ(activation_bytes_per_layer(llama, p, 2048, with, LayerKind::kDense).value() -
                activation_bytes_per_layer(llama, p, 2048, without, LayerKind::kDense).value(),
            static_cast<std::int64_t>(2 * tokens * llama.hidden / 4));
}

// The last stage's logits of one microbatch: 16-bit logits and the loss's fp32 copy (6 bytes per
// logit in bf16), or under a fused cross-entropy the logits and their 16-bit gradient (4 bytes).
TEST(MemoryModel, AFusedCrossEntropyKeepsNoFp32Logits) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig p{.tp = 2, .micro_batch = 3};
  const double logits = 3.0 * 4096 * static_cast<double>(m.tp_padded_vocab(2)) / 2;
  CostModelOptions upcast, fused;
  fused.fused_cross_entropy = true;
  EXPECT_DOUBLE_EQ(memory_terms(m, p, 4096, 1, upcast).logits, 6 * logits);
  EXPECT_DOUBLE_EQ(memory_terms(m, p, 4096, 1, fused).logits, 4 * logits);
  // In fp32 both hold 8 bytes a logit: the logits and the loss's copy, or the logits and their gradient.
  upcast.precision = fused.precision = spec::Precision::kFp32;
  EXPECT_DOUBLE_EQ(memory_terms(m, p, 4096, 1, fused).logits, memory_terms(m, p, 4096, 1, upcast).logits);
}

TEST(MemoryModel, InFlightActivationsFollowTheSchedule) {
  const spec::ModelSpec m = spec::find_catalog_model("megatron-175b")->spec;  // 96 layers
  CostModelOptions o;
  o.flash_attention = false;
  for (int v : {1, 3}) {
    const spec::ParallelConfig p{.tp = 8,
                                 .pp = 8,
                                 .virtual_stages = v,
                                 .micro_batch = 1,
                                 .global_batch = 64,
                                 .recompute = spec::Recompute::kSelective,
                                 .sequence_parallel = true,
                                 .schedule = v > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B};
    const auto stages = spec::StagePartition::balanced(96, 8, v);
    const auto schedule = spec::make_schedule(p.schedule, 8, v, 64);
    const spec::RankLayout layout(p, 8);
    const auto mem = memory_per_pp_rank(m, p, 2048, stages, &schedule, layout, o);
    const auto fast = memory_per_pp_rank(m, p, 2048, stages, nullptr, layout, o);
    EXPECT_EQ(fast[0].activations, mem[0].activations);  // uniform chunks: the closed form is exact
    const double per_layer = static_cast<double>(activation_bytes_per_layer(m, p, 2048, o, LayerKind::kDense).value());
    const double factor = v == 1 ? 1.0 : 1.0 + 7.0 / (8.0 * v);
    EXPECT_NEAR(static_cast<double>(mem[0].activations.value()), 96 * per_layer * factor, 1.0) << "v " << v;
    EXPECT_LT(mem[4].activations, mem[0].activations);  // later stages hold fewer microbatches
  }
}

// With uneven chunks (126 layers over 16 interleaved stages) the closed form bounds the schedule
// from above: a search that uses it never keeps a plan the exact model rejects.
TEST(MemoryModel, ClosedFormInFlightIsAnUpperBound) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3.1-405b")->spec;
  const spec::ParallelConfig p{.tp = 8,
                               .pp = 8,
                               .virtual_stages = 2,
                               .micro_batch = 1,
                               .global_batch = 32,
                               .recompute = spec::Recompute::kSelective,
                               .sequence_parallel = true,
                               .schedule = spec::ScheduleKind::kInterleaved1F1B};
  const auto stages = spec::StagePartition::balanced(126, 8, 2);
  const auto schedule = spec::make_schedule(p.schedule, 8, 2, 32);
  const spec::RankLayout layout(p, 8);
  const auto exact = memory_per_pp_rank(m, p, 8192, stages, &schedule, layout, CostModelOptions{});
  const auto fast = memory_per_pp_rank(m, p, 8192, stages, nullptr, layout, CostModelOptions{});
  bool some_rank_differs = false;
  for (std::size_t r = 0; r < 8; ++r) {
    EXPECT_GE(fast[r].activations, exact[r].activations) << r;
    some_rank_differs = some_rank_differs || fast[r].activations != exact[r].activations;
  }
  EXPECT_TRUE(some_rank_differs);  // the case is really uneven
}

TEST(MemoryModel, ParametersOfEachPipelineRank) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig p{.tp = 1, .pp = 4};
  const auto stages = spec::StagePartition::balanced(32, 4, 1);
  double total = 0;
  for (int r = 0; r < 4; ++r) total += params_of_pp_rank(m, p, stages, r);
  EXPECT_EQ(static_cast<std::int64_t>(total), m.num_params());  // untied, vocab already a multiple of 128
}

// ZeRO-2 holds its gradient shard and the buckets being reduced: two of Megatron's size (never
// more than the whole gradient), cpt's executor's own under eager dispatch, and under a pipeline
// schedule the executor accumulates whole gradients like ZeRO-1.
TEST(MemoryModel, ZeroTwoHoldsTheBucketsInFlight) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig p{.dp = 8, .micro_batch = 1, .global_batch = 8, .zero_stage = 2};
  const spec::RankLayout layout(p, 8);
  const auto stages = spec::StagePartition::balanced(32, 1, 1);
  const double psi = params_of_pp_rank(m, p, stages, 0);
  CostModelOptions o;
  const auto fused = memory_per_pp_rank(m, p, 8192, stages, nullptr, layout, o).at(0);
  EXPECT_NEAR(static_cast<double>(fused.grads.value()), 4 * psi / 8 + 4 * 2.0 * 40e6, 2.0);
  // The executor's whole-parameter buckets of 25 MiB: the 525 M-element embedding and LM head are
  // buckets alone, so its two in flight outweigh Megatron's two of 40 M.
  const auto ex = as_run_by_cpt_executor(o);
  const auto eager = memory_per_pp_rank(m, p, 8192, stages, nullptr, layout, ex).at(0);
  const std::vector<spec::LayerRange> all_layers{{0, 32}};
  const auto buckets = executor_gradient_buckets(m, 1, all_layers, true, true, true, ex.bucket_elements, 8);
  EXPECT_GE(buckets.largest_pair, 128256.0 * 4096);
  EXPECT_NEAR(static_cast<double>(eager.grads.value()), 4 * psi / 8 + 4 * buckets.largest_pair, 2.0);

  const spec::ParallelConfig pp{.dp = 4, .pp = 2, .micro_batch = 1, .global_batch = 8, .zero_stage = 2};
  const auto two = spec::StagePartition::balanced(32, 2, 1);
  const auto piped = memory_per_pp_rank(m, pp, 8192, two, nullptr, spec::RankLayout(pp, 8), as_run_by_cpt_executor(o));
  EXPECT_NEAR(static_cast<double>(piped.at(0).grads.value()), 4 * params_of_pp_rank(m, pp, two, 0), 2.0);
}

// ZeRO-3 keeps the root unit (embedding, final norm, LM head) whole for a microbatch, as FSDP's root
// and cpt's executor do: beside the shards, its whole weights (16-bit) and gradients (fp32 main
// grads), the running and the prefetched block, and one reduction in flight.
TEST(MemoryModel, ZeroThreeCountsTheWholeRootUnit) {
  const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig p{.dp = 64, .micro_batch = 1, .global_batch = 64, .zero_stage = 3};
  const spec::RankLayout layout(p, 8);
  const auto stages = spec::StagePartition::balanced(32, 1, 1);
  CostModelOptions o;
  const auto mem = memory_per_pp_rank(m, p, 8192, stages, nullptr, layout, o).at(0);
  const double psi = params_of_pp_rank(m, p, stages, 0);
  const double root = root_params_of_pp_rank(m, p, stages, 0);
  EXPECT_EQ(root, 2.0 * 128256 * 4096 + 4096);                    // embedding + untied head + final norm
  const double block = block_params_per_tp(m.param_counts(), 1);  // norms included: a unit holds them
  EXPECT_EQ(block * 32 + root, psi);
  // The shards, the whole root and the running and prefetched blocks beside them.
  EXPECT_NEAR(static_cast<double>(mem.weights.value()), 2 * psi / 64 + 2 * root + 2 * block * o.zero3_prefetch_blocks,
              2.0);
  // The shards (fp32), the root's whole gradient (bf16, autograd's), and one reduction in flight:
  // here two whole blocks and a block's fp32 slice (the root's slice, at the end, is smaller:
  // 1.05e9 / 64 < 2 · 2.2e8).
  EXPECT_NEAR(static_cast<double>(mem.grads.value()), 4 * psi / 64 + 2 * root + 2 * 2 * block + 4 * block / 64, 2.0);
}

}  // namespace
}  // namespace cpt::cost
