// The fidelity loop through the real binaries: `cpt calibrate` measures this machine and writes a
// profile that the other commands accept (--cluster FILE and --gpu local); a plan for it trains;
// `cpt compare` reports predicted vs measured with the relative error of each field and appends
// the case to the fidelity log; `cpt run --model ... --cpu` does plan, train and compare in one.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_test_support.h"

namespace {

namespace fs = std::filesystem;
using cpt::cli_testing::python_json_package;
using cpt::cli_testing::sh;
using cpt::cli_testing::slurp;

TEST(Calibrate, ProfilePlansTrainsAndCompares) {
  const auto dir = fs::temp_directory_path() / ("cpt-calibrate-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cpt = CPT_BINARY, d = dir.string();
  const auto profile = d + "/local.json";

  const auto cal = sh(cpt + " calibrate --seconds 4 --ranks 2 --out " + profile + " --json", dir);
  ASSERT_EQ(cal.exit_code, 0) << cal.err;
  const auto report = nlohmann::json::parse(cal.out);
  EXPECT_GT(report["gemm_peak_flops_per_s"].get<double>(), 1e8);
  EXPECT_GT(report["collective_bandwidth_bytes_per_s"].get<double>(), 0);
  EXPECT_GT(report["collective_alpha_s"].get<double>(), 0);
  ASSERT_TRUE(fs::exists(dir / "local.report.json"));
  // The attention kernel, the cross-entropy and the cost of a dispatched operator are measured and
  // land in the profile, where the cost model reads them.
  const auto gpu = nlohmann::json::parse(slurp(profile))["node"]["gpu"];
  ASSERT_TRUE(gpu.contains("attention_efficiency")) << gpu.dump();
  EXPECT_FALSE(gpu["attention_efficiency"]["fp32"].empty());
  for (const auto& point : gpu["attention_efficiency"]["fp32"]) {
    EXPECT_GT(point[1].get<double>(), 0);
    EXPECT_LE(point[1].get<double>(), 1);
  }
  // The cross-entropy at four sizes, from 1M to 32M logits.
  ASSERT_EQ(gpu["cross_entropy_rates"].size(), 4u) << gpu.dump();
  EXPECT_EQ(gpu["cross_entropy_rates"][0]["logits"].get<double>(), 1024.0 * 1024);
  EXPECT_EQ(gpu["cross_entropy_rates"][3]["logits"].get<double>(), 1024.0 * 32768);
  for (const auto& point : gpu["cross_entropy_rates"]) {
    EXPECT_GT(point["forward_logits_per_s"].get<double>(), 1e6);
    EXPECT_GT(point["backward_logits_per_s"].get<double>(), 1e6);
  }
  // The ranks share the machine's cores: the node says how many and with how many threads each.
  const auto node = nlohmann::json::parse(slurp(profile))["node"];
  ASSERT_TRUE(node.contains("shared_cores")) << node.dump();
  EXPECT_EQ(node["shared_cores"]["cores"].get<int>(), report["cores"].get<int>());
  EXPECT_EQ(node["shared_cores"]["threads_per_device"].get<int>(), report["threads_per_rank"].get<int>());
  EXPECT_GT(gpu["kernel_overhead_us"].get<double>(), 0.1);
  EXPECT_LT(gpu["kernel_overhead_us"].get<double>(), 1000);
  // The executor's scalar all-reduce (16 bytes), per ring step: in the profile, and the report's
  // seconds over 2(n − 1) = 2 steps on its two ranks.
  ASSERT_TRUE(node["intra_node"].contains("scalar_all_reduce_step_latency_us")) << node.dump();
  const double scalar_step_us = node["intra_node"]["scalar_all_reduce_step_latency_us"].get<double>();
  EXPECT_GT(scalar_step_us, 0.1);
  EXPECT_LT(scalar_step_us, 1e5);
  EXPECT_NEAR(report["scalar_all_reduce_step_s"].get<double>() * 1e6, scalar_step_us, 1e-6 * scalar_step_us);
  // The compute jitter, from the waits of small all-reduces after 1, 4 and 16 ms of GEMMs.
  EXPECT_GE(gpu["compute_jitter_sqrt_s"].get<double>(), 0.0);
  EXPECT_LT(gpu["compute_jitter_sqrt_s"].get<double>(), 1.0);
  // Each length's median round, with the spread of the ranks' compute beside its extra wait.
  ASSERT_EQ(report["sync_waits"].size(), 3u) << report.dump();
  for (const auto& w : report["sync_waits"]) {
    EXPECT_GT(w["segment_s"].get<double>(), 0);
    EXPECT_GE(w["spread_s"].get<double>(), 0);
    EXPECT_LT(w["spread_s"].get<double>(), w["segment_s"].get<double>());
  }
  // Computing beside an in-flight all-gather: the median round's three timings and the slowdown
  // they give, (overlapped − GEMMs alone) / calls alone, the middle of the five rounds' (sorted),
  // which lands in the profile.
  const auto overlap = report["overlap"];
  ASSERT_TRUE(overlap.is_object()) << report.dump();
  const double gemm_s = overlap["gemm_s"].get<double>(), comm_s = overlap["comm_s"].get<double>(),
               overlapped_s = overlap["overlapped_s"].get<double>();
  EXPECT_GT(gemm_s, 0);
  EXPECT_GT(comm_s, 0);
  EXPECT_GT(overlapped_s, 0);
  EXPECT_NEAR(overlap["slowdown"].get<double>(), std::max(0.0, (overlapped_s - gemm_s) / comm_s), 1e-9);
  const auto rounds = overlap["round_slowdowns"].get<std::vector<double>>();
  ASSERT_EQ(rounds.size(), 5u);
  EXPECT_TRUE(std::is_sorted(rounds.begin(), rounds.end()));
  EXPECT_DOUBLE_EQ(rounds[2], overlap["slowdown"].get<double>());
  ASSERT_TRUE(node["intra_node"].contains("overlap_compute_slowdown")) << node.dump();
  // (capped at 4, the most a profile accepts)
  EXPECT_DOUBLE_EQ(node["intra_node"]["overlap_compute_slowdown"].get<double>(),
                   std::min(4.0, overlap["slowdown"].get<double>()));
  // Training-like work resuming from a blocking call: the median round's two timings and what one
  // call costs, (after a call − back to back), ≥ 0, the middle of five sorted rounds; in the
  // profile (capped at 0.1 s) where every rank has its cores.
  const auto resume = report["resume"];
  ASSERT_TRUE(resume.is_object()) << report.dump();
  const double alone_s = resume["segment_s"].get<double>(), after_s = resume["after_call_s"].get<double>();
  EXPECT_GT(alone_s, 0);
  EXPECT_GT(after_s, 0);
  EXPECT_NEAR(resume["lost_per_call_s"].get<double>(), std::max(0.0, after_s - alone_s), 1e-12);
  const auto lost = resume["round_lost_s"].get<std::vector<double>>();
  ASSERT_EQ(lost.size(), 5u);
  EXPECT_TRUE(std::is_sorted(lost.begin(), lost.end()));
  EXPECT_DOUBLE_EQ(lost[2], resume["lost_per_call_s"].get<double>());
  if (report["ranks"].get<int>() * report["threads_per_rank"].get<int>() <= report["cores"].get<int>()) {
    ASSERT_TRUE(node["intra_node"].contains("compute_lost_resuming_from_call_us")) << node.dump();
    EXPECT_NEAR(node["intra_node"]["compute_lost_resuming_from_call_us"].get<double>(),
                1e6 * std::min(0.1, resume["lost_per_call_s"].get<double>()), 1e-6);
  } else {
    EXPECT_FALSE(node["intra_node"].contains("compute_lost_resuming_from_call_us")) << node.dump();
  }

  // The profile as any other: the estimate on it uses the calibrated peak.
  const auto est = sh(cpt + " estimate --model tiny --cluster " + profile +
                          " --micro-batch 2 --global-batch 8 --seq-len 64 --precision fp32 --json",
                      dir);
  ASSERT_EQ(est.exit_code, 0) << est.err;
  EXPECT_GT(nlohmann::json::parse(est.out)["step_time_s"].get<double>(), 0);

  // --gpu local finds it through CPT_LOCAL_PROFILE, and says so when there is none.
  const std::string env = "CPT_LOCAL_PROFILE=" + profile + " ";
  const auto plan = sh(env + cpt + " plan --model tiny --gpu local --gpus 2 --global-batch 8 --seq-len 64 --fix " +
                           "dp=2,zero=1,offload=none,micro_batch=2 --out " + d + "/plan",
                       dir);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto missing = sh("CPT_LOCAL_PROFILE=" + d + "/none.json " + cpt + " plan --model tiny --gpu local --gpus 1 " +
                              "--global-batch 8 --seq-len 64",
                          dir);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("run `cpt calibrate` first"), std::string::npos) << missing.err;
  const auto too_many = sh(env + cpt + " plan --model tiny --gpu local --gpus 4 --global-batch 8 --seq-len 64", dir);
  EXPECT_EQ(too_many.exit_code, 2);
  // `cpt simulate` replays the plan as it was priced (fp32, the executor's eager dispatch): its
  // analytical step is plan.json's prediction, and the replay agrees with it.
  const auto simulated = sh(cpt + " simulate " + d + "/plan/plan.json --json", dir);
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const auto sim = nlohmann::json::parse(simulated.out);
  std::ifstream plan_file(dir / "plan/plan.json");
  const double planned_s = nlohmann::json::parse(plan_file)["predicted"]["step_time_s"].get<double>();
  EXPECT_NEAR(sim["analytical_step_time_s"].get<double>(), planned_s, 1e-12 * planned_s);
  EXPECT_NEAR(sim["step_time_s"].get<double>() / planned_s, 1.0, 0.01);

  // Train the plan a few steps and compare.
  const auto src = python_json_package().string();
  ASSERT_FALSE(src.empty());
  ASSERT_EQ(sh(cpt + " data train-tokenizer " + src + " --ext .py --vocab-size 512 --out " + d + "/tok", dir).exit_code,
            0);
  ASSERT_EQ(sh(cpt + " data prepare " + src + " --ext .py --tokenizer " + d + "/tok.model --out " + d + "/data", dir)
                .exit_code,
            0);
  std::ofstream(dir / "train.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 6, "seed": 5,
    "threads": 1, "log_interval_steps": 0})";
  const auto train = sh(cpt + " train --plan " + d + "/plan/plan.json --config " + d + "/train.json --out " + d +
                            "/run --nproc-per-node 2",
                        dir);
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const auto log = d + "/fidelity.jsonl";
  const auto cmp = sh(cpt + " compare " + d + "/run --json --log " + log, dir);
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto fields = nlohmann::json::parse(cmp.out)["fields"];
  for (const char* f : {"step_time_s", "tokens_per_s_per_gpu", "weights_bytes", "grads_bytes", "optimizer_bytes"}) {
    ASSERT_TRUE(fields.contains(f)) << f;
    const double p = fields[f]["predicted"].get<double>(), m = fields[f]["measured"].get<double>();
    EXPECT_GT(m, 0) << f;
    EXPECT_DOUBLE_EQ(fields[f]["rel_err"].get<double>(), (p - m) / m) << f;
  }
  // The model state is the cost model's, exactly (ZeRO-1, fp32).
  for (const char* f : {"weights_bytes", "grads_bytes", "optimizer_bytes"}) {
    EXPECT_EQ(fields[f]["rel_err"].get<double>(), 0.0) << f;
  }
  // One line per comparison in the log.
  ASSERT_EQ(sh(cpt + " compare " + d + "/run --log " + log, dir).exit_code, 0);
  const auto text = slurp(log);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(sh(cpt + " compare " + d + "/nothing", dir).exit_code, 2);
  // A GPU run's measured.json (the device and the allocator's peaks edited into this run's): the
  // activation peak is the highest peak less that rank's model state, beside the cost model's.
  fs::copy(dir / "run", dir / "gpu-run", fs::copy_options::recursive);
  {
    auto m = nlohmann::json::parse(slurp(dir / "gpu-run/measured.json"));
    m["device"] = "cuda:0";
    std::int64_t i = 0;
    for (auto& r : m["ranks"]) {
      auto& bytes = r["memory_bytes"];
      bytes["peak"] = bytes["weights"].get<std::int64_t>() + bytes["grads"].get<std::int64_t>() +
                      bytes["optimizer"].get<std::int64_t>() + 1'000'000 + (i++) * 100'000;
    }
    std::ofstream(dir / "gpu-run/measured.json") << m.dump();
  }
  const auto gpu_cmp = sh(cpt + " compare " + d + "/gpu-run --json --log " + d + "/f3.jsonl", dir);
  ASSERT_EQ(gpu_cmp.exit_code, 0) << gpu_cmp.err;
  const auto gpu_fields = nlohmann::json::parse(gpu_cmp.out)["fields"];
  ASSERT_TRUE(gpu_fields.contains("activation_peak_bytes")) << gpu_fields;
  EXPECT_NEAR(gpu_fields["activation_peak_bytes"]["measured"].get<double>(), 1.1e6, 1.0);  // rank 1's
  // Predicted: the cost model's bf16 activations plus autocast's bf16 copies of the weights a
  // matmul uses (cmd_compare.cpp): both blocks and the LM head, not the embedding, 2 bytes each.
  const auto bf16 = sh(cpt + " estimate --model tiny --cluster " + profile + " --dp 2 --zero 1 --micro-batch 2 " +
                           "--global-batch 8 --seq-len 64 --precision bf16 --for-executor --json",
                       dir);
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const double activations =
      nlohmann::json::parse(bf16.out)["memory_GiB"]["activations"].get<double>() * 1024 * 1024 * 1024;
  const double block = 2 * 64.0 * 64 + 2 * 64.0 * 32 + 3 * 64.0 * 176;  // q, o; k, v; gate, up, down (norms stay fp32)
  const double copies = 2.0 * (2 * block + 512.0 * 64);
  EXPECT_NEAR(gpu_fields["activation_peak_bytes"]["predicted"].get<double>(), activations + copies, 2.0);
  EXPECT_FALSE(fields.contains("activation_peak_bytes"));  // not on the CPU

