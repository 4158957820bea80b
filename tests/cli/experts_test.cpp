// Mixtures of experts through the real binary: --ep/--etp on estimate, a plan that searches and
// records expert parallelism, and exports that carry it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace cpt::cli_testing {
namespace {

std::filesystem::path scratch() {
  // Per process: ctest -j runs several of these tests at once.
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_experts_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

Run cpt(const std::string& args) {
  return sh(std::string(CPT_BINARY) + " " + args, scratch());
}

TEST(Experts, EstimateTakesExpertDegreesAndRefusesThemOnDenseModels) {
  const auto moe =
      cpt("estimate --model mixtral-8x7b --gpu h100 --gpus 64 --pp 4 --vp 8 --ep 8 --micro-batch 1 "
          "--global-batch 256 --seq-len 4096 --zero 1 --json");
  ASSERT_EQ(moe.exit_code, 0) << moe.err;
  const auto j = nlohmann::json::parse(moe.out);
  EXPECT_GT(j["time_s"]["ep_comm"].get<double>(), 0) << moe.out;
  // Dispatch and combine, forward and backward, and the forward's gather of the pairs per expert:
  // 8 layers a rank, 256 / 16 microbatches.
  EXPECT_EQ(j["calls_per_step"]["ep"].get<double>(), (2 * 2 + 1) * 8 * 16);
  // The table names the pipeline rank whose step its parts are.
  const auto table =
      cpt("estimate --model mixtral-8x7b --gpu h100 --gpus 64 --pp 4 --vp 8 --ep 8 --micro-batch 1 "
          "--global-batch 256 --seq-len 4096 --zero 1");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("(as pipeline rank " + std::to_string(j["critical_pp_rank"].get<int>()) + " spends"),
            std::string::npos)
      << table.out;
  const auto dense =
      cpt("estimate --model llama3-8b --gpu h100 --gpus 8 --ep 2 --micro-batch 1 --global-batch 8 "
          "--seq-len 4096");
  EXPECT_EQ(dense.exit_code, 2);
  EXPECT_NE(dense.err.find("llama3-8b is dense"), std::string::npos) << dense.err;
  const auto folded =
      cpt("estimate --model mixtral-8x7b --gpu h100 --gpus 8 --ep 3 --micro-batch 1 "
          "--global-batch 8 --seq-len 4096");
  EXPECT_EQ(folded.exit_code, 2);
  EXPECT_NE(folded.err.find("must divide tp * cp * dp = 8"), std::string::npos) << folded.err;
  // A degree that is no positive number: one line naming the flag and what it got.
  for (const char* value : {"0", "-2", "abc", "0x8"}) {
    const auto bad = cpt(std::string("estimate --model mixtral-8x7b --gpu h100 --gpus 8 --micro-batch 1 ") +
                         "--global-batch 8 --seq-len 4096 --ep " + value);
    EXPECT_EQ(bad.exit_code, 2) << value;
    EXPECT_NE(bad.err.find(std::string("--ep: expected a positive number, got '") + value + "'"), std::string::npos)
        << bad.err;
  }
  // One the option's integer cannot hold, or a fraction: the flag first, and why.
  for (const char* value : {"99999999999", "2.5", "1e3"}) {
    const auto bad = cpt(std::string("estimate --model mixtral-8x7b --gpu h100 --gpus 8 --micro-batch 1 ") +
                         "--global-batch 8 --seq-len 4096 --etp " + value);
    EXPECT_EQ(bad.exit_code, 2) << value;
    EXPECT_NE(bad.err.find(std::string("--etp: expected a whole number in digits within the option's range, got '") +
                           value + "'"),
              std::string::npos)
        << bad.err;
  }
  // A whole number out of the option's range, in the same words.
  for (const char* value : {"4", "1.5"}) {
    const auto bad = cpt(std::string("estimate --model mixtral-8x7b --gpu h100 --gpus 8 --micro-batch 1 ") +
                         "--global-batch 8 --seq-len 4096 --zero " + value);
    EXPECT_EQ(bad.exit_code, 2) << value;
    EXPECT_NE(bad.err.find(std::string("--zero: expected a whole number in 0..3, got '") + value + "'"),
              std::string::npos)
        << bad.err;
  }
}

// DeepSeek-V3 planned on 256 H200 as its pipeline of uneven stages ([1, 2, ..., 2, 1, 1] layers),
// into scratch()/`name`.
std::filesystem::path plan_deepseek_v3(const std::string& name) {
  const auto out = scratch() / name;
  std::filesystem::remove_all(out);
  const auto planned =
      cpt("plan --model deepseek-v3 --gpu h200 --gpus 256 --global-batch 1024 --seq-len 4096 "
          "--fix tp=1,cp=2,pp=32,ep=8 --out " +
          out.string());
  EXPECT_EQ(planned.exit_code, 0) << planned.err;
  return out;
}

// Megatron's softmax router renormalises the top k unless told the softmax comes first: a model
// that does not renormalise (Qwen2-MoE) exports --moe-router-pre-softmax, Mixtral does not;
// DeepSeek-V3's sigmoid router picks from 4 of 8 groups, scales its weights by 2.5 and balances
// with its expert bias and a sequence-wise loss (the others with the common auxiliary loss).
TEST(Experts, MegatronExportsKeepTheCheckpointsRouting) {
  const std::string v3_args = slurp(plan_deepseek_v3("router-deepseek-v3") / "megatron_args.sh");
  for (const char* arg :
       {"--moe-router-score-function sigmoid", "--moe-router-num-groups 8", "--moe-router-group-topk 4",
        "--moe-router-topk-scaling-factor 2.5", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate 1e-3",
        "--moe-router-load-balancing-type seq_aux_loss", "--moe-aux-loss-coeff 1e-4"}) {
    EXPECT_NE(v3_args.find(arg), std::string::npos) << arg;
  }
  EXPECT_EQ(v3_args.find("--moe-router-pre-softmax"), std::string::npos);
  EXPECT_EQ(v3_args.find("--moe-router-load-balancing-type aux_loss"), std::string::npos);
  for (const auto& [model, pre_softmax] : {std::pair{"qwen2-57b-a14b", true}, std::pair{"mixtral-8x7b", false}}) {
    const auto out = scratch() / (std::string("router-") + model);
    std::filesystem::remove_all(out);
    const auto planned = cpt(std::string("plan --model ") + model +
                             " --gpu h100 --gpus 16 --global-batch 256 --seq-len 4096 --out " + out.string());
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
    const std::string args = slurp(out / "megatron_args.sh");
    EXPECT_EQ(args.find("--moe-router-pre-softmax") != std::string::npos, pre_softmax) << model;
    EXPECT_EQ(args.find("--moe-router-enable-expert-bias"), std::string::npos) << model;
    EXPECT_NE(args.find("--moe-router-load-balancing-type aux_loss"), std::string::npos) << model;
  }
}

// A plan whose first pipeline ranks hold less work (DeepSeek-V3's dense first layers, one layer on
// the first stage) finish last but wait for the others: the breakdown is the estimate's critical
// rank's (a dense stage: no all-to-all) with its simulated wait, its parts add up to the simulated
// step, and bubble_fraction is the busiest rank's (smaller) wait.
TEST(Experts, SimulatedBreakdownOfAnUnevenPipelineIsTheRankFinishingLasts) {
  const auto out = plan_deepseek_v3("v3-uneven");
  const auto simulated = cpt("simulate " + (out / "plan.json").string() + " --json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const auto j = nlohmann::json::parse(simulated.out);
  double parts = 0;
  for (const auto& [name, seconds] : j["time_s"].items()) parts += seconds.get<double>();
  const double step = j["step_time_s"].get<double>();
  EXPECT_NEAR(parts / step, 1.0, 0.05) << j["time_s"].dump();
  EXPECT_LT(j["bubble_fraction"].get<double>(), 0.2) << j["time_s"].dump();
  EXPECT_LE(j["breakdown_pp_rank"].get<int>(), 1);  // finishing last: layers 0-2 are dense
  EXPECT_EQ(j["time_s"]["ep_comm"].get<double>(), 0.0);
  EXPECT_GT(j["time_s"]["pp_bubble"].get<double>(), j["bubble_fraction"].get<double>() * step);
  // Under a network a thousand times slower the transfers dominate, and whatif's rows show them.
  const auto slow = cpt("whatif " + (out / "plan.json").string() + " --nic-gbps 0.4");
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  EXPECT_NE(slow.out.find("  pp_comm s"), std::string::npos) << slow.out;
}

// Priced for cpt's executor, a model it does not run says so in a note (text) or `executor_gap`
// (JSON); the layouts it runs (experts with context and sequence parallelism, experts split over
// etp, latent attention) have neither.
TEST(Experts, EstimateForTheExecutorNamesWhatItDoesNotRun) {
  const std::string zero3_pp =
      "estimate --model tiny-moe --gpu h100 --gpus 4 --micro-batch 2 --global-batch 8 --seq-len 64 --pp 2 --zero 3 ";
  const auto gap = cpt(zero3_pp + "--runtime cpt");
  ASSERT_EQ(gap.exit_code, 0) << gap.err;
  EXPECT_NE(gap.out.find("note: cpt train does not run this layout: ZeRO-3 with pp 2"), std::string::npos) << gap.out;
  const auto gap_json = cpt(zero3_pp + "--runtime cpt --json");
  ASSERT_EQ(gap_json.exit_code, 0) << gap_json.err;
  EXPECT_TRUE(nlohmann::json::parse(gap_json.out).contains("executor_gap")) << gap_json.out;
  // DeepSeek-V3's expert bias runs (model/moe_mlp.h): no note.
  const auto biased = scratch() / "tiny-moe-bias.json";
  std::ofstream(biased) << R"({"name": "tiny-moe-bias", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
    "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
    "tied_embeddings": false, "max_seq_len": 128, "moe": {"experts": 4, "experts_per_token": 2,
    "expert_ffn_hidden": 64, "router": "sigmoid", "expert_bias": true}})";
  const auto bias = cpt("estimate --model " + biased.string() +
                        " --gpu h100 --gpus 2 --micro-batch 2 --global-batch 8 --seq-len 64 --ep 2 --runtime cpt");
  ASSERT_EQ(bias.exit_code, 0) << bias.err;
  EXPECT_EQ(bias.out.find("note: cpt train"), std::string::npos) << bias.out;
  const std::string common =
      "estimate --model tiny-moe --gpu h100 --gpus 4 --micro-batch 2 --global-batch 8 "
      "--seq-len 64 --runtime cpt --json ";
  for (const char* layout : {"--cp 2 --tp 2 --sequence-parallel --ep 2", "--cp 2 --ep 2 --etp 2",
                             "--tp 2 --sequence-parallel --ep 2 --etp 2"}) {
    const auto runs = cpt(common + layout);
    ASSERT_EQ(runs.exit_code, 0) << layout << ": " << runs.err;
    EXPECT_FALSE(nlohmann::json::parse(runs.out).contains("executor_gap")) << layout << ": " << runs.out;
  }
  const auto latent =
      cpt("estimate --model deepseek-v2-lite --gpu h100 --gpus 8 --micro-batch 1 --global-batch 8 --seq-len 4096 "
          "--ep 8 --runtime cpt --json");
  ASSERT_EQ(latent.exit_code, 0) << latent.err;
  EXPECT_FALSE(nlohmann::json::parse(latent.out).contains("executor_gap")) << latent.out;
}

