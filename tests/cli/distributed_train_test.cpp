// The distributed executor against the single-process one, through the real `cpt train` with its
// own launcher (two or four ranks, Gloo on the CPU): data, tensor (with and without sequence
// parallelism), context and pipeline parallelism (1F1B, interleaved 1F1B) and their products give the same
// losses every step and the same final weights, to within the round-off the training itself
// amplifies (expect_same_run says how that is measured); checkpoints move between layouts; a rank
// that dies takes the job down; a rank whose peers never come gives up after the collective timeout
// with a clear message.
//
// ctest runs the layout-equivalence tests twice: on the machine's own kernels and again on the AVX2
// paths of LibTorch, MKL and oneDNN (tests/CMakeLists.txt), so a machine of either instruction set
// exercises what the other will run.
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

#include "cli_test_support.h"

namespace {

namespace fs = std::filesystem;
using cpt::cli_testing::python_json_package;
using cpt::cli_testing::sh;
using cpt::cli_testing::slurp;

std::string cpt() { return CPT_BINARY; }

// fp32 tensors of a safetensors file (the checkpoints hold only fp32 weights).
std::map<std::string, std::vector<float>> read_f32(const fs::path& file) {
  const auto bytes = slurp(file);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto b = info["data_offsets"][0].get<std::size_t>(), e = info["data_offsets"][1].get<std::size_t>();
    std::vector<float> v((e - b) / 4);
    std::memcpy(v.data(), bytes.data() + 8 + n + b, e - b);
    out[name] = std::move(v);
  }
  return out;
}

// One field of every step of a metrics.jsonl.
std::vector<double> metric(const fs::path& metrics, const std::string& key) {
  std::vector<double> v;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line)[key].get<double>());
  return v;
}

std::vector<double> losses(const fs::path& metrics) { return metric(metrics, "loss"); }

