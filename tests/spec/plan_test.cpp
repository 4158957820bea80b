#include "spec/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::spec {
namespace {

Plan sample_plan() {
  const auto model = find_catalog_model("llama3-70b")->spec;
  const auto cluster = HardwareCatalog::builtin().cluster_for_gpu("h200", 64, "--gpu");
  ParallelConfig c{.tp = 8,
                   .dp = 2,
                   .pp = 4,
                   .virtual_stages = 2,
                   .micro_batch = 1,
                   .global_batch = 64,
                   .zero_stage = 1,
                   .recompute = Recompute::kSelective,
                   .sequence_parallel = true,
                   .schedule = ScheduleKind::kInterleaved1F1B};
  Plan p = make_plan(model, cluster, Workload{8192, 1'000'000'000}, c);
  p.predicted = Prediction{};
  p.predicted->step_time_s = 12.5;
  p.predicted->tokens_per_s_per_gpu = 1800.0;
  p.predicted->mfu = 0.41;
  p.predicted->step_time_breakdown_s = {{"compute", 10.0}, {"pp_bubble", 1.5}};
  p.predicted->peak_memory_GiB_per_rank = {{"weights", 17.2}};
  p.predicted->step_time_band = StepTimeBand{11.6, 13.4, 77, "llm-foundry's FSDP tables"};
  p.predicted->precision = Precision::kFp32;  // priced as cpt's executor on a CPU would run it
  p.predicted->flash_attention = false;
  p.predicted->runtime = Runtime::kCpt;
  return p;
}

std::string text_of(const Plan& p) {
  return plan_to_json(p).dump(2);
}

Plan parse(const std::string& text) {
  const auto doc = core::parse_json_text(text, "plan.json");
  auto r = core::JsonObjectReader::root_of(doc);
  return plan_from_json(r);
}

TEST(Plan, JsonRoundTripIsExact) {
  const Plan p = sample_plan();
  EXPECT_EQ(p.stages.layers_per_stage().size(), 8u);
  const Plan q = parse(text_of(p));
  EXPECT_EQ(q, p);
  EXPECT_EQ(text_of(q), text_of(p));
}

TEST(Plan, SaveIsAtomicAndLoads) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_plan_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "plan.json";
  save_plan(sample_plan(), path);
  Plan expected = sample_plan();
  Plan loaded = load_plan(path);
  loaded.provenance.created_utc = expected.provenance.created_utc;  // made a moment apart
  EXPECT_EQ(loaded, expected);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  EXPECT_THROW(save_plan(sample_plan(), dir / "no_such_dir" / "plan.json"), core::RuntimeError);
  std::filesystem::remove_all(dir);
}

std::string error_after(const std::function<void(core::Json&)>& edit) {
  auto j = plan_to_json(sample_plan());
  edit(j);
  try {
    parse(j.dump());
    return "";
  } catch (const core::ConfigError& e) {
    return e.what();
  }
}

TEST(Plan, BadPlansNameThePath) {
  EXPECT_EQ(error_after([](core::Json& j) { j["schema_version"] = 99; }),
            "plan.json: $.schema_version: expected <= 1 (this cpt is 0.1.0; upgrade cpt), got 99");
  EXPECT_EQ(error_after([](core::Json& j) { j["parallel"]["grad_accum"] = 3; }),
            "plan.json: $.parallel.grad_accum: expected 32 (global_batch / (micro_batch * dp), derived), got 3");
  EXPECT_EQ(error_after([](core::Json& j) { j["parallel"]["tp"] = 16; }),
            "plan.json: $.parallel: tp (16) * cp (1) * dp (2) * pp (4) = 128 != number of GPUs (64)");
  EXPECT_EQ(error_after([](core::Json& j) { j["pipeline"]["layers_per_stage"][0] = 11; }),
            "plan.json: $.pipeline.layers_per_stage: expected 8 entries (pp 4 x virtual_stages 2), each >= 1, summing "
            "to the model's 80 layers, got [11,10,10,10,10,10,10,10] (layers per stage sum to 81, the model has 80)");
  EXPECT_EQ(error_after([](core::Json& j) { j["parallel"]["schedule"] = "zb"; }),
            "plan.json: $.parallel.schedule: expected one of gpipe|1f1b|interleaved_1f1b|zb_h1, got string \"zb\"");
  EXPECT_EQ(error_after([](core::Json& j) { j["cluster"]["node"]["gpu"]["hbm_capacity_GiB"] = -80; }),
            "plan.json: $.cluster.node.gpu.hbm_capacity_GiB: expected a number > 0, got -80");
  EXPECT_EQ(error_after([](core::Json& j) { j["extra"] = 1; }), "plan.json: $.extra: unknown key");
  EXPECT_EQ(error_after([](core::Json& j) { j["predicted"]["priced_as"]["precision"] = "int4"; }),
            "plan.json: $.predicted.priced_as.precision: expected one of bf16|fp16|fp8|tf32|fp32, got string \"int4\"");
}

// Plans of earlier cpts carry no "priced_as": the defaults (bf16, FlashAttention, fused kernels).
TEST(Plan, PredictionWithoutPricedAsLoadsAsTheDefaults) {
  auto j = plan_to_json(sample_plan());
  j["predicted"].erase("priced_as");
  const Plan q = parse(j.dump());
  ASSERT_TRUE(q.predicted);
  EXPECT_EQ(q.predicted->precision, Precision::kBf16);
  EXPECT_TRUE(q.predicted->flash_attention);
  EXPECT_EQ(q.predicted->runtime, Runtime::kMegatron);
}

// Plans of the cpt before runtimes say "as_run_by_cpt_executor" instead of "runtime".
TEST(Plan, PricedAsTheExecutorBeforeRuntimesLoadsAsCpt) {
  auto j = plan_to_json(sample_plan());
  j["predicted"]["priced_as"].erase("runtime");
  j["predicted"]["priced_as"]["as_run_by_cpt_executor"] = true;
  EXPECT_EQ(parse(j.dump()).predicted->runtime, Runtime::kCpt);
  j["predicted"]["priced_as"]["as_run_by_cpt_executor"] = false;
  EXPECT_EQ(parse(j.dump()).predicted->runtime, Runtime::kMegatron);
}

TEST(Plan, UnknownRuntimeIsRefusedWithItsPath) {
  auto j = plan_to_json(sample_plan());
  j["predicted"]["priced_as"]["runtime"] = "jax";
  try {
    parse(j.dump());
    FAIL() << "accepted an unknown runtime";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.predicted.priced_as.runtime"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("megatron|deepspeed|fsdp|torchtitan|cpt"), std::string::npos) << e.what();
  }
}

TEST(Plan, ExampleInTheDocsLoads) {
  const Plan p = load_plan(std::string(CPT_SOURCE_DIR) + "/examples/plans/llama3-70b_h200x64.json");
  EXPECT_EQ(p.model, find_catalog_model("llama3-70b")->spec);
  EXPECT_EQ(p.cluster, HardwareCatalog::builtin().cluster_for_gpu("h200", 64, "--gpu"));
  EXPECT_EQ(p.parallel.grad_accum(), 32);
  EXPECT_EQ(p.stages.layers_of_rank(0), 20);
}

TEST(Plan, MakePlanRejectsConfigsThatDoNotFit) {
  const auto model = find_catalog_model("llama3-8b")->spec;
  const auto cluster = HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  EXPECT_THROW(make_plan(model, cluster, Workload{8192, 0}, ParallelConfig{.tp = 4}), core::ConfigError);
  EXPECT_NO_THROW(make_plan(model, cluster, Workload{8192, 0}, ParallelConfig{.tp = 8, .global_batch = 8}));
}

}  // namespace
}  // namespace cpt::spec
