// The flags that say how a plan is priced, through the real binary: --runtime (which software runs
// it) and --config TRAIN.json (the continual recipe it runs), on estimate, plan, whatif and advise;
// --fused-cross-entropy (the loss kernel) and --moe-dispatcher (how experts' tokens travel) on
// estimate and plan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace cpt::cli_testing {
namespace {

Run cpt(const std::string& args) {
  // Per process: ctest -j runs several of these tests at once.
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_pricing_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return sh(std::string(CPT_BINARY) + " " + args, dir);
}

// Where the export for the priced runtime writes the best plan as another configuration (Megatron-LM
// has no ZeRO-3 beside a pipeline: its file asks for the distributed optimizer), the plan says so
// under its table and report.md prices each file as written; --target keeps it from happening.
TEST(Pricing, AnExportThatWritesAnotherConfigurationIsPricedAsWritten) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_as_exported";
  std::filesystem::remove_all(dir);
  const std::string plan = "plan --model llama3-70b --gpu h100 --gpus 64 --global-batch 256 --seq-len 8192 ";
  const auto planned = cpt(plan + "--fix tp=2,cp=2,pp=4,zero=3 --out " + (dir / "p").string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("note: megatron_args.sh writes #1 with ZeRO-3 -> ZeRO-1 (Megatron-LM's export"),
            std::string::npos)
      << planned.out;
  EXPECT_NE(planned.out.find("as written: "), std::string::npos) << planned.out;
  EXPECT_NE(planned.out.find("`--target megatron` plans only what its export runs as planned"), std::string::npos)
      << planned.out;
  const std::string report = slurp(dir / "p" / "report.md");
  EXPECT_NE(report.find("| megatron_args.sh | megatron as ZeRO-3 -> ZeRO-1 |"), std::string::npos) << report;
  // DeepSpeed's pipeline engine: ZeRO-1 and its own schedule.
  EXPECT_NE(report.find("| ds_config.json | deepspeed as ZeRO-3 -> ZeRO-1"), std::string::npos) << report;
  const auto as_json = cpt(plan + "--fix tp=2,cp=2,pp=4,zero=3 --json");
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_NE(nlohmann::json::parse(as_json.out).value("export_note", "").find("note: megatron_args.sh writes #1"),
            std::string::npos)
      << as_json.out;
  const auto targeted = cpt(plan + "--target megatron");
  ASSERT_EQ(targeted.exit_code, 0) << targeted.err;
  EXPECT_EQ(targeted.out.find("note: megatron_args.sh"), std::string::npos) << targeted.out;
  std::filesystem::remove_all(dir);
}