  // A run that trained with KL distillation (its copy of TRAIN.json says so) is priced with its
  // teacher's forward, as `cpt plan --config` prices it.
  fs::copy(dir / "run", dir / "kl-run", fs::copy_options::recursive);
  {
    auto c = nlohmann::json::parse(slurp(dir / "kl-run/train_config.json"));
    c["distill"] = {{"lambda", 0.1}, {"teacher", "base"}};
    std::ofstream(dir / "kl-run/train_config.json") << c.dump();
  }
  const auto kl_cmp = sh(cpt + " compare " + d + "/kl-run --json --log " + d + "/f4.jsonl", dir);
  ASSERT_EQ(kl_cmp.exit_code, 0) << kl_cmp.err;
  EXPECT_GT(nlohmann::json::parse(kl_cmp.out)["fields"]["step_time_s"]["predicted"].get<double>(),
            fields["step_time_s"]["predicted"].get<double>());

  // Recalibration from the run: a profile with the fitted slowdowns and fixed costs, which compare
  // accepts in place of the plan's.
  const auto refit =
      sh(cpt + " calibrate --from-runs " + d + "/run --base " + profile + " --out " + d + "/refit.json --json", dir);
  ASSERT_EQ(refit.exit_code, 0) << refit.err;
  const auto fitted = nlohmann::json::parse(refit.out);
  EXPECT_GT(fitted["compute_scale"].get<double>(), 0);
  EXPECT_EQ(fitted["runs"].size(), 1u);
  EXPECT_TRUE(nlohmann::json::parse(slurp(dir / "refit.json"))["node"]["gpu"].contains("kernel_overhead_us"));
  const auto recompared =
      sh(cpt + " compare " + d + "/run --cluster " + d + "/refit.json --json --log " + d + "/f2.jsonl", dir);
  ASSERT_EQ(recompared.exit_code, 0) << recompared.err;
  EXPECT_NEAR(nlohmann::json::parse(recompared.out)["fields"]["step_time_s"]["predicted"].get<double>(),
              fitted["runs"][0]["predicted_step_s_after"].get<double>(), 1e-9);
  EXPECT_EQ(sh(cpt + " calibrate --from-runs " + d + "/nothing --base " + profile, dir).exit_code, 2);
  // A run trained with padded rows took narrower steps than its plan: compare warns, a fit refuses.
  fs::copy(dir / "run", dir / "padded-run", fs::copy_options::recursive);
  {
    auto m = nlohmann::ordered_json::parse(slurp(dir / "padded-run/measured.json"));
    m["packing"] = "padded";
    std::ofstream(dir / "padded-run/measured.json") << m.dump();
  }
  const auto padded_cmp = sh(cpt + " compare " + d + "/padded-run --json --log " + d + "/f5.jsonl", dir);
  EXPECT_EQ(padded_cmp.exit_code, 0) << padded_cmp.err;
  EXPECT_NE(padded_cmp.err.find("padded-run/measured.json: trained with packing \"padded\""), std::string::npos)
      << padded_cmp.err;
  EXPECT_EQ(nlohmann::json::parse(padded_cmp.out)["packing"], "padded");
  EXPECT_NE(slurp(dir / "f5.jsonl").find("\"packing\":\"padded\""), std::string::npos);
  const auto padded_fit = sh(cpt + " calibrate --from-runs " + d + "/padded-run --base " + profile, dir);
  EXPECT_EQ(padded_fit.exit_code, 2);
  EXPECT_NE(padded_fit.err.find("padded-run/measured.json: $.packing: expected \"packed\""), std::string::npos)
      << padded_fit.err;

