#include "planner/validation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace cpt::planner {
namespace {

// Three published rows (llm-foundry, NeMo 24.07, Megatron-Bridge) and two test rows (a micro-batch
// that cannot fit, a GPU class without a profile).
const std::filesystem::path kSample =
    std::filesystem::path(CPT_SOURCE_DIR) / "tests/golden/published_runs_sample.jsonl";

const PublishedRun& find(const std::vector<PublishedRun>& runs, const std::string& id) {
  const auto it = std::find_if(runs.begin(), runs.end(), [&](const PublishedRun& r) { return r.id == id; });
  EXPECT_NE(it, runs.end()) << id;
  return *it;
}

bool assumes(const PublishedRun& run, const std::string& part) {
  return std::any_of(run.assumptions.begin(), run.assumptions.end(),
                     [&](const std::string& a) { return a.find(part) != std::string::npos; });
}

// llm-foundry's FULL_SHARD with activation checkpointing is ZeRO-3 over all 32 GPUs with full
// recomputation, on an MPT (GELU, LayerNorm, learned positions, tied embeddings); nothing assumed.
TEST(PublishedRuns, FsdpRowsAreZeroThreeWithTheirRecomputation) {
  const auto runs = read_published_runs(kSample);
  ASSERT_EQ(runs.size(), 5u);
  const PublishedRun& lf = find(runs, "lf_a100_40_30b_s2048_g32_mb4_ga1");
  EXPECT_EQ(lf.group, "llm-foundry A100-40GB bf16");
  EXPECT_EQ(lf.gpu, "a100-40g");
  EXPECT_EQ(lf.parallel.zero_stage, 3);
  EXPECT_EQ(lf.parallel.dp, 32);
  EXPECT_EQ(lf.parallel.recompute, spec::Recompute::kFull);
  EXPECT_EQ(lf.parallel.micro_batch, 4);
  EXPECT_EQ(lf.parallel.global_batch, 128);
  EXPECT_EQ(lf.model.mlp, spec::MlpKind::kGelu);
  EXPECT_EQ(lf.model.position, spec::PositionKind::kLearned);
  EXPECT_TRUE(lf.model.tied_embeddings);
  EXPECT_EQ(lf.dropout, false);         // MPT trains without dropout (the data's README)
  EXPECT_TRUE(lf.fused_cross_entropy);  // llm-foundry's default loss_fn
  EXPECT_FALSE(lf.fp32_main_grads.has_value());
  EXPECT_EQ(lf.model.vocab, 50368);
  ASSERT_EQ(lf.assumptions.size(), 1u);  // the recipe's settings, said aloud; nothing else assumed
  EXPECT_NE(lf.assumptions.front().find("fused cross-entropy"), std::string::npos) << lf.assumptions.front();
  EXPECT_EQ(lf.tokens_per_s_per_gpu, 857);
}

// What a NeMo row does not state is assumed aloud: recomputation none, sequence parallelism on
// with tp, the distributed optimizer (ZeRO-1).
TEST(PublishedRuns, WhatARowLeavesOutIsAnAssumption) {
  const auto runs = read_published_runs(kSample);
  const PublishedRun& nemo = find(runs, "nemo2407_h100_fp8_LLAMA3-8B_8gpu");
  EXPECT_EQ(nemo.precision, spec::Precision::kFp8);
  EXPECT_EQ(nemo.model.mlp, spec::MlpKind::kSwiGLU);
  EXPECT_EQ(nemo.parallel.zero_stage, 1);
  EXPECT_TRUE(assumes(nemo, "recomputation not stated"));
  EXPECT_TRUE(assumes(nemo, "ZeRO-1"));
  const PublishedRun& bridge = find(runs, "mbridge_25.11_h100_LLAMA3_70B_64gpu");
  EXPECT_EQ(bridge.parallel.tp, 4);
  EXPECT_EQ(bridge.parallel.virtual_stages, 5);
  EXPECT_EQ(bridge.parallel.schedule, spec::ScheduleKind::kInterleaved1F1B);
  EXPECT_TRUE(bridge.parallel.sequence_parallel);
  EXPECT_TRUE(assumes(bridge, "sequence parallelism not stated"));
  EXPECT_EQ(find(runs, "test_unknown_gpu").not_modelled, "GPU class \"TPU-v5p\" has no profile");
}

// A setting a row leaves out but its published recipe states is taken from the recipe, aloud:
// NeMo's Nemotron-4 340B reduces its gradients in bf16, so they are 16-bit and the run fits.
TEST(PublishedRuns, ARecipeSettingTheRowLacksIsTakenFromItsConfiguration) {
  std::istringstream line(
      R"({"id": "nemo2407_h100_fp8_Nemotron-340B_128gpu", "source": {"title": "NVIDIA/NeMo performance_summary.md"},)"
      R"( "model": {"name": "Nemotron-4-340B", "layers": 96, "hidden": 18432, "heads": 96, "kv_heads": 8,)"
      R"( "ffn": 73728, "vocab": null}, "hardware": {"n_gpus": 128, "gpu_class": "H100-80GB"},)"
      R"( "parallel": {"tp": 8, "pp": 8, "dp": 2, "vp": 12, "cp": 1}, "batch": {"global": 32, "micro": 1,)"
      R"( "seq_len": 4096}, "precision": "FP8", "measured": {"tokens_per_s_per_gpu": 326}})");
  const auto runs = read_published_runs(line, "nemotron.jsonl");
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].fp32_main_grads.has_value());
  EXPECT_FALSE(*runs[0].fp32_main_grads);
  EXPECT_TRUE(assumes(runs[0], "grad_sync_dtype bf16"));
  EXPECT_FALSE(options_for_run(runs[0], cost::CostModelOptions{}).fp32_main_grads);
  const RunCheck check = check_published_run(runs[0], cost::CostModelOptions{});
  EXPECT_EQ(check.outcome, RunOutcome::kCompared) << check.detail;
  EXPECT_LE(check.predicted_peak_memory_gib, 80);
  PublishedRun with_fp32_gradients = runs[0];
  with_fp32_gradients.fp32_main_grads = true;
  EXPECT_EQ(check_published_run(with_fp32_gradients, cost::CostModelOptions{}).outcome,
            RunOutcome::kPredictedOutOfMemory);
}