// --runtime on every command that prices: plan.json records it, whatif prices the plan as it was
// priced and under another runtime when asked, a typo is one line and exit 2.
TEST(Pricing, RuntimeIsChosenRecordedAndReplayed) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_runtime";
  std::filesystem::remove_all(dir);
  const auto planned =
      cpt("plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 64 --seq-len 4096 --runtime fsdp "
          "--fix tp=1,pp=1,cp=1,zero=3 --out " +
          (dir / "new").string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("priced for fsdp"), std::string::npos) << planned.out;
  const auto plan = nlohmann::json::parse(slurp(dir / "new" / "plan.json"));
  EXPECT_EQ(plan["predicted"]["priced_as"]["runtime"], "fsdp");
  // report.md prices the best plan for each export's framework.
  const std::string report = slurp(dir / "new" / "report.md");
  for (const char* row :
       {"| megatron_args.sh | megatron |", "| ds_config.json | deepspeed |",
        "| torchtitan.toml, torchtitan_config.py | torchtitan |", "| torchrun.sh, slurm.sbatch | cpt |"}) {
    EXPECT_NE(report.find(row), std::string::npos) << row << "\n" << report;
  }
  EXPECT_GT(plan["predicted"]["step_time_band_s"]["validation_rows"].get<int>(), 0);
  EXPECT_NE(slurp(dir / "new" / "report.md").find("p10-p90"), std::string::npos);
  const auto same = cpt("whatif " + (dir / "new" / "plan.json").string() + " --gpu h200 --json");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  const auto j = nlohmann::json::parse(same.out);
  EXPECT_EQ(j["before_runtime"], "fsdp");
  EXPECT_EQ(j["after_runtime"], "fsdp");
  // The plan's own step time again, not Megatron-LM's.
  EXPECT_NEAR(j["before"]["step_time_s"].get<double>(), plan["predicted"]["step_time_s"].get<double>(),
              1e-9 * plan["predicted"]["step_time_s"].get<double>());
  const auto other = cpt("whatif " + (dir / "new" / "plan.json").string() + " --gpu h100 --runtime megatron --json");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  const auto k = nlohmann::json::parse(other.out);
  EXPECT_EQ(k["after_runtime"], "megatron");
  EXPECT_LT(k["after"]["step_time_s"].get<double>(), k["before"]["step_time_s"].get<double>());
  const std::string estimate =
      "estimate --model llama3-8b --gpu h100 --gpus 8 --micro-batch 1 --global-batch 8 "
      "--seq-len 4096 --zero 3 --json --runtime ";
  for (const char* name : {"megatron", "deepspeed", "fsdp", "torchtitan", "cpt"}) {
    const auto e = cpt(estimate + name);
    ASSERT_EQ(e.exit_code, 0) << name << ": " << e.err;
    const auto json = nlohmann::json::parse(e.out);
    EXPECT_EQ(json["runtime"], name);
    // A band where validation runs of the runtime on Hopper exist, null where none do.
    const bool validated = std::string(name) == "megatron" || std::string(name) == "fsdp";
    ASSERT_EQ(json["step_time_band_s"].is_null(), !validated) << name;
    if (validated) {
      EXPECT_LT(json["step_time_band_s"]["shortest"].get<double>(), json["step_time_s"].get<double>());
      EXPECT_GT(json["step_time_band_s"]["longest"].get<double>(), json["step_time_s"].get<double>());
    }
  }
  const std::string typos[] = {estimate + "fsdpp",
                               "advise --model llama3-8b --gpu h100 --gpus 8 --global-batch 8 --seq-len 4096 "
                               "--runtime Megatron"};
  for (const std::string& command : typos) {
    const auto typo = cpt(command);
    EXPECT_EQ(typo.exit_code, 2) << command;
    EXPECT_EQ(lines(typo.err), 1) << typo.err;
    EXPECT_NE(typo.err.find("--runtime"), std::string::npos) << typo.err;
  }
  const auto both = cpt(estimate + "fsdp --for-executor");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--for-executor"), std::string::npos) << both.err;
  std::filesystem::remove_all(dir);
}

// --config TRAIN.json prices the continual recipe: the teacher's weights and forward, EWC's state and
// penalty, recorded in plan.json; a TRAIN.json cpt train would refuse is one line naming the key.
TEST(Pricing, ConfigPricesTheContinualRecipe) {
  const std::string recipe =
      R"({"data": [{"name": "new", "path": "shards/new"}], "init_from": "base", "steps": 100,
          "distill": {"lambda": 0.1}, "ewc": {"data": {"name": "old", "path": "shards/old"}}})";
  const auto config = write_temp("cpt_cli_recipe_train.json", recipe);
  const std::string estimate =
      "estimate --model llama3-8b --gpu h100 --gpus 8 --tp 4 --zero 1 --micro-batch 1 "
      "--global-batch 8 --seq-len 4096 --json";
  const auto plain = cpt(estimate);
  const auto priced = cpt(estimate + " --config " + config.string());
  ASSERT_EQ(priced.exit_code, 0) << priced.err;
  const auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(priced.out);
  EXPECT_EQ(a["memory_GiB"]["teacher"].get<double>(), 0);
  EXPECT_GT(b["memory_GiB"]["teacher"].get<double>(), 3);  // 8B / tp 4 in 16 bits: 3.7 GiB
  EXPECT_GT(b["memory_GiB"]["ewc"].get<double>(), 14);     // two fp32 copies: 15 GiB
  EXPECT_GT(b["time_s"]["continual"].get<double>(), 0);
  EXPECT_GT(b["step_time_s"].get<double>(), a["step_time_s"].get<double>());
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_recipe_plan";
  std::filesystem::remove_all(dir);
  const auto planned = cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --config " +
                           config.string() + " --out " + dir.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const auto plan = nlohmann::json::parse(slurp(dir / "plan.json"));
  EXPECT_TRUE(plan["predicted"]["priced_as"]["distill_teacher"].get<bool>());
  EXPECT_TRUE(plan["predicted"]["priced_as"]["ewc"].get<bool>());
  EXPECT_NE(slurp(dir / "report.md").find("continual recipe: KL teacher, EWC"), std::string::npos);
  // Without --tokens, the run's length is TRAIN.json's: 100 steps of 64 x 4096 tokens.
  EXPECT_EQ(plan["workload"]["train_tokens"].get<std::int64_t>(), 100 * 64 * 4096);
  EXPECT_NE(planned.out.find("time to finish 26214400 tokens with #1 (100 steps)"), std::string::npos) << planned.out;
  // No evaluations in this TRAIN.json: only the Fisher estimate is named beside the steps.
  EXPECT_NE(planned.out.find(" h; EWC's Fisher estimate"), std::string::npos) << planned.out;
  EXPECT_EQ(planned.out.find("evaluation(s)"), std::string::npos) << planned.out;
  const auto report = slurp(dir / "report.md");
  EXPECT_NE(report.find("## Time to finish"), std::string::npos);
  for (const char* part : {"| continual |", "| teacher |", "| ewc |"}) {
    EXPECT_NE(report.find(part), std::string::npos) << part << "\n" << report;
  }
  const auto typo = cpt(estimate + " --config " +
                        write_temp("cpt_cli_recipe_typo.json", R"({"data": [], "distill": {"lamda": 1}})").string());
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_EQ(lines(typo.err), 1) << typo.err;
  EXPECT_NE(typo.err.find("cpt_cli_recipe_typo.json"), std::string::npos) << typo.err;
  std::filesystem::remove_all(dir);
}