double largest_relative_difference(const fs::path& a_dir, const fs::path& b_dir);
void expect_same_run(const fs::path& a_dir, const fs::path& b_dir, double round_off_floor, const std::string& what);

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
    ASSERT_EQ(sh(cpt() + " data train-tokenizer " + src + " --ext .py --vocab-size 512 --out " + d + "/tok", dir_).exit_code, 0);
    ASSERT_EQ(sh(cpt() + " data prepare " + src + " --ext .py --tokenizer " + d + "/tok.model --out " + d + "/data", dir_).exit_code, 0);
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
      ASSERT_EQ(sh(cpt() + " plan --model tiny --gpu h100 --gpus " + std::to_string(gpus) +
                       " --global-batch 8 --seq-len 64 --fix " + fix + " --out " + d + "/" + name,
                   dir_)
                    .exit_code,
                0);
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
          std::tuple{"single4", "/tiny4.json", "micro_batch=2", 1},
          std::tuple{"pp2-interleaved", "/tiny4.json", "pp=2,vp=2,schedule=interleaved_1f1b,micro_batch=2", 2},
          std::tuple{"tp2-zero2-dp2", "/tiny4.json", "tp=2,dp=2,zero=2,offload=none,micro_batch=2", 4},
          std::tuple{"pp2-zero1-dp2", "/tiny4.json", "pp=2,dp=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"pp2-tp2-sp", "/tiny4.json", "pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"zero3-dp2", "tiny", "dp=2,zero=3,offload=none,micro_batch=2", 2},
          std::tuple{"zero3-dp4", "tiny", "dp=4,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"zero3-dp2-tp2-full", "/tiny4.json", "dp=2,tp=2,zero=3,offload=none,recompute=full,micro_batch=2", 4},
          // Context parallelism (sequence 64 in 4 chunks) and its products.
          std::tuple{"cp2", "tiny", "cp=2,zero=0,micro_batch=2", 2},
          std::tuple{"cp2-zero1-dp2", "tiny", "cp=2,dp=2,zero=1,offload=none,micro_batch=2", 4},
          std::tuple{"zero3-cp2", "tiny", "cp=2,zero=3,offload=none,recompute=full,micro_batch=2", 2},
          std::tuple{"zero3-cp2-dp2", "tiny", "cp=2,dp=2,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"cp2-tp2-sp", "tiny", "cp=2,tp=2,sequence_parallel=true,micro_batch=2", 4},
          std::tuple{"cp2-pp2", "tiny", "cp=2,pp=2,schedule=1f1b,recompute=selective,micro_batch=2", 4},
          std::tuple{"pp2-tp2-sp-tiny", "tiny", "pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=2", 4}}) {
      const std::string model_arg = model[0] == '/' ? d + model : std::string(model);
      ASSERT_EQ(sh(cpt() + " plan --model " + model_arg + " --gpu h100 --gpus " + std::to_string(gpus) +
                       " --global-batch 8 --seq-len 64 --fix " + fix + " --out " + d + "/" + name,
                   dir_)
                    .exit_code,
                0)
          << name;
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
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // `cpt train` of DIR/<plan>/plan.json with DIR/<config> into DIR/<out> on `procs` local ranks;
  // `extra`: more flags (--stop-at, --resume).
  // `environment`: VAR=value words put before the command.
  static cpt::cli_testing::Run train(const std::string& plan, const std::string& out, int procs,
                                     const std::string& config = "train.json", const std::string& extra = "",
                                     const std::string& environment = "") {
    const auto d = dir_.string();
    return sh((environment.empty() ? "" : "env " + environment + " ") + cpt() + " train --plan " + d + "/" + plan +
                  "/plan.json --config " + d + "/" + config + " --out " + d + "/" + out +
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
  // The communication calls the run's ranks started per step, by group, are the cost model's
  // for its plan exactly (`cpt compare`'s *_calls_per_step; each call pays a fixed cost).
  static void expect_calls_of_the_cost_model(const std::string& out, const std::string& what) {
    const auto d = dir_.string();
    const auto cmp = sh(cpt() + " compare " + d + "/" + out + " --json --log " + d + "/fidelity.jsonl", dir_);
    ASSERT_EQ(cmp.exit_code, 0) << what << ": " << cmp.err;
    const auto fields = nlohmann::json::parse(cmp.out)["fields"];
    for (const std::string group : {"tp", "cp", "dp", "pp"}) {
      const auto calls = fields[group + "_calls_per_step"];
      EXPECT_EQ(calls["predicted"].get<double>(), calls["measured"].get<double>()) << what << ": " << group << " calls";
    }
  }
  // Checkpoints hold whole tensors: `from` stopped at step 10 resumes as `to` and ends where the
  // reference run `ref` ends.
  static void expect_resume(const std::string& from, int from_procs, const std::string& to, int to_procs,
                            const std::string& ref);

  static fs::path dir_;
  static bool attempted_, ready_;
  static std::map<std::string, double> round_off_floor_;  // by reference run
};
fs::path DistributedTrain::dir_;
std::map<std::string, double> DistributedTrain::round_off_floor_;
bool DistributedTrain::attempted_ = false;
bool DistributedTrain::ready_ = false;

// The final weights of two runs: per tensor, the norm of the difference over the norm of the
// first run's tensor; the largest over the model.
double largest_relative_difference(const fs::path& a_dir, const fs::path& b_dir) {
  const auto wa = read_f32(a_dir / "checkpoints/step_00000020/model.safetensors");
  const auto wb = read_f32(b_dir / "checkpoints/step_00000020/model.safetensors");
  EXPECT_EQ(wa.size(), wb.size()) << a_dir << " against " << b_dir;
  double largest = 0;
  for (const auto& [name, x] : wa) {
    const auto it = wb.find(name);
    if (it == wb.end() || it->second.size() != x.size()) {
      ADD_FAILURE() << b_dir << ": " << name << " missing or of another size";
      return INFINITY;
    }
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      diff += std::pow(static_cast<double>(x[i]) - it->second[i], 2);
      norm += std::pow(static_cast<double>(x[i]), 2);
    }
    largest = std::max(largest, std::sqrt(diff / norm));
  }
  return largest;
}

// Two runs of one training in different layouts are the same run: the same loss every step, and
// final weights as close as round-off allows.
//
// How close round-off allows is measured, not assumed. A layout sums the same products in another
// order (a row-parallel GEMM as two halves and an all-reduce, gradients over dp), and so does one
// process on another CPU: LibTorch's reductions sum 1, 8 or 16 lanes at a time by instruction set,
// and MKL picks its GEMM kernels by CPU. AdamW divides each update by
// sqrt(v) + 1e-8, so a gradient component near zero turns its round-off into an update of up to
// the learning rate: after 20 steps one process on two kernel paths differs by up to 2.5e-4 of the
// largest weight in its worst element (one embedding row of a rare token, 30 times the next row),
// while every tensor agrees to 5e-6 in norm. So the weights are compared in norm per tensor, and
// `round_off_floor` is the reference's own difference across kernel paths (reference()). A layout
// may differ by at most 4 times that: it adds roundings of the same kind and size as a kernel path
// does (each split sum rounds no worse than the whole), and the floor's own spread over pairs of
// kernel paths is 2.6 times. A wrong shard, row or update, even of one element, is orders above
// it. The loss of a step is a mean over its tokens, which rounds to a few ulps (1e-7 relative):
// 1e-4 leaves three orders for that.
void expect_same_run(const fs::path& a_dir, const fs::path& b_dir, double round_off_floor, const std::string& what) {
  const auto a = losses(a_dir / "metrics.jsonl"), b = losses(b_dir / "metrics.jsonl");
  ASSERT_EQ(a.size(), 20u) << what;
  ASSERT_EQ(b.size(), 20u) << what;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i] / a[i], 1.0, 1e-4) << what << ": step " << i;
  EXPECT_LE(largest_relative_difference(a_dir, b_dir), 4 * round_off_floor)
      << what << ": the final weights differ by more than round-off (the reference moves by " << round_off_floor
      << " across kernel paths)";
}

