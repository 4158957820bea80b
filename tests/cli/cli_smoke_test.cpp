// Runs the real `cpt` binary: --help of every subcommand, one real invocation of each built one,
// and the bad inputs of the foundation issue, each of which must give exactly one line on stderr
// and exit code 2.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_test_support.h"

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result cpt(const std::string& args, const std::string& env = "") {
  // Per process: ctest -j runs several of these tests at once.
  const auto dir = std::filesystem::temp_directory_path();
  const auto out = dir / ("cpt_cli_test." + std::to_string(::getpid()) + ".out");
  const auto err = dir / ("cpt_cli_test." + std::to_string(::getpid()) + ".err");
  const std::string cmd =
      env + " " + std::string(CPT_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

using cpt::cli_testing::lines;
using cpt::cli_testing::write_temp;

TEST(CliSmoke, HelpOfEverySubcommand) {
  const auto top = cpt("--help");
  EXPECT_EQ(top.exit_code, 0);
  for (const char* sub : {"plan", "whatif", "estimate", "simulate", "train", "run", "calibrate", "compare", "validate",
                          "data", "checkpoint", "doctor", "advise", "models", "profiles", "forecast"}) {
    EXPECT_NE(top.out.find(std::string("  ") + sub + " "), std::string::npos) << sub;
#ifndef CPT_HAVE_TORCH
    if (std::string(sub) == "train" || std::string(sub) == "data" || std::string(sub) == "checkpoint" ||
        std::string(sub) == "doctor") {
      continue;
    }
#endif
    const auto r = cpt(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
  EXPECT_EQ(cpt("--version").exit_code, 0);
}

// The RoPE a checkpoint needs to be continued: its base and Llama 3.1's scaling.
TEST(CliSmoke, ModelsShowTheirRope) {
  const auto shown = cpt("models show llama3.1-8b");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("theta 500000; Llama 3.1 scaling x8 (frequency factors 1, 4; original context 8192)"),
            std::string::npos)
      << shown.out;
  EXPECT_EQ(cpt("models show llama3-8b").out.find("scaling"), std::string::npos);
}

TEST(CliSmoke, CudaCalibrationWithoutAGpuSaysWhatIsMissing) {
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "this machine has a CUDA device";
  const auto r = cpt("calibrate --device cuda");
#ifdef CPT_HAVE_TORCH
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("cpt: error: --device cuda: cpt-exec sees no CUDA device (", 0), 0u) << r.err;
#else
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("needs the LibTorch executor"), std::string::npos) << r.err;
#endif
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliSmoke, ModelsListAndShow) {
  const auto list = cpt("models list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("llama3.1-405b"), std::string::npos);
  const auto json = nlohmann::json::parse(cpt("models list --json").out);
  EXPECT_GE(json.size(), 25u);
  const auto show = nlohmann::json::parse(cpt("models show llama3-8b --json").out);
  EXPECT_EQ(show["params"]["total"], 8'030'261'248);
  EXPECT_EQ(show["model"]["kv_heads"], 8);
  const auto file = cpt(std::string("models show ") + CPT_TEST_DATA_DIR + "/hf_llama2_7b/config.json");
  EXPECT_EQ(file.exit_code, 0);
  EXPECT_NE(file.out.find("6738415616"), std::string::npos);
}

TEST(CliSmoke, ProfilesListAndShow) {
  const auto list = nlohmann::json::parse(cpt("profiles list --json").out);
  EXPECT_EQ(list["gpus"].size(), 7u);
  const auto h200 = nlohmann::json::parse(cpt("profiles show h200 --json").out);
  EXPECT_EQ(h200["kind"], "gpu");
  EXPECT_EQ(h200["profile"]["name"], "h200_sxm_141gb");
  const auto cluster = nlohmann::json::parse(cpt("profiles show h100_256gpu_ndr --json").out);
  EXPECT_EQ(cluster["profile"]["num_gpus"], 256);
  EXPECT_EQ(cpt("profiles show dgx_a100_80gb").exit_code, 0);
  EXPECT_EQ(cpt("profiles list").exit_code, 0);
}

TEST(CliSmoke, ExamplesLoad) {
  const std::string examples = std::string(CPT_SOURCE_DIR) + "/examples";
  for (const char* model : {"/models/tiny.json", "/models/my_llama_1b.json"}) {
    const auto r = cpt("models show " + examples + model + " --json");
    ASSERT_EQ(r.exit_code, 0) << model << ": " << r.err;
    EXPECT_GT(nlohmann::json::parse(r.out)["params"]["total"].get<long long>(), 0);
  }
  const auto c = cpt("profiles show " + examples + "/clusters/h100_2nodes_custom_fabric.json --json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(c.out)["profile"]["num_gpus"], 16);
  const auto cpt70 =
      cpt("estimate --model llama3-70b --gpu h100 --gpus 64 --tp 8 --pp 4 --zero 1 --recompute full "
          "--micro-batch 1 "
          "--global-batch 64 --seq-len 8192 --json --config " +
          examples + "/llama3-70b_cpt/train.json");
  ASSERT_EQ(cpt70.exit_code, 0) << cpt70.err;
  EXPECT_GT(nlohmann::json::parse(cpt70.out)["memory_GiB"]["teacher"].get<double>(), 0.0);
}

// The stable contract of `cpt estimate --json`.
TEST(CliSmoke, EstimateJsonContract) {
  const auto r =
      cpt("estimate --model llama3-8b --gpu h100 --gpus 16 --tp 2 --pp 2 --micro-batch 1 --global-batch 64 "
          "--seq-len 4096 --zero 1 --recompute selective --sequence-parallel --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"feasible", "infeasible_reason", "step_time_s", "tokens_per_s_per_gpu",
                          "model_tflops_per_gpu", "mfu", "hfu", "peak_memory_GiB", "memory_GiB", "time_s"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"weights", "grads", "optimizer", "activations", "other"}) {
    EXPECT_TRUE(j["memory_GiB"].contains(key)) << key;
  }
  double sum = 0;
  for (const char* key :
       {"compute", "recompute", "tp_comm", "cp_comm", "pp_comm", "pp_bubble", "dp_comm", "optimizer", "other"}) {
    ASSERT_TRUE(j["time_s"].contains(key)) << key;
    sum += j["time_s"][key].get<double>();
  }
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_NEAR(sum, j["step_time_s"].get<double>(), 1e-9);
  EXPECT_GT(j["time_s"]["pp_bubble"].get<double>(), 0);
  const auto table =
      cpt("estimate --model llama3-8b --gpu h100 --gpus 8 --tp 8 --micro-batch 1 --global-batch 8 "
          "--seq-len 8192");
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("pp_bubble"), std::string::npos);
}

// `cpt validate`: the error per group of measured runs, as a table or JSON; a file it cannot read,
// or a line that is not a run, is bad input named in one line.
TEST(CliSmoke, EstimateOnACustomNodeSize) {
  // 12 GPUs in nodes of 4: not whole DGX nodes, but whole nodes of the size asked for.
  const auto r =
      cpt("estimate --model llama3-8b --gpu h100 --gpus 12 --gpus-per-node 4 --tp 4 --micro-batch 1 "
          "--global-batch 12 --seq-len 4096 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["feasible"].get<bool>());
  EXPECT_EQ(cpt("estimate --model llama3-8b --gpu h100 --gpus 10 --gpus-per-node 4 --micro-batch 1 --global-batch 10 "
                "--seq-len 4096")
                .exit_code,
            2);
}

TEST(CliSmoke, EstimateOutOfMemoryIsAnAnswerAndBadConfigsAreBadInput) {
  const auto oom =
      cpt("estimate --model llama3-70b --gpu h100 --gpus 8 --micro-batch 1 --global-batch 8 --seq-len 4096 "
          "--json");
  ASSERT_EQ(oom.exit_code, 0) << oom.err;
  const auto j = nlohmann::json::parse(oom.out);
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_EQ(j["infeasible_reason"], "out_of_memory");
  const auto bad =
      cpt("estimate --model llama3-8b --gpu h100 --gpus 6 --tp 3 --micro-batch 1 --global-batch 8 "
          "--seq-len 4096");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lines(bad.err), 1);
  EXPECT_NE(bad.err.find("heads (32) must be divisible by tp (3)"), std::string::npos) << bad.err;
  const auto fp8 =
      cpt("estimate --model llama3-8b --gpu a100 --gpus 8 --micro-batch 1 --global-batch 8 --seq-len 4096 "
          "--precision fp8");
  EXPECT_EQ(fp8.exit_code, 2);
  EXPECT_NE(fp8.err.find("--precision"), std::string::npos);
}

// Several sizes: the best plan at each, the top across them, the front over throughput, memory
// and GPUs; the plan file is the overall best on its own cluster. Bad lists are bad input.
TEST(CliSmoke, PlanAcrossGpuCounts) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_plan_sizes";
  std::filesystem::remove_all(dir);
  const auto r =
      cpt("plan --model llama3-8b --gpu h100 --gpus 8,16,32 --global-batch 64 --seq-len 4096 --top 4 "
          "--objective cost --price-per-gpu-hour 2 --tokens 1000000000 --threads 1 --json --out " +
          dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["threads"], 1);
  ASSERT_EQ(j["sizes"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["sizes"][i]["gpus"], 8 << i);
    EXPECT_EQ(j["sizes"][i]["best"]["config"]["gpus"], 8 << i);
  }
  std::set<int> front_sizes;
  for (const auto& f : j["pareto"]) front_sizes.insert(f["config"]["gpus"].get<int>());
  EXPECT_EQ(front_sizes.size(), 3u);
  const auto plan = nlohmann::json::parse(slurp(dir / "plan.json"));
  EXPECT_EQ(plan["cluster"]["num_gpus"], j["top"][0]["config"]["gpus"]);
  const auto text = cpt("plan --model llama3-8b --gpu h100 --gpus 8,16 --global-batch 64 --seq-len 4096");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Best plan at each size"), std::string::npos) << text.out;
  for (const char* bad : {"8,x", "8,8", "0", "8,,16"}) {
    const auto e =
        cpt(std::string("plan --model llama3-8b --gpu h100 --gpus ") + bad + " --global-batch 64 --seq-len 4096");
    EXPECT_EQ(e.exit_code, 2) << bad;
    EXPECT_EQ(lines(e.err), 1) << e.err;
    EXPECT_NE(e.err.find("--gpus"), std::string::npos) << e.err;
  }
  const auto refine = cpt("plan --model llama3-8b --gpu h100 --gpus 8,16 --global-batch 64 --seq-len 4096 --refine 2");
  EXPECT_EQ(refine.exit_code, 2);
  std::filesystem::remove_all(dir);
}

// The stable contract of `cpt plan --json` and the files of --out.
TEST(CliSmoke, PlanJsonAndOutputs) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_plan_out";
  std::filesystem::remove_all(dir);
  const auto r =
      cpt("plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 64 --seq-len 4096 --top 3 --json --out " +
          dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"evaluated", "feasible", "seconds", "rejected", "top"}) EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_EQ(j["top"].size(), 3u);
  for (const char* key : {"tp", "pp", "dp", "cp", "vp", "micro_batch", "grad_accum", "zero", "hsdp", "recompute",
                          "sequence_parallel", "offload", "schedule"}) {
    EXPECT_TRUE(j["top"][0]["config"].contains(key)) << key;
  }
  EXPECT_TRUE(j["top"][0]["estimate"]["feasible"].get<bool>());
  EXPECT_GE(j["top"][0]["estimate"]["tokens_per_s_per_gpu"].get<double>(),
            j["top"][1]["estimate"]["tokens_per_s_per_gpu"].get<double>());
  EXPECT_TRUE(std::filesystem::exists(dir / "plan.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "report.md"));
  EXPECT_EQ(slurp(dir / "candidates.csv").rfind("rank,tp,cp,pp,vp,dp,micro_batch", 0), 0u);
  const auto plan = nlohmann::json::parse(slurp(dir / "plan.json"));
  EXPECT_EQ(plan["parallel"]["tp"], j["top"][0]["config"]["tp"]);
  EXPECT_EQ(plan["parallel"]["micro_batch"], j["top"][0]["config"]["micro_batch"]);
  EXPECT_NEAR(plan["predicted"]["step_time_s"].get<double>(), j["top"][0]["estimate"]["step_time_s"].get<double>(),
              1e-9);
  // Deterministic: the same input gives the same answer (wall time aside).
  auto again = nlohmann::json::parse(
      cpt("plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 64 --seq-len 4096 --top 3 --json").out);
  auto first = j;
  first.erase("seconds");
  again.erase("seconds");
  EXPECT_EQ(first.dump(), again.dump());
  const auto bad = cpt("plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 64 --seq-len 4096 --fix tpp=2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--fix: unknown key \"tpp\" (did you mean \"tp\"?)"), std::string::npos) << bad.err;
  std::filesystem::remove_all(dir);
}