  // cpt run --model: plan for this machine, write the plan, read it back, train, compare.
  const auto planned = sh(env + "CPT_FIDELITY_LOG=" + d + "/fidelity-run.jsonl " + cpt +
                              " run --model tiny --cpu --gpus 2 --config " + d + "/train.json " +
                              "--global-batch 8 --seq-len 64 --fix pp=2,schedule=1f1b,micro_batch=2 --out " + d + "/rp",
                          dir);
  ASSERT_EQ(planned.exit_code, 0) << planned.out << planned.err;
  EXPECT_TRUE(fs::exists(dir / "rp/plan/plan.json"));
  EXPECT_TRUE(fs::exists(dir / "rp/train/measured.json"));
  EXPECT_NE(planned.out.find("pp_comm_and_bubble_s"), std::string::npos) << planned.out;
  EXPECT_EQ(
      sh(cpt + " run --model tiny --gpus 2 --config " + d + "/train.json --global-batch 8 --seq-len 64", dir).exit_code,
      2);  // neither --gpu nor --cpu
  // A plan step that refuses its input: its one line, exit 2 (not a second line and exit 3); no
  // configuration that fits: said so, not a missing plan.json.
  const std::string moe = cpt + " run --model tiny-moe --gpu h100 --config " + d + "/train.json --seq-len 64 ";
  const auto refused = sh(moe + "--gpus 3 --global-batch 6 --fix ep=3 --out " + d + "/r-ep3", dir);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  EXPECT_NE(refused.err.find("--fix: ep=3: expected a divisor of the model's 4 routed experts"), std::string::npos);
  const auto none = sh(moe + "--gpus 2 --global-batch 4 --fix ep=4 --out " + d + "/r-ep4", dir);
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("no configuration of tiny-moe fits 2 x h100"), std::string::npos) << none.err;
  // What the plan step would refuse is refused before an uncalibrated machine is calibrated.
  const auto early = sh("CPT_LOCAL_PROFILE=" + d + "/not-yet.json " + cpt + " run --model tiny --cpu --gpus 1 " +
                            "--config " + d + "/train.json --global-batch 4 --seq-len 100000 --out " + d + "/r-long",
                        dir);
  EXPECT_EQ(early.exit_code, 2) << early.err;
  EXPECT_EQ(early.out.find("calibrate"), std::string::npos) << early.out;
  EXPECT_NE(early.err.find("--seq-len: expected at most the model's max_seq_len (128), got 100000"), std::string::npos)
      << early.err;
  EXPECT_FALSE(fs::exists(dir / "not-yet.json"));
  fs::remove_all(dir);
}