void DistributedTrain::expect_resume(const std::string& from, int from_procs, const std::string& to, int to_procs,
                                     const std::string& ref) {
  const auto out = "moved-" + from + "-" + to;
  const auto first = train(from, out, from_procs, "train.json", " --stop-at 10");
  ASSERT_EQ(first.exit_code, 0) << from << ": " << first.err;
  const auto second = train(to, out, to_procs, "train.json", " --resume");
  ASSERT_EQ(second.exit_code, 0) << to << ": " << second.err;
  expect_same_as_reference(ref, dir_ / out, from + " then " + to);
}

// DP2 with replicated (ZeRO-0), sharded-optimizer (ZeRO-1) and sharded-gradient (ZeRO-2) updates,
// with full or selective recomputation, and with the optimizer state offloaded to the host (ZeRO-2
// and ZeRO-3): each
// the single-process run, step by step and in the final weights.
TEST_F(DistributedTrain, DataParallelLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  for (const std::string layout :
       {"dp2", "zero1-dp2", "zero2-dp2", "dp2-full-recompute", "zero1-dp2-selective", "zero2-dp2-offload",
        "zero3-dp2-offload"}) {
    const auto r = train(layout, "o-" + layout, 2);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o1", dir_ / ("o-" + layout), layout);
    // One summary line (rank 0's).
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

// Tensor parallelism (plain and sequence-parallel), pipelines (1F1B and interleaved 1F1B), ZeRO-3
// and hybrid sharding, and their products with data parallelism and each other: each the
// single-process run, with the cost model's communication calls.
TEST_F(DistributedTrain, TensorAndPipelineLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  reference("single4", "o1-4");
  for (const auto& [layout, procs, ref] :
       {std::tuple{"tp2", 2, "o1"}, std::tuple{"tp2-sp", 2, "o1"}, std::tuple{"pp2", 2, "o1"},
        std::tuple{"pp2-interleaved", 2, "o1-4"}, std::tuple{"tp2-zero2-dp2", 4, "o1-4"},
        std::tuple{"pp2-zero1-dp2", 4, "o1-4"}, std::tuple{"pp2-tp2-sp", 4, "o1-4"}, std::tuple{"zero3-dp2", 2, "o1"},
        std::tuple{"hsdp-dp4", 4, "o1"}, std::tuple{"zero3-dp2-tp2-full", 4, "o1-4"}}) {
    const auto out = std::string("o-") + layout;
    const auto r = train(layout, out, procs);
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code == 0) expect_same_as_reference(ref, dir_ / out, layout);
    if (r.exit_code == 0) expect_calls_of_the_cost_model(out, layout);
  }
}

// Context parallelism (each rank holds 2 of 4 sequence chunks, keys and values all-gathered per
// layer): alone, with ZeRO-1 over dp × cp, with ZeRO-3 and full recomputation, hybrid-sharded over
// the cp pair of each node and replicated across nodes, with tensor and sequence parallelism, with a
// pipeline and selective recomputation: each the single-process run, with the cost model's
// communication calls.
TEST_F(DistributedTrain, ContextParallelLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  for (const auto& [layout, procs] : {std::pair{"cp2", 2}, std::pair{"cp2-zero1-dp2", 4}, std::pair{"zero3-cp2", 2},
                                      std::pair{"hsdp-cp2-dp2", 4}, std::pair{"cp2-tp2-sp", 4}, std::pair{"cp2-pp2", 4}}) {
    const auto out = std::string("o-") + layout;
    const auto r = train(layout, out, procs);
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code == 0) expect_same_as_reference("o1", dir_ / out, layout);
    if (r.exit_code == 0) expect_calls_of_the_cost_model(out, layout);
  }
}