// whatif prices a plan with its own recipe, or with the one --config gives (KL added to a plain
// plan here), sweeps included; advise prices every family with it.
TEST(Pricing, WhatifAndAdviseTakeTheRecipeToo) {
  const auto config = write_temp("cpt_cli_recipe_kl.json", R"({"data": [{"name": "new", "path": "shards/new"}],
      "init_from": "base", "steps": 100, "distill": {"lambda": 0.1}})");
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_cli_recipe_whatif." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto planned =
      cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --out " + dir.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const auto plan = (dir / "plan.json").string();
  const auto same = cpt("whatif " + plan + " --gpu h200 --json");
  const auto with_kl = cpt("whatif " + plan + " --gpu h200 --json --config " + config.string());
  ASSERT_EQ(same.exit_code, 0) << same.err;
  ASSERT_EQ(with_kl.exit_code, 0) << with_kl.err;
  const auto a = nlohmann::json::parse(same.out), b = nlohmann::json::parse(with_kl.out);
  EXPECT_EQ(a["after_recipe"], "none");
  EXPECT_EQ(b["before_recipe"], "none");
  EXPECT_EQ(b["after_recipe"], "KL teacher");
  EXPECT_GT(b["after"]["memory_GiB"]["teacher"].get<double>(), 0);
  EXPECT_EQ(a["after"]["memory_GiB"]["teacher"].get<double>(), 0);
  const std::string sweep = "whatif " + plan + " --sweep gpus=8,16 --json";
  const auto swept = nlohmann::json::parse(cpt(sweep).out),
             swept_kl = nlohmann::json::parse(cpt(sweep + " --config " + config.string()).out);
  EXPECT_EQ(swept["points"].front()["estimate"]["memory_GiB"]["teacher"].get<double>(), 0);
  EXPECT_GT(swept_kl["points"].front()["estimate"]["memory_GiB"]["teacher"].get<double>(), 0);
  const auto advised =
      cpt("advise --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --config " + config.string());
  ASSERT_EQ(advised.exit_code, 0) << advised.err;
  EXPECT_NE(advised.out.find("continual recipe: KL teacher"), std::string::npos) << advised.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpt::cli_testing