// The host probes of several processes run in step; one that fails marks its file, and the others
// stop waiting at once (exit 3, one line) instead of timing out.
TEST(Calibrate, AProbeProcessThatFailedReleasesTheOthers) {
  const auto dir = fs::temp_directory_path() / ("cpt-calibrate-together-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "rank.1") << "-1";
  const auto exec = (fs::path(CPT_BINARY).parent_path() / "cpt-exec").string();
  const auto r = sh("timeout 60 " + exec + " calibrate-host --seconds 1 --quiet --together-dir " + dir.string() +
                        " --together-rank 0 --together-ranks 2",
                    dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("calibrate-host: process 1 of 2 failed"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  fs::remove_all(dir);
}

// A GPU's measurements (as `cpt-exec calibrate-host --device cuda` writes them) fitted into a
// profile without a GPU: `cpt calibrate --device cuda --measurements FILE`. Synthetic H200-like
// numbers with known efficiencies; the profile keeps the catalog H200's datasheet and node, takes
// the measured curves and bandwidth, and plans.
TEST(Calibrate, GpuMeasurementsBecomeAProfileOfTheCatalogGpu) {
  const auto dir = fs::temp_directory_path() / ("cpt-calibrate-gpu-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cpt = CPT_BINARY, d = dir.string();
  const double peak = 989.4e12;
  // Efficiency by GEMM size: 0.30 at 1 GFLOP rising log-linearly to 0.80 at 1 TFLOP and above.
  auto efficiency = [](double flop) {
    const double x = std::log10(flop / 1e9);
    return std::clamp(0.30 + 0.5 * x / 3.0, 0.30, 0.80);
  };
  nlohmann::json gemm = nlohmann::json::array();
  for (const double m : {1024.0, 4096.0, 16384.0}) {
    for (const double n : {256.0, 1024.0, 4096.0, 16384.0}) {
      for (const double k : {256.0, 1024.0, 4096.0, 16384.0}) {
        const double flop = 2 * m * n * k;
        gemm.push_back({{"m", m}, {"n", n}, {"k", k}, {"seconds", flop / (peak * efficiency(flop))}});
      }
    }
  }
  nlohmann::json attention = nlohmann::json::array();
  for (const double seq : {1024.0, 4096.0}) {
    const double fwd = 2 * (2 * seq) * seq * 128 * 32;  // batch 2, 32 heads of 128, causal convention
    attention.push_back({{"batch", 2},
                         {"heads", 32},
                         {"kv_heads", 8},
                         {"seq", seq},
                         {"head_dim", 128},
                         {"forward_seconds", fwd / (0.5 * peak)},
                         {"backward_seconds", 2.5 * fwd / (0.4 * peak)}});
  }
  const nlohmann::json host{
      {"device", "cuda:0"},
      {"device_name", "NVIDIA H200"},
      {"dtype", "bf16"},
      {"cuda_devices", 1},
      {"cores", 16},
      {"threads", 16},
      {"memory_bytes", 150e9},
      {"copy_bytes_per_s", 4.3e12},
      {"adamw_params_per_s", 2e10},
      {"cross_entropy", {{{"tokens", 8192}, {"vocab", 128256}, {"forward_seconds", 2e-3}, {"backward_seconds", 3e-3}}}},
      {"seconds_per_dispatched_op", 6e-6},
      {"gemm", gemm},
      {"attention", attention}};
  std::ofstream(dir / "h200.json") << host.dump();
  const auto profile = d + "/gpu.json";
  const auto r =
      sh(cpt + " calibrate --device cuda --measurements " + d + "/h200.json --out " + profile + " --json", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["base_gpu"], "h200_sxm_141gb");
  EXPECT_DOUBLE_EQ(report["datasheet_bf16_flops_per_s"].get<double>(), peak);
  EXPECT_FALSE(report["collectives_measured"].get<bool>());
  ASSERT_FALSE(report["gemm_efficiency_vs_catalog"].empty());
  for (const auto& p : report["gemm_efficiency_vs_catalog"]) {  // the known curve, at each fitted size
    EXPECT_NEAR(p["measured_efficiency"].get<double>(), efficiency(p["gflop"].get<double>() * 1e9), 0.02) << p;
    EXPECT_GT(p["catalog_efficiency"].get<double>(), 0);
  }
  ASSERT_FALSE(report["attention_efficiency_vs_catalog"].empty());
  for (const auto& p : report["attention_efficiency_vs_catalog"]) {
    EXPECT_GT(p["measured_efficiency"].get<double>(), 0.39);
    EXPECT_LT(p["measured_efficiency"].get<double>(), 0.51);
  }
  const auto cluster = nlohmann::json::parse(slurp(fs::path(profile)));
  const auto text = cluster.dump();
  EXPECT_NE(text.find("\"gpus_per_node\":1"), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("989.4"), std::string::npos);  // the datasheet peak stays
  // The profile plans: Llama 3.2 1B on this one calibrated GPU.
  const auto plan = sh("CPT_LOCAL_PROFILE=" + profile + " " + cpt +
                           " plan --model llama3.2-1b --gpu local --gpus 1 --global-batch 8 --seq-len 2048 --json",
                       dir);
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  // A CPU's measurements are refused in one line.
  std::ofstream(dir / "cpu.json") << nlohmann::json{{"device", "cpu"}, {"gemm", nlohmann::json::array()}}.dump();
  const auto bad = sh(cpt + " calibrate --device cuda --measurements " + d + "/cpu.json --out " + d + "/x.json", dir);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("$.host.device: expected a CUDA device's measurements, found \"cpu\""), std::string::npos)
      << bad.err;
  // So is a GPU report with a measurement missing, naming the key.
  auto partial = host;
  partial["attention"][1].erase("backward_seconds");
  std::ofstream(dir / "partial.json") << partial.dump();
  const auto missing =
      sh(cpt + " calibrate --device cuda --measurements " + d + "/partial.json --out " + d + "/y.json", dir);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("$.host.attention[1].backward_seconds: expected a value (required key is missing)"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
  // And one whose collectives name a call the executor does not make.
  const nlohmann::json with_comm{
      {"host", host},
      {"collectives", {{"samples", {{{"op", "all_to_all"}, {"ranks", 2}, {"bytes", 4096}, {"seconds", 1e-4}}}}}}};
  std::ofstream(dir / "bad-comm.json") << with_comm.dump();
  const auto bad_comm =
      sh(cpt + " calibrate --device cuda --measurements " + d + "/bad-comm.json --out " + d + "/z.json", dir);
  EXPECT_EQ(bad_comm.exit_code, 2) << bad_comm.err;
  EXPECT_NE(bad_comm.err.find("$.collectives.samples[0].op"), std::string::npos) << bad_comm.err;
  fs::remove_all(dir);
}

}  // namespace