// KL distillation with the teacher sharded like the student — tensor-parallel (vocabulary-parallel
// log-softmaxes), pipelined (the teacher's stages on the student's ranks, its hidden states riding
// with the student's), both, context-parallel, and ZeRO-3 (its blocks gathered for its forward):
// the same losses, KL and weights as one process.
TEST_F(DistributedTrain, KlDistillationMatchesTheSingleProcessRunInEveryLayout) {
  reference("single", "o1");
  // The teacher: the reference run's final weights; the student starts from them too.
  std::ofstream(dir_ / "kl.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0, "init_from": ")" +
                                    (dir_ / "o1/checkpoints/step_00000020").string() + R"(",
    "distill": {"lambda": 0.5}})";
  reference("single", "k1", "kl.json");
  const auto kl = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "kl"); };
  const auto reference_kl = kl("k1");
  ASSERT_EQ(reference_kl.size(), 20u);
  EXPECT_EQ(reference_kl.front(), 0.0);  // the student starts as the teacher
  EXPECT_GT(reference_kl.back(), 0.0);
  for (const auto& [layout, procs] :
       {std::pair{"tp2", 2}, std::pair{"pp2", 2}, std::pair{"pp2-tp2-sp-tiny", 4}, std::pair{"cp2", 2},
        std::pair{"zero3-dp2", 2}}) {
    const auto out = std::string("k-") + layout;
    const auto r = train(layout, out, procs, "kl.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    if (std::string(layout).starts_with("zero3")) {
      EXPECT_NE(r.err.find("teacher sharded (ZeRO-3) over 2 ranks"), std::string::npos) << r.err;
    }
    expect_same_as_reference("k1", dir_ / out, std::string("kl ") + layout);
    const auto k = kl(out);
    ASSERT_EQ(k.size(), reference_kl.size()) << layout;
    for (std::size_t i = 1; i < k.size(); ++i) EXPECT_NEAR(k[i] / reference_kl[i], 1.0, 1e-4) << layout << ": step " << i;
  }
}

// EWC under tensor, data, context and pipeline parallelism: the Fisher estimated by replica 0's
// ranks together (under cp each back-propagates its tokens and the gradients are summed over cp;
// under pp every sequence goes forward and backward through the stages; under ZeRO-3 and hybrid
// sharding the penalty works on the shards) and
// written whole, each rank's penalty on its shards (replicated norms on every rank); the same
// losses (penalty included) and weights as the single process.
TEST_F(DistributedTrain, EwcInEveryLayoutMatchesTheSingleProcessRun) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "ewc.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0,
    "ewc": {"lambda": 5000, "data": {"name": "py", "path": "data"}, "sequences": 8}})";
  reference("single", "e1", "ewc.json");
  const auto penalties = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "ewc_penalty"); };
  const auto single = penalties("e1");
  ASSERT_EQ(single.size(), 20u);
  EXPECT_GT(single.back(), 0.0);
  for (const auto& [layout, procs] :
       {std::pair{"tp2", 2}, std::pair{"dp2", 2}, std::pair{"cp2", 2}, std::pair{"cp2-zero1-dp2", 4},
        std::pair{"pp2", 2}, std::pair{"pp2-tp2-sp-tiny", 4}, std::pair{"zero3-dp2", 2}, std::pair{"hsdp-dp4", 4}}) {
    const auto out = std::string("e-") + layout;
    const auto r = train(layout, out, procs, "ewc.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    expect_same_as_reference("e1", dir_ / out, std::string("ewc ") + layout);
    const auto p = penalties(out);
    ASSERT_EQ(p.size(), single.size()) << layout;
    for (std::size_t i = 1; i < p.size(); ++i) EXPECT_NEAR(p[i] / single[i], 1.0, 1e-3) << layout << ": step " << i;
  }
}