namespace cpt::cli_testing {
namespace {

// TRAIN.json's "epochs" counted from its prepared sets' manifests (95% of a 10 M-token new domain,
// 5% of a 2 B-token replay set: one epoch is 10,526,316 tokens); the time to finish it with
// failures and checkpoints, in --json, and the objective that ranks by it; raw text is refused in
// one line, since its tokens are known only once prepared.
TEST(Pricing, EpochsAreCountedFromTheManifestsAndTheTimeToFinishIsRanked) {
  const auto data = std::filesystem::temp_directory_path() / ("cpt_cli_epochs." + std::to_string(::getpid()));
  for (const auto& [name, tokens] : {std::pair{"new", 10'000'000}, std::pair{"replay", 2'000'000'000}}) {
    std::filesystem::create_directories(data / name);
    std::ofstream(data / name / "manifest.json")
        << R"({"format": "cpt-tokens-v1", "tokens": )" << tokens << R"(, "shards": ["shard_00000"]})";
  }
  const auto config = data / "train.json";
  std::ofstream(config) << R"({"data": [{"name": "new", "path": "new", "weight": 0.95},
                                         {"name": "replay", "path": "replay", "weight": 0.05}],
                               "epochs": 2, "checkpoint": {"interval_steps": 20}})";
  const std::string plan = "plan --model llama3-8b --gpu h100 --gpus 8,64 --global-batch 64 --seq-len 4096 --config " +
                           config.string() + " --objective time-to-train --mtbf-gpu-hours 1000 --json";
  const auto planned = cpt(plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const auto j = nlohmann::json::parse(planned.out);
  const auto& finish = j["time_to_finish"];
  EXPECT_EQ(finish["tokens"].get<std::int64_t>(), 21'052'632);
  EXPECT_EQ(finish["steps"].get<std::int64_t>(), 81);  // 21,052,632 / (64 x 4,096), rounded up
  EXPECT_TRUE(finish["checkpoint_interval_from_config"].get<bool>());
  EXPECT_GT(finish["failure_loss_hours"].get<double>(), 0.0);
  EXPECT_GT(finish["expected_hours"].get<double>(),
            finish["steps_hours"].get<double>() + finish["checkpoints_hours"].get<double>());
  const auto text = cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --config " +
                        config.string() + " --mtbf-gpu-hours 0");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("time to finish 21052632 tokens with #1 (81 steps)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("failures not priced (--mtbf-gpu-hours 0)"), std::string::npos) << text.out;
  const auto raw = data / "raw.json";
  std::ofstream(raw) << R"({"data": [{"name": "web", "sources": ["web.txt"]}], "epochs": 1,
                           "tokenizer": {"model": "t.model"}})";
  const auto refused =
      cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --config " + raw.string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("$.data[0] (\"web\")"), std::string::npos) << refused.err;
  const auto no_budget =
      cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 "
          "--objective time-to-train");
  EXPECT_EQ(no_budget.exit_code, 2);
  EXPECT_NE(no_budget.err.find("--objective time-to-train"), std::string::npos) << no_budget.err;
  std::filesystem::remove_all(data);
}

// TRAIN.json's init_from is the model the job trains: a checkpoint (here only its manifest, as the
// planner reads it) of another architecture than --model is refused in one line naming it; --model
// takes such a directory too, and a directory holding no model is named.
TEST(Pricing, TheModelTrainingStartsFromIsTheOnePlanned) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_cli_init_from." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "four-layers");
  std::filesystem::create_directories(dir / "empty");
  std::ofstream(dir / "four-layers" / "manifest.json") << R"({"format": "cpt-checkpoint-v1", "step": 0, "model":
    {"name": "tiny4", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 515,
     "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": false, "max_seq_len": 128},
    "files": {}})";
  std::ofstream(dir / "train.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2,
                                           "init_from": "four-layers"})";
  const std::string plan =
      "plan --gpu h100 --gpus 2 --global-batch 8 --seq-len 64 --config " + (dir / "train.json").string() + " --model ";
  const auto refused = cpt(plan + "tiny");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("four-layers"), std::string::npos) << refused.err;
  const auto planned = cpt(plan + (dir / "four-layers").string());
  EXPECT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("tiny4 on 2"), std::string::npos) << planned.out;
  const auto empty = cpt(plan + (dir / "empty").string());
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("--model: expected a Hugging Face directory"), std::string::npos) << empty.err;
  std::filesystem::remove_all(dir);
}