TEST(Experts, PlansRecordAndExportExpertParallelism) {
  const auto out = scratch() / "qwen3";
  std::filesystem::remove_all(out);
  const auto planned =
      cpt("plan --model qwen3-30b-a3b --gpu h100 --gpus 16 --global-batch 512 --seq-len 4096 "
          "--fix ep=8,pp=2 --out " +
          out.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find(" ep8 "), std::string::npos) << planned.out;
  const auto plan = nlohmann::json::parse(slurp(out / "plan.json"));
  EXPECT_EQ(plan["parallel"]["ep"], 8);
  // The candidates list every configuration's expert degrees and schedule.
  const std::string csv = slurp(out / "candidates.csv");
  EXPECT_NE(csv.find(",axis_order,schedule,ep,etp,step_time_s,"), std::string::npos) << csv.substr(0, 200);
  EXPECT_NE(csv.find(",8,1,"), std::string::npos);
  EXPECT_EQ(plan["model"]["moe"]["experts"], 128);
  const std::string megatron = slurp(out / "megatron_args.sh");
  for (const char* arg :
       {"--num-experts 128", "--moe-router-topk 8", "--moe-ffn-hidden-size 768", "--expert-model-parallel-size 8",
        "--expert-tensor-parallel-size 1", "--qk-layernorm", "--kv-channels 128", "--moe-grouped-gemm"}) {
    EXPECT_NE(megatron.find(arg), std::string::npos) << arg << "\n" << megatron;
  }
  EXPECT_NE(slurp(out / "torchtitan.toml").find("expert_parallel_degree = 8"), std::string::npos);
  // cpt's executor runs expert parallelism, each expert split over etp too: its launcher starts the
  // job and report.md prices it.
  for (const auto& dir : {out, scratch() / "qwen3-etp2"}) {
    if (dir != out) {
      std::filesystem::remove_all(dir);
      ASSERT_EQ(cpt("plan --model qwen3-30b-a3b --gpu h100 --gpus 16 --global-batch 512 --seq-len 4096 "
                    "--fix ep=4,etp=2,pp=2,tp=2 --out " +
                    dir.string())
                    .exit_code,
                0);
      EXPECT_EQ(nlohmann::json::parse(slurp(dir / "plan.json"))["parallel"]["etp"], 2);
    }
    EXPECT_EQ(slurp(dir / "torchrun.sh").find("does not run this plan yet"), std::string::npos) << dir;
    EXPECT_EQ(slurp(dir / "report.md").find("| torchrun.sh, slurm.sbatch | cpt | - | - | - | cannot run it"),
              std::string::npos)
        << slurp(dir / "report.md");
  }
  const auto dense = cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --fix ep=2");
  EXPECT_EQ(dense.exit_code, 2);
  EXPECT_NE(dense.err.find("llama3-8b is dense"), std::string::npos) << dense.err;
  EXPECT_NE(slurp(out / "ds_config.json").find("ep_size=8"), std::string::npos);
  // Expert tensor parallelism is noted only where the plan has some.
  EXPECT_EQ(slurp(out / "ds_config.json").find("expert tensor parallel"), std::string::npos);
  EXPECT_NE(slurp(scratch() / "qwen3-etp2" / "ds_config.json").find("expert tensor parallel 2"), std::string::npos);
  // The plan replays in the simulator and under other hardware.
  EXPECT_EQ(cpt("simulate " + (out / "plan.json").string()).exit_code, 0);
  const auto whatif = cpt("whatif " + (out / "plan.json").string() + " --gpu h200");
  ASSERT_EQ(whatif.exit_code, 0) << whatif.err;
  EXPECT_NE(whatif.out.find("ep_comm"), std::string::npos) << whatif.out;
}

TEST(Experts, ModelsShowTheirExpertsAndActiveParameters) {
  const auto shown = cpt("models show deepseek-v3");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  for (const char* part : {"256 routed, top 8", "router sigmoid", "3 / 58", "latent attention", "active params"}) {
    EXPECT_NE(shown.out.find(part), std::string::npos) << part << "\n" << shown.out;
  }
}

}  // namespace
}  // namespace cpt::cli_testing