// Model-state storage per rank, as measured.json reports it (each storage counted once), equals the
// cost model's weights, gradients and optimizer state for the same layout in its fp32 regime
// (4 + 4 + 8 bytes per parameter held), exactly: replicated data parallelism (gradients live in
// the all-reduce buckets), ZeRO-1, tensor and pipeline parallelism, and ZeRO-3 (the step's peaks of
// weights and gradients: shards, whole root, running and prefetched block, one reduction in
// flight). The kernels the cost model counts for the executor are within 6% of those the
// executor dispatched (`cpt compare`'s kernels_per_step), with sequence parallelism and
// recomputation too; its communication calls per group are the executor's exactly.
TEST_F(DistributedTrain, ModelStateBytesEqualTheCostModel) {
  const auto d = dir_.string();
  const auto two_steps = short_config(2);
  for (const auto& [layout, procs, flags] :
       {std::tuple{"single", 1, "--gpus 1"}, std::tuple{"dp2", 2, "--gpus 2 --dp 2"},
        std::tuple{"zero1-dp2", 2, "--gpus 2 --dp 2 --zero 1"}, std::tuple{"tp2", 2, "--gpus 2 --tp 2"},
        std::tuple{"pp2", 2, "--gpus 2 --pp 2"}, std::tuple{"zero3-dp2", 2, "--gpus 2 --dp 2 --zero 3"},
        std::tuple{"zero3-dp4", 4, "--gpus 4 --dp 4 --zero 3"}, std::tuple{"cp2-zero1-dp2", 4, "--gpus 4 --cp 2 --dp 2 --zero 1"},
        std::tuple{"tp2-sp", 2, "--gpus 2 --tp 2 --sequence-parallel"},
        std::tuple{"dp2-full-recompute", 2, "--gpus 2 --dp 2 --recompute full"},
        std::tuple{"zero1-dp2-selective", 2, "--gpus 2 --dp 2 --zero 1 --recompute selective"}}) {
    const auto out = d + "/mem-" + layout;
    const auto r = train(layout, std::string("mem-") + layout, procs, two_steps);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    const auto e = sh(cpt() + " estimate --model tiny --gpu h100 " + flags +
                          " --micro-batch 2 --global-batch 8 --seq-len 64 --precision fp32 --json",
                      dir_);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const auto predicted = nlohmann::json::parse(e.out)["memory_GiB_per_pp_rank"];
    const auto measured = nlohmann::json::parse(slurp(out + "/measured.json"))["ranks"];
    // The kernels the cost model charges its per-kernel cost for (costmodel/kernel_dispatch.h)
    // against the operators and autograd nodes the executor dispatched in its first step, as
    // `cpt compare` puts them side by side (the critical pipeline rank's busiest rank).
    const auto cmp = sh(cpt() + " compare " + out + " --json --log " + d + "/fidelity.jsonl", dir_);
    ASSERT_EQ(cmp.exit_code, 0) << layout << ": " << cmp.err;
    const auto kernels = nlohmann::json::parse(cmp.out)["fields"]["kernels_per_step"];
    expect_calls_of_the_cost_model(std::string("mem-") + layout, layout);
    EXPECT_GT(kernels["measured"].get<double>(), 0) << layout;
    EXPECT_LE(std::abs(kernels["rel_err"].get<double>()), 0.06)
        << layout << ": cost model " << kernels["predicted"] << " kernels, executor " << kernels["measured"];
    ASSERT_EQ(measured.size(), static_cast<std::size_t>(procs)) << layout;
    for (const auto& rank : measured) {
      const auto& p = predicted.at(rank["pp"].get<std::size_t>());
      for (const std::string key : {"weights", "grads", "optimizer"}) {
        const auto bytes = std::llround(p[key].get<double>() * 1024.0 * 1024.0 * 1024.0);
        EXPECT_EQ(rank["memory_bytes"][key].get<std::int64_t>(), bytes) << layout << ", rank " << rank["rank"] << ": " << key;
      }
    }
  }
}