// A fused cross-entropy keeps the 16-bit logits and their gradient, not an fp32 copy: the last
// stage holds 2 bytes less per logit, T x V of them (2,048 tokens x Llama 3's 128,256); plan.json
// records it and `cpt simulate` replays it.
TEST(Pricing, FusedCrossEntropyIsTwoBytesLessPerLogitAndRecorded) {
  const std::string estimate =
      "estimate --model llama3-8b --gpu h100 --gpus 8 --dp 8 --zero 1 --micro-batch 1 --global-batch 64 "
      "--seq-len 2048 --json";
  auto activations = [&](const std::string& flag) {
    const auto r = cpt(estimate + flag);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["memory_GiB_per_pp_rank"][0]["activations"].get<double>() * 1024 * 1024 * 1024;
  };
  EXPECT_NEAR(activations("") - activations(" --fused-cross-entropy"), 2.0 * 2048 * 128256, 1.0);
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_cli_fused_ce." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto planned =
      cpt("plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 2048 "
          "--fused-cross-entropy --out " +
          dir.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  std::ifstream in(dir / "plan.json");
  const auto plan = nlohmann::json::parse(in);
  EXPECT_TRUE(plan["predicted"]["priced_as"]["fused_cross_entropy"].get<bool>());
  const auto simulated = cpt("simulate " + (dir / "plan.json").string());
  EXPECT_EQ(simulated.exit_code, 0) << simulated.err;
  std::filesystem::remove_all(dir);
}

// The flex dispatcher sends a token once per node it needs (costmodel/token_dispatch.h): on ep 16
// over two nodes Qwen3-30B-A3B's expert communication costs less than half the all-to-all's; plan.json
// records it, Megatron-LM's arguments carry it, whatif swaps it, and runtimes that dispatch pairs
// refuse it.
TEST(Pricing, FlexDispatcherIsPricedRecordedAndRefusedWhereItDoesNotRun) {
  const std::string estimate =
      "estimate --model qwen3-30b-a3b --gpu h100 --gpus 16 --dp 16 --ep 16 --zero 1 --micro-batch 1 "
      "--global-batch 64 --seq-len 4096 --json";
  auto ep_comm = [&](const std::string& flag) {
    const auto r = cpt(estimate + flag);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["time_s"]["ep_comm"].get<double>();
  };
  EXPECT_LT(ep_comm(" --moe-dispatcher flex"), 0.5 * ep_comm(""));
  // The bytes it sends: (N - 1)(1 - miss(64)) + N(r - 1)(1 - miss(8)) copies of each token
  // (token_dispatch.h's worked example) where the all-to-all sends k = 8; the counts' all-gather
  // (E int64 per rank and MoE layer) is the same for both and 1e-4 of the total.
  auto ep_bytes = [&](const std::string& flag) {
    const auto r = cpt(estimate + flag);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["bytes_per_step"]["ep"].get<double>();
  };
  const double copies = 31404823.0 / 31502350.0 + 275072345989.0 / 47656755080.0;
  EXPECT_NEAR(ep_bytes(" --moe-dispatcher flex") / ep_bytes(""), copies / 8, 1e-3);
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_cli_flex." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string plan = "plan --model qwen3-30b-a3b --gpu h100 --gpus 16 --global-batch 256 --seq-len 4096 ";
  const auto planned = cpt(plan + "--fix tp=1,pp=1,ep=16 --moe-dispatcher flex --out " + dir.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  std::ifstream in(dir / "plan.json");
  EXPECT_EQ(nlohmann::json::parse(in)["predicted"]["priced_as"]["moe_dispatcher"], "flex");
  EXPECT_NE(slurp(dir / "megatron_args.sh").find("--moe-token-dispatcher-type flex"), std::string::npos);
  const auto simulated = cpt("simulate " + (dir / "plan.json").string());
  EXPECT_EQ(simulated.exit_code, 0) << simulated.err;
  // whatif replays the plan as priced (flex) and prices it with the other dispatcher when asked.
  const auto whatif = cpt("whatif " + (dir / "plan.json").string() + " --moe-dispatcher alltoall --json");
  ASSERT_EQ(whatif.exit_code, 0) << whatif.err;
  const auto w = nlohmann::json::parse(whatif.out);
  EXPECT_EQ(w["before_moe_dispatcher"], "flex");
  EXPECT_EQ(w["after_moe_dispatcher"], "alltoall");
  EXPECT_GT(w["after"]["time_s"]["ep_comm"].get<double>(), w["before"]["time_s"]["ep_comm"].get<double>());
  for (const std::string refused :
       {"--target cpt", "--runtime torchtitan", "--target deepspeed", "--target torchtitan --runtime megatron"}) {
    const auto r = cpt(plan + "--moe-dispatcher flex " + refused);
    EXPECT_EQ(r.exit_code, 2) << refused;
    EXPECT_NE(r.err.find("--moe-dispatcher: flex is Megatron-Core's dispatcher"), std::string::npos) << r.err;
  }
  // Where flex does not run (no ep, expert-tp 2, a capacity), the plan is priced and exported with
  // the all-to-all (spec::dispatcher_runs).
  const auto no_ep = dir.string() + "-ep1";
  std::filesystem::remove_all(no_ep);
  ASSERT_EQ(cpt(plan + "--fix tp=1,pp=1,ep=1 --moe-dispatcher flex --out " + no_ep).exit_code, 0);
  EXPECT_NE(slurp(std::filesystem::path(no_ep) / "megatron_args.sh").find("--moe-token-dispatcher-type alltoall"),
            std::string::npos);
  std::filesystem::remove_all(no_ep);
  const auto typo = cpt(estimate + " --moe-dispatcher flx");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("--moe-dispatcher"), std::string::npos) << typo.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpt::cli_testing
