#pragma once
// The fixture of the tests that run `cpt train` with its own launcher (two or four ranks, Gloo on
// the CPU): the tokenizer, data, TRAIN.json files and plans every such test uses, prepared once
// per test process; single-process reference runs with their round-off floor; and the comparisons
// (distributed_train_test.cpp says how close two runs must be, and why).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cli/cli_test_support.h"

namespace cpt::dist_testing {

namespace fs = std::filesystem;
using cpt::cli_testing::python_json_package;
using cpt::cli_testing::sh;
using cpt::cli_testing::slurp;

inline std::string cpt_binary() {
  return CPT_BINARY;
}

// fp32 tensors of a safetensors file (the checkpoints hold only fp32 weights).
std::map<std::string, std::vector<float>> read_f32(const fs::path& file);
// One field of every step of a metrics.jsonl.
std::vector<double> metric(const fs::path& metrics, const std::string& key);
inline std::vector<double> losses(const fs::path& metrics) {
  return metric(metrics, "loss");
}
// The final weights of two runs: per tensor, the norm of the difference over the norm of the
// first run's tensor; the largest over the model.
double largest_relative_difference(const fs::path& a_dir, const fs::path& b_dir, int step = 20);
// The same run in two layouts: the same loss every step, weights within 4x the round-off floor.
void expect_same_run(const fs::path& a_dir, const fs::path& b_dir, double round_off_floor, const std::string& what);
// The expert biases of the step-20 checkpoint of the run in `out` (tiny-v3's
// layers.1.mlp.gate.e_score_correction_bias, fp32 [8]).
std::vector<float> expert_bias_of(const fs::path& out);

// A DeepSeek-V3 in small: latent attention, a dense first layer, shared experts, a sigmoid router
// with its expert bias, 2 groups of 4 experts (a token's 2 from its best group), the normalised
// weights scaled by 2.5.
inline constexpr const char* kTinyV3 = R"({"name": "tiny-v3", "layers": 2, "hidden": 64, "heads": 4,
  "kv_heads": 4, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
  "tied_embeddings": false, "max_seq_len": 128, "mla": {"q_lora_rank": 24, "kv_lora_rank": 16,
  "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10}, "moe": {"experts": 8,
  "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_ffn_hidden": 32, "first_dense_layers": 1,
  "router": "sigmoid", "expert_bias": true, "expert_groups": 2, "groups_per_token": 1, "top_k_scale": 2.5}})";