TEST(CliSmoke, WhatIfOnAPlanAndASweepWithChart) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_whatif";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(cpt("plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 64 --seq-len 4096 --out " + dir.string())
                .exit_code,
            0);
  const auto r = cpt("whatif " + (dir / "plan.json").string() + " --gpu h200 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["before"]["feasible"].get<bool>());
  EXPECT_TRUE(j["after"]["feasible"].get<bool>());
  EXPECT_LT(j["after"]["step_time_s"].get<double>(), j["before"]["step_time_s"].get<double>());  // faster HBM
  const auto svg = dir / "sweep.svg";
  const auto s = cpt("whatif " + (dir / "plan.json").string() + " --gpu h100,a100 --sweep gpus=16,32 --svg " +
                     svg.string() + " --tokens 1000000000 --price-per-gpu-hour 2");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("a100_sxm4_80gb"), std::string::npos);
  const auto chart = slurp(svg);
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  std::size_t polylines = 0;
  for (auto at = chart.find("<polyline"); at != std::string::npos; at = chart.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 6u);  // 2 GPUs x 3 panels
  const auto bad = cpt("whatif " + (dir / "plan.json").string() + " --sweep bandwidth=1,2");
  EXPECT_EQ(bad.exit_code, 2);
  std::filesystem::remove_all(dir);
}