// A compared run's error is that of the step time: measured / predicted throughput − 1.
TEST(PublishedRuns, ChecksCompareOrSayWhyNot) {
  const auto runs = read_published_runs(kSample);
  std::vector<RunCheck> checks;
  for (const auto& run : runs) checks.push_back(check_published_run(run, cost::CostModelOptions{}));
  const RunCheck& lf = checks[0];
  ASSERT_EQ(lf.outcome, RunOutcome::kCompared) << lf.detail;
  EXPECT_EQ(lf.metric, "tokens_per_s_per_gpu");
  EXPECT_GT(lf.predicted, 0);
  EXPECT_DOUBLE_EQ(lf.error, 857 / lf.predicted - 1);
  EXPECT_LE(lf.predicted_peak_memory_gib, 40);
  EXPECT_EQ(checks[3].outcome, RunOutcome::kPredictedOutOfMemory);
  EXPECT_NE(checks[3].detail.find("GiB >"), std::string::npos);
  EXPECT_EQ(checks[4].outcome, RunOutcome::kNotModelled);
  const auto groups = summarize(checks);
  ASSERT_EQ(groups.back().group, "all");
  EXPECT_EQ(groups.back().rows, 5);
  EXPECT_EQ(groups.back().predicted_out_of_memory, 1);
  EXPECT_EQ(groups.back().not_modelled, 1);
  ASSERT_EQ(groups.back().compared, 3);
  double mean = 0, worst = 0;
  for (int i = 0; i < 3; ++i) {
    mean += checks[static_cast<std::size_t>(i)].error / 3;
    if (std::abs(checks[static_cast<std::size_t>(i)].error) > std::abs(worst))
      worst = checks[static_cast<std::size_t>(i)].error;
  }
  EXPECT_NEAR(groups.back().mean_signed_error, mean, 1e-12);
  EXPECT_EQ(groups.back().worst_error, worst);
  // Grouped by source (the id's prefix), GPU class and precision, in order of appearance.
  ASSERT_EQ(groups.size(), 6u);
  EXPECT_EQ(groups[0].group, "llm-foundry A100-40GB bf16");
  EXPECT_EQ(groups[0].rows, 1);
  EXPECT_EQ(groups[3].group, "test A100-40GB bf16");
  EXPECT_EQ(groups[3].predicted_out_of_memory, 1);
  EXPECT_EQ(groups[4].group, "test TPU-v5p bf16");
}