class DistributedTrain : public ::testing::Test {
 protected:
  // The shared inputs are prepared by the first test, not in SetUpTestSuite: gtest reports a
  // failing SetUpTestSuite as every test skipped, which ctest counts as a pass.
  void SetUp() override {
    if (!attempted_) {
      attempted_ = true;
      prepare();
      ready_ = !HasFailure();
    }
    ASSERT_TRUE(ready_) << "preparing the tokenizer, data and plans failed (see the first test's output)";
  }
  static void prepare() {
    dir_ = fs::temp_directory_path() / ("cpt-dist-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const auto src = python_json_package().string();
    ASSERT_FALSE(src.empty()) << "needs /usr/lib/python3.X/json (scripts/setup installs python3)";
    const auto d = dir_.string();
    ASSERT_EQ(
        sh(cpt_binary() + " data train-tokenizer " + src + " --ext .py --vocab-size 512 --out " + d + "/tok", dir_)
            .exit_code,
        0);
    ASSERT_EQ(
        sh(cpt_binary() + " data prepare " + src + " --ext .py --tokenizer " + d + "/tok.model --out " + d + "/data",
           dir_)
            .exit_code,
        0);
    std::ofstream(dir_ / "train.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
      "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
      "dp_bucket_mib": 0.1, "log_interval_steps": 0})";
    std::ofstream(dir_ / "long.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 100000,
      "seed": 5, "threads": 1, "log_interval_steps": 0})";
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "micro_batch=2", 1}, std::tuple{"dp2", "dp=2,zero=0,micro_batch=2", 2},
          std::tuple{"zero1-dp2", "dp=2,zero=1,offload=none,micro_batch=2", 2},
          std::tuple{"zero2-dp2", "dp=2,zero=2,offload=none,micro_batch=2", 2},
          std::tuple{"dp2-full-recompute", "dp=2,zero=0,recompute=full,micro_batch=2", 2},
          std::tuple{"zero1-dp2-selective", "dp=2,zero=1,offload=none,recompute=selective,micro_batch=2", 2},
          std::tuple{"zero2-dp2-offload", "dp=2,zero=2,offload=optimizer,micro_batch=2", 2},
          std::tuple{"zero3-dp2-offload", "dp=2,zero=3,offload=optimizer,micro_batch=2", 2}}) {
      plan_layout("tiny", fix, gpus, name);
    }
    // Tensor and pipeline layouts of tiny (2 layers) and of a 4-layer variant with an odd
    // vocabulary (515: tp = 2 pads it to 768, so tp rank 1 holds 131 real rows and 253 padding).
    std::ofstream(dir_ / "tiny4.json") << R"({"name": "tiny4", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2,
      "ffn_hidden": 176, "vocab": 515, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "max_seq_len": 128})";
    for (const auto& [name, model, fix, gpus] :
         {std::tuple{"tp2", "tiny", "tp=2,micro_batch=2", 2},
          std::tuple{"tp2-sp", "tiny", "tp=2,sequence_parallel=true,micro_batch=2", 2},
          std::tuple{"pp2", "tiny", "pp=2,schedule=1f1b,micro_batch=2", 2},
          std::tuple{"single4", "tiny4.json", "micro_batch=2", 1},
          std::tuple{"pp2-interleaved", "tiny4.json", "pp=2,vp=2,schedule=interleaved_1f1b,micro_batch=2", 2},
          std::tuple{"tp2-zero2-dp2", "tiny4.json", "tp=2,dp=2,zero=2,offload=none,micro_batch=2", 4},
          std::tuple{"pp2-zero1-dp2", "tiny4.json", "pp=2,dp=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"pp2-tp2-sp", "tiny4.json", "pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"zero3-dp2", "tiny", "dp=2,zero=3,offload=none,micro_batch=2", 2},
          std::tuple{"zero3-dp4", "tiny", "dp=4,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"zero3-dp2-tp2-full", "tiny4.json", "dp=2,tp=2,zero=3,offload=none,recompute=full,micro_batch=2",
                     4},
          // Context parallelism (sequence 64 in 4 chunks) and its products.
          std::tuple{"cp2", "tiny", "cp=2,zero=0,micro_batch=2", 2},
          std::tuple{"cp2-zero1-dp2", "tiny", "cp=2,dp=2,zero=1,offload=none,micro_batch=2", 4},
          std::tuple{"zero3-cp2", "tiny", "cp=2,zero=3,offload=none,recompute=full,micro_batch=2", 2},
          std::tuple{"zero3-cp2-dp2", "tiny", "cp=2,dp=2,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"cp2-tp2-sp", "tiny", "cp=2,tp=2,sequence_parallel=true,micro_batch=2", 4},
          std::tuple{"cp2-pp2", "tiny", "cp=2,pp=2,schedule=1f1b,recompute=selective,micro_batch=2", 4},
          std::tuple{"pp2-tp2-sp-tiny", "tiny", "pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=2", 4}}) {
      plan_layout(model, fix, gpus, name);
    }
    // Hybrid sharding needs several nodes: a ZeRO-3 plan of 4 ranks moved onto 2 nodes of 2 GPUs.
    // dp4: each rank shards over its node's 2 ranks and replicates across the 2 nodes. cp2 × dp2:
    // each node is one cp pair, so ZeRO-3 shards over the pair and replicates over dp.
    for (const auto& [from, to] : {std::pair{"zero3-dp4", "hsdp-dp4"}, std::pair{"zero3-cp2-dp2", "hsdp-cp2-dp2"}}) {
      auto hsdp = nlohmann::json::parse(slurp(dir_ / from / "plan.json"));
      hsdp["cluster"]["node"]["gpus_per_node"] = 2;
      hsdp["cluster"]["num_nodes"] = 2;
      hsdp["parallel"]["hybrid_shard"] = true;
      fs::create_directories(dir_ / to);
      std::ofstream(dir_ / to / "plan.json") << hsdp.dump(2);
    }
  }
  // Each suite (this one and those derived from it) prepares its own directory: the next suite of
  // the same process starts afresh.
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    attempted_ = ready_ = false;
    round_off_floor_.clear();
  }

  // `cpt plan` of `model` (a catalog name, or a model file of the test directory when it ends in
  // .json) on `gpus` H100s, 8 sequences of 64 tokens a step, with `fix`, into DIR/<out>; a failure
  // names `out`.
  static void plan_layout(const std::string& model, const std::string& fix, int gpus, const std::string& out) {
    const std::string model_arg = model.ends_with(".json") ? (dir_ / model).string() : model;
    const auto r = sh(cpt_binary() + " plan --model " + model_arg + " --gpu h100 --gpus " + std::to_string(gpus) +
                          " --global-batch 8 --seq-len 64 --fix " + fix + " --out " + (dir_ / out).string(),
                      dir_);
    ASSERT_EQ(r.exit_code, 0) << out << ": " << r.err;
  }
  // `cpt train` of DIR/<plan>/plan.json with DIR/<config> into DIR/<out> on `procs` local ranks;
  // `extra`: more flags (--stop-at, --resume).
  // `environment`: VAR=value words put before the command.
  static cpt::cli_testing::Run train(const std::string& plan, const std::string& out, int procs,
                                     const std::string& config = "train.json", const std::string& extra = "",
                                     const std::string& environment = "") {
    const auto d = dir_.string();
    return sh((environment.empty() ? "" : "env " + environment + " ") + cpt_binary() + " train --plan " + d + "/" +
                  plan + "/plan.json --config " + d + "/" + config + " --out " + d + "/" + out +
                  (procs > 1 ? " --nproc-per-node " + std::to_string(procs) : "") + extra,
              dir_);
  }
  // A single-process reference run of DIR/<plan> with DIR/<config> into DIR/<out>, trained once per
  // test process, and its round-off floor (expect_same_run): the same run again on each of
  // LibTorch's other CPU kernel paths, the largest relative difference of a tensor from the
  // reference's. The scalar kernels sum one element at a time, the AVX2 ones eight lanes and the
  // AVX-512 ones sixteen, so the paths round the same sums differently; one of the two differs from
  // whichever path the suite runs on.
  static void reference(const std::string& plan, const std::string& out, const std::string& config = "train.json") {
    if (round_off_floor_.contains(out)) return;
    const auto r = train(plan, out, 1, config);
    ASSERT_EQ(r.exit_code, 0) << plan << ": " << r.err;
    double floor = 0;
    for (const std::string kernels : {"default", "avx2"}) {
      const auto other = out + "-on-" + kernels;
      const auto rerun = train(plan, other, 1, config, "", "ATEN_CPU_CAPABILITY=" + kernels);
      ASSERT_EQ(rerun.exit_code, 0) << plan << " on " << kernels << ": " << rerun.err;
      floor = std::max(floor, largest_relative_difference(dir_ / out, dir_ / other));
    }
    // Zero would leave nothing to compare against; above 1e-4 the reference run itself is unstable.
    ASSERT_GT(floor, 0.0) << out << ": every kernel path rounded alike";
    ASSERT_LT(floor, 1e-4) << out << ": the single-process run moves this much under round-off alone";
    round_off_floor_[out] = floor;
  }
  // `b`'s run is `a`'s, the reference's: see expect_same_run.
  static void expect_same_as_reference(const std::string& reference_out, const fs::path& b_dir,
                                       const std::string& what) {
    ASSERT_TRUE(round_off_floor_.contains(reference_out)) << reference_out << " was not trained by reference()";
    expect_same_run(dir_ / reference_out, b_dir, round_off_floor_.at(reference_out), what);
  }
  // A TRAIN.json of `steps` steps on the prepared data, 0.1 MiB gradient buckets (six on tiny):
  // its file name in the test directory.
  static std::string short_config(int steps) {
    const auto name = "steps-" + std::to_string(steps) + ".json";
    std::ofstream(dir_ / name) << R"({"data": [{"name": "py", "path": "data"}], "steps": )" << steps
                               << R"(, "seed": 5, "threads": 1, "dp_bucket_mib": 0.1, "log_interval_steps": 0})";
    return name;
  }

  // The communication calls the run's ranks started per step, by group, and their bytes are the
  // cost model's for its plan exactly (`cpt compare`'s *_calls_per_step and *_bytes_per_step;
  // each call pays a fixed cost, each byte the link).
  static void expect_calls_of_the_cost_model(const std::string& out, const std::string& what) {
    const auto d = dir_.string();
    const auto cmp = sh(cpt_binary() + " compare " + d + "/" + out + " --json --log " + d + "/fidelity.jsonl", dir_);
    ASSERT_EQ(cmp.exit_code, 0) << what << ": " << cmp.err;
    const auto fields = nlohmann::json::parse(cmp.out)["fields"];
    for (const std::string group : {"tp", "cp", "dp", "pp", "ep"}) {
      const auto calls = fields[group + "_calls_per_step"];
      EXPECT_EQ(calls["predicted"].get<double>(), calls["measured"].get<double>()) << what << ": " << group << " calls";
      // Their bytes too (the mean rank: expert parallelism's combine returns uneven rows).
      const auto bytes = fields[group + "_bytes_per_step"];
      EXPECT_EQ(bytes["predicted"].get<double>(), bytes["measured"].get<double>()) << what << ": " << group << " bytes";
    }
  }
  // The run DIR/<out> of `procs` ranks against `cpt estimate --model <model> <flags> --micro-batch 2
  // --global-batch 8 --seq-len 64 --precision fp32`: each rank's weights, gradients and optimizer
  // state are the predicted bytes exactly, the communication calls the cost model's
  // (expect_calls_of_the_cost_model), and the kernels the cost model charges its per-kernel cost
  // for (costmodel/kernel_dispatch.h) within 6% of the operators and autograd nodes the executor
  // dispatched in its first step, as `cpt compare` puts them side by side.
  static void expect_model_state_of_the_cost_model(const std::string& out, int procs, const std::string& model,
                                                   const std::string& flags, const std::string& what) {
    const auto d = dir_.string();
    const auto e = sh(cpt_binary() + " estimate --model " + model + " --gpu h100 " + flags +
                          " --micro-batch 2 --global-batch 8 --seq-len 64 --precision fp32 --json",
                      dir_);
    ASSERT_EQ(e.exit_code, 0) << what << ": " << e.err;
    const auto predicted = nlohmann::json::parse(e.out)["memory_GiB_per_pp_rank"];
    const auto measured = nlohmann::json::parse(slurp(dir_ / out / "measured.json"))["ranks"];
    ASSERT_EQ(measured.size(), static_cast<std::size_t>(procs)) << what;
    for (const auto& rank : measured) {
      const auto& p = predicted.at(rank["pp"].get<std::size_t>());
      for (const std::string key : {"weights", "grads", "optimizer"}) {
        const auto bytes = std::llround(p[key].get<double>() * 1024.0 * 1024.0 * 1024.0);
        EXPECT_EQ(rank["memory_bytes"][key].get<std::int64_t>(), bytes)
            << what << ", rank " << rank["rank"] << ": " << key;
      }
    }
    expect_calls_of_the_cost_model(out, what);
    expect_kernels_of_the_cost_model(out, what);
  }
  // The kernels the cost model charges its per-kernel cost for (costmodel/kernel_dispatch.h) are
  // within 6% of the operators and autograd nodes the executor dispatched in its first step.
  static void expect_kernels_of_the_cost_model(const std::string& out, const std::string& what) {
    const auto cmp =
        sh(cpt_binary() + " compare " + (dir_ / out).string() + " --json --log " + (dir_ / "fidelity.jsonl").string(),
           dir_);
    ASSERT_EQ(cmp.exit_code, 0) << what << ": " << cmp.err;
    const auto kernels = nlohmann::json::parse(cmp.out)["fields"]["kernels_per_step"];
    EXPECT_GT(kernels["measured"].get<double>(), 0) << what;
    EXPECT_LE(std::abs(kernels["rel_err"].get<double>()), 0.06)
        << what << ": cost model " << kernels["predicted"] << " kernels, executor " << kernels["measured"];
  }
  // The continual recipe's state on the busiest rank (`cpt compare`'s `key`_bytes: teacher, ewc)
  // is the cost model's for the run's plan and recipe exactly.
  static void expect_recipe_bytes_of_the_cost_model(const std::string& out, const std::string& key,
                                                    const std::string& what) {
    const auto cmp = sh(cpt_binary() + " compare " + (dir_ / out).string() + " --json", dir_);
    ASSERT_EQ(cmp.exit_code, 0) << what << ": " << cmp.err;
    const auto field = nlohmann::json::parse(cmp.out)["fields"][key + "_bytes"];
    ASSERT_TRUE(field.is_object()) << what << ": no " << key << "_bytes in " << cmp.out;
    EXPECT_GT(field["measured"].get<double>(), 0) << what;
    EXPECT_EQ(std::llround(field["predicted"].get<double>()), std::llround(field["measured"].get<double>()))
        << what << ": " << key;
  }
  // Checkpoints hold whole tensors: `from` stopped at step 10 resumes as `to` and ends where the
  // reference run `ref` (of the same `config`) ends.
  static void expect_resume(const std::string& from, int from_procs, const std::string& to, int to_procs,
                            const std::string& ref, const std::string& config = "train.json");

  static fs::path dir_;
  static bool attempted_, ready_;
  static std::map<std::string, double> round_off_floor_;  // by reference run
};

}  // namespace cpt::dist_testing