// ZeRO-2 keeps its gradient shard and the buckets being reduced, not a full gradient buffer: with
// 0.1 MiB buckets on tiny (six buckets, the embedding and the head alone in theirs) its gradients
// are the cost model's for the executor's buckets (`cpt compare` reads the run's bucket size)
// within 5%, and below what ZeRO-1 holds (every gradient, 4Ψ); weights and optimizer state exact.
TEST_F(DistributedTrain, ZeroTwoHoldsItsShardAndTheBucketsInFlight) {
  const auto d = dir_.string();
  const auto r = train("zero2-dp2", "buckets-zero2-dp2", 2, short_config(2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cmp = sh(cpt() + " compare " + d + "/buckets-zero2-dp2 --json --log " + d + "/fidelity.jsonl", dir_);
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto f = nlohmann::json::parse(cmp.out)["fields"];
  EXPECT_LE(std::abs(f["grads_bytes"]["rel_err"].get<double>()), 0.05) << f["grads_bytes"];
  EXPECT_EQ(f["weights_bytes"]["rel_err"].get<double>(), 0.0);
  EXPECT_EQ(f["optimizer_bytes"]["rel_err"].get<double>(), 0.0);
  // ZeRO-1 holds every gradient: 4 bytes per parameter, the weights' bytes.
  EXPECT_LT(f["grads_bytes"]["measured"].get<double>(), f["weights_bytes"]["measured"].get<double>());
}

// `--profile-step S` profiles step S on every rank (measure/step_profiler.h): each writes a Chrome
// trace and its time by operator, where the model's matrix products, backward's nodes and the
// data-parallel waits appear with their calls, inside the step's own time; the profiled run
// trains exactly as an unprofiled one.
TEST_F(DistributedTrain, ProfilingAStepWritesEachRanksTraceAndOperatorTimes) {
  const auto d = dir_.string();
  const auto three_steps = short_config(3);
  const auto plain = train("dp2", "unprofiled-dp2", 2, three_steps);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto r = train("dp2", "profiled-dp2", 2, three_steps, " --profile-step 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ERROR"), std::string::npos) << r.err;
  EXPECT_EQ(losses(dir_ / "profiled-dp2/metrics.jsonl"), losses(dir_ / "unprofiled-dp2/metrics.jsonl"));
  const auto step_s = metric(dir_ / "profiled-dp2/metrics.jsonl", "step_time_s").at(1);
  for (int rank = 0; rank < 2; ++rank) {
    const auto stem = dir_ / "profiled-dp2/profile" / ("step_1.rank_" + std::to_string(rank));
    const auto trace = nlohmann::json::parse(slurp(stem.string() + ".trace.json"));
    EXPECT_GT(trace.at("traceEvents").size(), 100u) << rank;
    const auto ops = nlohmann::json::parse(slurp(stem.string() + ".ops.json"));
    EXPECT_EQ(ops["step"], 1);
    EXPECT_EQ(ops["rank"], rank);
    std::map<std::string, std::int64_t> calls;
    for (const auto& o : ops["by_name"]) {
      EXPECT_GT(o["seconds"].get<double>(), 0) << o;
      calls[o["name"].get<std::string>()] = o["calls"].get<std::int64_t>();
    }
    // tiny: 2 layers of 7 projections, and the head; two microbatches of 2 per rank.
    EXPECT_EQ(calls["aten::matmul"], 30) << ops["by_name"];
    EXPECT_EQ(calls["autograd::engine::evaluate_function: MmBackward0"], 30) << ops["by_name"];
    // The replicated gradients' buckets (0.1 MiB: six) and the loss's all-reduce are waited for.
    EXPECT_GE(calls["comm wait dp/0"], 6) << ops["by_name"];
    const double top = ops["top_level_s"].get<double>(), span = ops["span_s"].get<double>();
    EXPECT_GT(top, 0.3 * span);
    EXPECT_LE(top, span * (1 + 1e-9));
    // Each rank times its own step; rank 0's is the one in metrics.jsonl.
    const double own_step_s = ops["step_time_s"].get<double>();
    if (rank == 0) {
      EXPECT_DOUBLE_EQ(own_step_s, step_s);
    }
    EXPECT_LE(span, own_step_s * 1.01);
    // Its time by kind of work (measure/op_kind.h) adds up to the stepping thread's.
    double kinds = 0;
    for (const auto& [kind, seconds] : ops["seconds_by_kind"].items()) kinds += seconds.get<double>();
    EXPECT_NEAR(kinds, top, 1e-6 * top) << ops["seconds_by_kind"];
    EXPECT_GT(ops["seconds_by_kind"]["gemm"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["loss"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["optimizer"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["communication"].get<double>(), 0);
  }
  // `cpt compare` puts the profiled kinds beside the cost model's, whose kinds add up to its step.
  const auto cmp = sh(cpt() + " compare " + d + "/profiled-dp2 --json --log " + d + "/fidelity.jsonl", dir_);
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto f = nlohmann::json::parse(cmp.out)["fields"];
  double predicted = 0;
  for (const char* kind : {"gemm", "attention", "loss", "optimizer", "communication", "other"}) {
    const auto key = std::string("kind_") + kind + "_s";
    ASSERT_TRUE(f.contains(key)) << key << ": " << f;
    predicted += f[key]["predicted"].get<double>();
  }
  EXPECT_NEAR(predicted, f["step_time_s"]["predicted"].get<double>(), 1e-9);
  EXPECT_GT(f["kind_gemm_s"]["measured"].get<double>(), 0);
  EXPECT_GT(f["kind_communication_s"]["predicted"].get<double>(), 0);
  // A pipeline posts its sends asynchronously (records that do not nest): every kind stays
  // non-negative and the kinds still add up, on both stages.
  const auto pp = train("pp2", "profiled-pp2", 2, three_steps, " --profile-step 1");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  for (int rank = 0; rank < 2; ++rank) {
    const auto ops = nlohmann::json::parse(
        slurp(dir_ / "profiled-pp2/profile" / ("step_1.rank_" + std::to_string(rank) + ".ops.json")));
    double kinds = 0;
    for (const auto& [kind, seconds] : ops["seconds_by_kind"].items()) {
      EXPECT_GE(seconds.get<double>(), 0) << rank << ": " << kind;
      kinds += seconds.get<double>();
    }
    EXPECT_NEAR(kinds, ops["top_level_s"].get<double>(), 1e-6) << rank;
    EXPECT_GT(ops["seconds_by_kind"]["communication"].get<double>(), 0) << rank;
    EXPECT_LE(ops["top_level_s"].get<double>(), ops["span_s"].get<double>() * (1 + 1e-9)) << rank;
  }
}

// Checkpoints hold whole tensors, so a run moves between layouts: pp2 x tp2 with sequence
// parallelism into tp2 x ZeRO-2 dp2; ZeRO-2 dp2 into a single process (the sharded state is
// gathered); a single process into ZeRO-3 (the state is cut into shards) and into ZeRO-2 with the
// optimizer state offloaded (the host master follows the loaded weights). Each ends where the
// uninterrupted single-process run ends.
TEST_F(DistributedTrain, CheckpointsResumeInAnotherLayout) {
  reference("single", "o1");
  reference("single4", "o1-4");
  expect_resume("pp2-tp2-sp", 4, "tp2-zero2-dp2", 4, "o1-4");
  expect_resume("zero2-dp2", 2, "single", 1, "o1");
  expect_resume("single", 1, "zero3-dp2", 2, "o1");
  expect_resume("single", 1, "zero2-dp2-offload", 2, "o1");
  expect_resume("zero3-dp2-offload", 2, "single", 1, "o1");
}

// The launcher makes a missing OUT (and its parents) as the single-process run does; it used to
// fail writing the tokenizer there.
TEST_F(DistributedTrain, TheLauncherMakesItsOutputDirectory) {
  const auto r = train("dp2", "not/yet/there", 2, short_config(2));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "not/yet/there/measured.json"));
}

TEST_F(DistributedTrain, ADeadRankTakesTheJobDown) {
  const auto d = dir_.string();
  // Start a long job, kill one of its two ranks, expect the launcher to stop the other and fail.
  const auto r = sh(cpt() + " train --plan " + d + "/dp2/plan.json --config " + d + "/long.json --out " + d +
                        "/o3 --nproc-per-node 2 & L=$!; for i in $(seq 100); do sleep 0.1; "
                        "[ -s " + d + "/o3/metrics.jsonl ] && break; done; "
                        "kill -9 $(pgrep -P $L | head -1); wait $L; echo exit=$?; pgrep -P $L | wc -l",
                    dir_);
  EXPECT_NE(r.out.find("exit=3"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
}

// While a job trains into OUT, a second job into the same OUT is refused (exit 3, the holder's pid
// named); killing the launcher with SIGKILL takes its ranks down with it (they were re-parented
// and kept training), after which OUT can be written again.
TEST_F(DistributedTrain, OneJobPerOutputAndTheRanksDieWithTheirLauncher) {
  const auto d = dir_.string();
  const auto job = cpt() + " train --plan " + d + "/dp2/plan.json --config " + d + "/long.json --out " + d + "/o4";
  const auto r = sh(job + " --nproc-per-node 2 & L=$!; for i in $(seq 100); do sleep 0.1; "
                          "[ -s " + d + "/o4/metrics.jsonl ] && break; done; "
                          "RANKS=$(pgrep -P $L | tr '\n' ' '); " + job + " 2>" + d + "/second.err; echo second=$?; "
                          "kill -9 $L; for i in $(seq 50); do alive=0; for p in $RANKS; do "
                          // running, not a zombie waiting for whoever adopted it to reap it
                          "grep -qs '^State:[[:space:]]*[^Z]' /proc/$p/status && alive=$((alive+1)); done; "
                          "[ $alive = 0 ] && break; sleep 0.1; done; "
                          "echo ranks=$(echo $RANKS | wc -w) alive=$alive",
                    dir_);
  EXPECT_NE(r.out.find("second=3"), std::string::npos) << r.out << r.err;
  const auto second = slurp(dir_ / "second.err");
  EXPECT_NE(second.find("o4: another cpt train is writing it (pid "), std::string::npos) << second;
  EXPECT_NE(r.out.find("ranks=2 alive=0"), std::string::npos) << r.out << r.err;
  const auto again = train("dp2", "o4", 2, short_config(2));
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// A one-node job listens on --master-addr alone (loopback by default): the rendezvous store and
// Gloo's transport, in IPv4 and IPv6 (the store had listened on every interface).
TEST_F(DistributedTrain, AOneNodeJobListensOnLoopbackOnly) {
  const auto d = dir_.string();
  const auto r = sh(cpt() + " train --plan " + d + "/dp2/plan.json --config " + d + "/long.json --out " + d +
                        "/o5 --nproc-per-node 2 & L=$!; for i in $(seq 100); do sleep 0.1; "
                        "[ -s " + d + "/o5/metrics.jsonl ] && break; done; "
                        "for p in $(pgrep -P $L); do python3 - $p <<'PY'\n"
                        "import os, sys\n"
                        "pid = sys.argv[1]\n"
                        "inodes = set()\n"
                        "for fd in os.listdir('/proc/%s/fd' % pid):\n"
                        "    try: link = os.readlink('/proc/%s/fd/%s' % (pid, fd))\n"
                        "    except OSError: continue\n"
                        "    if link.startswith('socket:['): inodes.add(link[8:-1])\n"
                        "for table in ('tcp', 'tcp6'):\n"
                        "    for line in open('/proc/net/' + table).readlines()[1:]:\n"
                        "        f = line.split()\n"
                        "        if f[3] == '0A' and f[9] in inodes: print('listening', table, f[1].split(':')[0])\n"
                        "PY\n"
                        "done; kill $L; wait $L",
                    dir_);
  ASSERT_NE(r.out.find("listening"), std::string::npos) << r.out << r.err;  // the store at least
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("listening")) continue;
    // 127.0.0.1 in /proc/net/tcp's little-endian hex.
    EXPECT_EQ(line, "listening tcp 0100007F") << r.out;
  }
}

// SIGTERM to the launcher (a preemption, `scancel`) or to a single process: the ranks finish their
// step, agree, write a final checkpoint at it and exit 4; metrics.jsonl ends at that step, and the
// checkpoint verifies. (It used to end the ranks at once, with no checkpoint and no message.)
TEST_F(DistributedTrain, SigtermEndsWithAFinalCheckpointAndExitFour) {
  const auto d = dir_.string();
  for (const auto& [out, procs] : {std::pair{"o6", 2}, std::pair{"o7", 1}}) {
    const auto r = sh(cpt() + " train --plan " + d + (procs == 2 ? "/dp2" : "/single") + "/plan.json --config " + d +
                          "/long.json --out " + d + "/" + out + (procs == 2 ? " --nproc-per-node 2" : "") +
                          " & L=$!; for i in $(seq 100); do sleep 0.1; [ -s " + d + "/" + out +
                          "/metrics.jsonl ] && break; done; kill -TERM $L; wait $L; echo exit=$?",
                      dir_);
    EXPECT_NE(r.out.find("exit=4"), std::string::npos) << out << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("stop requested: ending at step "), std::string::npos) << r.err;
    const auto trained = losses(dir_ / out / "metrics.jsonl").size();
    std::ostringstream name;
    name << "checkpoints/step_" << std::setw(8) << std::setfill('0') << trained;
    EXPECT_TRUE(fs::exists(dir_ / out / name.str() / "manifest.json")) << out << ": " << name.str();
    EXPECT_TRUE(fs::exists(dir_ / out / "measured.json")) << out;
  }
}

TEST_F(DistributedTrain, CudaRanksWithoutDevicesFailAtOnceInOneLine) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "this machine has a CUDA device";
  const auto d = dir_.string();
  // The launcher checks the device before it starts the ranks: none here.
  const auto r = sh("timeout 60 " + cpt() + " train --plan " + d + "/dp2/plan.json --config " + d +
                        "/train.json --out " + d + "/o5 --nproc-per-node 2 --device cuda",
                    dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("device \"cuda\": no CUDA device is visible"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // said once, by the launcher
}

// Data that does not fit the model is reported once, by the launcher, before any rank starts (not
// by rank 0 and then by every other rank as a failed barrier).
TEST_F(DistributedTrain, DataThatDoesNotFitTheModelIsOneLineFromTheLauncher) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "tiny256.json") << R"({"name": "tiny256", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
    "ffn_hidden": 176, "vocab": 256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
    "tied_embeddings": false, "max_seq_len": 128})";
  ASSERT_EQ(sh(cpt() + " plan --model " + d + "/tiny256.json --gpu h100 --gpus 2 --global-batch 8 --seq-len 64 " +
                   "--fix dp=2,zero=0,micro_batch=2 --out " + d + "/dp2-v256",
               dir_)
                .exit_code,
            0);
  const auto r = train("dp2-v256", "o-v256", 2);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("tokenized with a 512-token vocabulary, but model tiny256 has 256"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(DistributedTrain, AMissingPeerEndsInATimeoutNotAHang) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "timeout.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2,
    "collective_timeout_s": 3})";
  // Rank 0 of a two-rank job whose rank 1 never starts.
  const auto r = sh("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 timeout 60 " + cpt() +
                        " train --plan " + d + "/dp2/plan.json --config " + d + "/timeout.json --out " + d + "/o4",
                    dir_);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 0: rendezvous at 127.0.0.1:29731 failed"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line, no backtrace
}

}  // namespace