// The mixture-of-experts rows (bench/data/moe_published_runs.jsonl) name catalog models and their
// expert parallelism; each is priced with both (docs/benchmarks.md has the errors).
TEST(PublishedRuns, MixtureOfExpertsRowsUseTheCatalogAndExpertParallelism) {
  const auto runs = read_published_runs(std::filesystem::path(CPT_SOURCE_DIR) / "bench/data/moe_published_runs.jsonl");
  ASSERT_EQ(runs.size(), 8u);
  for (const auto& run : runs) {
    EXPECT_TRUE(run.model.moe.present()) << run.id;
    EXPECT_GT(run.parallel.ep, 1) << run.id;
    const RunCheck check = check_published_run(run, cost::CostModelOptions{});
    EXPECT_EQ(check.outcome, RunOutcome::kCompared) << run.id << ": " << check.detail;
  }
  EXPECT_EQ(find(runs, "mbridge2509_h100_fp8_qwen3-30b-a3b-tokendrop_16gpu").model.moe.capacity_factor, 1.0);
  EXPECT_EQ(find(runs, "mbridge2602_h100_fp8_qwen3-30b-a3b_16gpu").model.moe.capacity_factor, 0.0);
  EXPECT_EQ(find(runs, "mcorev09_h100_bf16_mixtral-8x7b_64gpu").model.name, "mixtral-8x7b");
  // The 26.02.01 row runs its release's recipe: ep 16 without a pipeline, the flex dispatcher.
  const PublishedRun& hybrid = find(runs, "mbridge260201_h100_fp8_qwen3-30b-a3b_16gpu");
  EXPECT_EQ(hybrid.parallel.ep, 16);
  EXPECT_EQ(hybrid.parallel.pp, 1);
  EXPECT_EQ(hybrid.moe_dispatcher, spec::TokenDispatcher::kFlex);
  EXPECT_EQ(find(runs, "mbridge2511_h100_fp8_qwen3-30b-a3b_16gpu").moe_dispatcher, spec::TokenDispatcher::kAllToAll);
}

TEST(PublishedRuns, AnUnknownTokenDispatcherIsNotModelled) {
  std::istringstream lines(
      R"({"id": "x", "model": {"catalog": "tiny-moe"}, "hardware": {"gpu_class": "H100-80GB", "n_gpus": 8}, )"
      R"("parallel": {"ep": 2, "moe_dispatcher": "pigeon"}, "batch": {"seq_len": 128}, )"
      R"("measured": {"tokens_per_s_per_gpu": 1}})");
  const auto runs = read_published_runs(lines, "inline");
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].not_modelled.has_value());
  EXPECT_NE(runs[0].not_modelled->find("\"pigeon\""), std::string::npos) << *runs[0].not_modelled;
}

// Each row names the software that ran it: llm-foundry's torch FSDP strategies are fsdp, NeMo's and
// Megatron-Bridge's rows megatron; each is priced for its own unless the caller names another.
TEST(PublishedRuns, EachRowIsPricedForItsOwnRuntime) {
  const auto runs = read_published_runs(kSample);
  const PublishedRun& lf = find(runs, "lf_a100_40_30b_s2048_g32_mb4_ga1");
  EXPECT_EQ(lf.runtime, spec::Runtime::kFsdp);
  EXPECT_EQ(find(runs, "nemo2407_h100_fp8_LLAMA3-8B_8gpu").runtime, spec::Runtime::kMegatron);
  EXPECT_EQ(find(runs, "mbridge_25.11_h100_LLAMA3_70B_64gpu").runtime, spec::Runtime::kMegatron);
  const RunCheck own = check_published_run(lf, cost::CostModelOptions{});
  const RunCheck as_megatron = check_published_run(lf, cost::CostModelOptions{}, spec::Runtime::kMegatron);
  EXPECT_EQ(own.runtime, spec::Runtime::kFsdp);
  EXPECT_EQ(as_megatron.runtime, spec::Runtime::kMegatron);
  ASSERT_EQ(own.outcome, RunOutcome::kCompared);
  ASSERT_EQ(as_megatron.outcome, RunOutcome::kCompared);
  // FSDP's eager modules and slower attention kernel: the same run predicted slower than under
  // Megatron-LM's fused kernels; its 16-bit gradients: less memory than Megatron's fp32 ones.
  EXPECT_LT(own.predicted, as_megatron.predicted);
  EXPECT_LT(own.predicted_peak_memory_gib, as_megatron.predicted_peak_memory_gib);
}

TEST(PublishedRuns, AMalformedLineNamesItsFileAndLine) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_published_runs_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "runs.jsonl";
  std::ofstream(path) << "{\"id\": \"a\"}\n[1, 2]\n";
  try {
    (void)read_published_runs(path);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("runs.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)read_published_runs(dir / "missing.jsonl"), core::ConfigError);
  EXPECT_THROW((void)read_published_runs(dir), core::ConfigError);  // a directory
  std::ofstream(dir / "empty.jsonl") << "\n";
  EXPECT_THROW((void)read_published_runs(dir / "empty.jsonl"), core::ConfigError);
  // Nesting deeper than any document needs is refused, not recursed into (core::kMaxJsonDepth).
  std::ofstream(path) << std::string(100000, '[') << "\n";
  EXPECT_THROW((void)read_published_runs(path), core::ConfigError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpt::planner