TEST(CliSmoke, AdviseNamesAWinner) {
  const auto r = cpt("advise --model llama2-7b --gpu a100 --gpus 16 --global-batch 64 --seq-len 4096 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["families"].size(), 4u);
  EXPECT_TRUE(j["winner"].is_string());
  EXPECT_FALSE(j["reason"].get<std::string>().empty());
  // Each family priced for the framework that runs it.
  EXPECT_EQ(j["families"][0]["runtime"], "deepspeed");
  EXPECT_EQ(j["families"][1]["runtime"], "fsdp");
  EXPECT_EQ(j["families"][3]["runtime"], "megatron");
}

TEST(CliSmoke, SimulateAPlanWithATrace) {
  const auto dir = std::filesystem::temp_directory_path() / "cpt_cli_simulate";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(cpt("plan --model llama3-8b --gpu h100 --gpus 32 --global-batch 64 --seq-len 4096 --fix pp=4 --out " +
                dir.string())
                .exit_code,
            0);
  const auto trace = dir / "trace.json";
  const auto r = cpt("simulate " + (dir / "plan.json").string() + " --json --trace " + trace.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_GiB", "time_s", "bubble_fraction",
                          "exposed_comm_s", "analytical_step_time_s"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["bubble_fraction"].get<double>(), 0.0);
  EXPECT_NEAR(j["step_time_s"].get<double>() / j["analytical_step_time_s"].get<double>(), 1.0, 0.05);
  const auto t = nlohmann::json::parse(slurp(trace));
  EXPECT_GT(t["traceEvents"].size(), 100u);
  EXPECT_EQ(cpt("simulate " + (dir / "plan.json").string()).exit_code, 0);
  EXPECT_EQ(cpt("simulate /no/plan.json").exit_code, 2);
  // What-ifs: a 50% slower GPU on pipeline rank 1 slows the step; failures add time.
  const auto slow = nlohmann::json::parse(
      cpt("simulate " + (dir / "plan.json").string() + " --json --straggler-rank 1 --straggler-slowdown 0.5").out);
  EXPECT_GT(slow["step_time_s"].get<double>(), j["step_time_s"].get<double>() * 1.2);
  const auto fail = nlohmann::json::parse(
      cpt("simulate " + (dir / "plan.json").string() + " --json --tokens 100000000000 --mtbf-gpu-hours 20000").out);
  EXPECT_GT(fail["failures"]["expected_hours"].get<double>(), fail["failures"]["failure_free_hours"].get<double>());
  EXPECT_EQ(cpt("simulate " + (dir / "plan.json").string() + " --straggler-rank 9 --straggler-slowdown 0.5").exit_code,
            2);
  // The per-rank mode: one slow GPU by global rank; its replica is the critical one.
  const auto per_rank = nlohmann::json::parse(
      cpt("simulate " + (dir / "plan.json").string() + " --json --straggler-gpu 5 --straggler-slowdown 0.5").out);
  EXPECT_GT(per_rank["step_time_s"].get<double>(), j["step_time_s"].get<double>() * 1.1);
  EXPECT_TRUE(per_rank.contains("critical_replica"));
  const auto bad_gpu =
      cpt("simulate " + (dir / "plan.json").string() + " --straggler-gpu 100000 --straggler-slowdown 0.5");
  EXPECT_EQ(bad_gpu.exit_code, 2);
  EXPECT_EQ(lines(bad_gpu.err), 1) << bad_gpu.err;
  // --refine K: the top K re-ranked by simulated step time.
  const auto refined = nlohmann::json::parse(
      cpt("plan --model llama3-8b --gpu h100 --gpus 32 --global-batch 64 --seq-len 4096 --fix pp=4 --top 5 --refine 3 "
          "--json")
          .out);
  ASSERT_EQ(refined["top"].size(), 5u);
  EXPECT_LE(refined["top"][0]["simulated_step_time_s"].get<double>(),
            refined["top"][1]["simulated_step_time_s"].get<double>());
  EXPECT_LE(refined["top"][1]["simulated_step_time_s"].get<double>(),
            refined["top"][2]["simulated_step_time_s"].get<double>());
  EXPECT_FALSE(refined["top"][3].contains("simulated_step_time_s"));
  std::filesystem::remove_all(dir);
}

// Each bad input: exit 2, one line on stderr naming the flag or the file and JSON path.
TEST(CliSmoke, BadInputsGiveOneLineAndExitTwo) {
  const auto unknown_key = write_temp("cpt_cli_unknown_key.json", R"({"name": "c", "node": "dgx_h100", "num_nodes": 2,
      "fabric": "ib_ndr_400g", "gpus_per_nod": 8})");
  const auto wrong_unit = write_temp("cpt_cli_wrong_unit.json", R"({"name": "g", "display_name": "g", "aliases": [],
      "hbm_capacity_TB": 80, "hbm_bandwidth_GB_per_s": 1, "dense_bf16_TFLOPs_per_s": 1,
      "nvlink_bandwidth_GB_per_s_per_direction": 0})");
  const auto wrong_unit_cluster = write_temp(
      "cpt_cli_wrong_unit_cluster.json",
      std::string(R"({"name": "c", "num_nodes": 1, "fabric": "ib_ndr_400g", "node": {"name": "n", "display_name": "n",
      "gpu": )") +
          slurp(wrong_unit) + R"(, "gpus_per_node": 8, "intra_node": {"kind": "nvswitch",
      "bandwidth_GB_per_s_per_direction": 450, "latency_us": 3}, "nics_per_node": 8, "nic_bandwidth_Gbit_per_s": 400}})");
  const auto negative = write_temp("cpt_cli_negative.json", R"({"name": "x", "layers": 2, "hidden": -64, "heads": 4,
      "kv_heads": 2, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "max_seq_len": 128})");
  const auto broken = write_temp("cpt_cli_broken.json", "{\"name\": ");
  const auto no_family = write_temp("cpt_cli_no_model_type.json", R"({"architectures": ["MixtralForCausalLM"],
      "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"profiles show " + unknown_key.string(), unknown_key.string() + ": $.gpus_per_nod: unknown key"},
      {"profiles show " + wrong_unit_cluster.string(),
       wrong_unit_cluster.string() + ": $.node.gpu.hbm_capacity_*: expected exactly one of hbm_capacity_GiB or "
                                     "hbm_capacity_GB, got none"},
      {"models show " + negative.string(),
       negative.string() + ": $.hidden: expected an integer in [1, 1073741824], got -64"},
      {"models show " + broken.string(), broken.string() + ": invalid JSON"},
      {"models show " + no_family.string(), no_family.string() + ": $.model_type: expected the model family"},
      {"models show /no/such/model.json", "/no/such/model.json: file not found"},
      {"models show llama9-1t", "models show NAME: expected a model name"},
      {"run --steps 0", "--steps"},
      {"run --base-steps -4", "--base-steps"},
      {"estimate --model tiny --gpu h100 --gpus 12 --micro-batch 1 --global-batch 12 --seq-len 128",
       "--gpus: expected whole nodes of 8 GPUs or at most one node, got 12"},
      {"profiles show nvlink9", "profiles show NAME: expected a GPU, node, fabric or cluster name"},
      {"frobnicate", "frobnicate"},
      {"whatif --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --svg /tmp/cpt-no-chart.svg",
       "--svg: a chart needs --sweep"},
      {"plan --modle llama3-8b --gpu h100 --gpus 8", "unknown flag --modle for `cpt plan` (did you mean --model?)"},
      {"estimate --model tiny --gpu h100 --gpus 8 --micro-batch 1 --global-batch 8 --seq-len 128 --tpp 2",
       "unknown flag --tpp for `cpt estimate` (did you mean --tp?)"},
      {"plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 128 --seq-len 4096 --fix tp=3",
       "--fix: no layout of the 16 GPUs has tp=3"},
      {"plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 128 --seq-len 4096 --fix zero=4",
       "--fix: zero: expected 0, 1, 2 or 3, got 4"},
      {"plan --model llama3-8b --gpu h100 --gpus 16 --global-batch 128 --seq-len 4096 --fix tp=2,",
       "--fix: expected key=value items separated by commas, got \"tp=2,\""},
      {"--log-level loud models list", "--log-level: expected one of debug|info|warn|error|off, got \"loud\""},
      {"plan --model llama3-8b --gpu h100 --gpus 8 --global-batch 64 --seq-len 4096 --out ''",
       "--out: expected a directory path, got an empty string"},
      {"plan --model llama3-8b --gpu h100 --gpus 8 --gpus 16 --global-batch 64 --seq-len 4096",
       "--gpus: expected once, given 2 times"},
      {"plan --model llama3-8b --gpu h100 --global-batch 64 --seq-len 4096",
       "--gpus: expected the number of GPUs (or a list of sizes) beside --gpu h100, got none"}};
  for (const auto& [args, expected] : cases) {
    const auto r = cpt(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("cpt: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos);
  }
}

#ifdef CPT_HAVE_TORCH
// The executor's subcommands run in cpt-exec; their bad inputs follow the same contract.
TEST(CliSmoke, ExecutorCommandsAnswerAsCptAndRejectBadInputsInOneLine) {
  const auto help = cpt("train --help");
  EXPECT_NE(help.out.find("Usage: cpt train"), std::string::npos) << help.out;

  const auto plan = std::string(CPT_SOURCE_DIR) + "/examples/tiny/plan.json";
  const auto missing = cpt("train --plan " + plan + " --config /nonexistent/train.json --out /tmp/cpt_cli_train");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(lines(missing.err), 1) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/train.json"), std::string::npos) << missing.err;

  const auto typo = write_temp("cpt_cli_train_typo.json", R"({"data": [{"name": "a", "path": "/tmp"}], "step": 3})");
  const auto t = cpt("train --plan " + plan + " --config " + typo.string() + " --out /tmp/cpt_cli_train");
  EXPECT_EQ(t.exit_code, 2) << t.err;
  EXPECT_EQ(lines(t.err), 1) << t.err;
  EXPECT_NE(t.err.find("$.step"), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("steps"), std::string::npos) << "did-you-mean hint: " << t.err;

  const auto no_data = write_temp("cpt_cli_train_nodata.json",
                                  R"({"data": [{"name": "a", "path": "/nonexistent/shards"}], "steps": 3})");
  const auto d = cpt("train --plan " + plan + " --config " + no_data.string() + " --out /tmp/cpt_cli_train");
  EXPECT_EQ(d.exit_code, 2) << d.err;
  EXPECT_EQ(lines(d.err), 1) << d.err;
  EXPECT_NE(d.err.find("/nonexistent/shards"), std::string::npos) << d.err;

  const auto not_ckpt = cpt("checkpoint verify /tmp");
  EXPECT_EQ(not_ckpt.exit_code, 2) << not_ckpt.err;
  EXPECT_EQ(lines(not_ckpt.err), 1) << not_ckpt.err;
  EXPECT_NE(not_ckpt.err.find("not a complete cpt checkpoint"), std::string::npos) << not_ckpt.err;
}
#endif

}  // namespace
