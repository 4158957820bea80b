// cpt run: the end-to-end demonstration behind `make run`, on this machine and its own text.
//   1. measure this machine (cpt-exec probe-host) and describe it as a one-device cluster;
//   2. pre-train a small base model on English text (Debian packages' copyright files), or reuse
//      the cached one (~/.cache/cpt/run-base-*);
//   3. extend its vocabulary with tokens learned from Python source (the standard library);
//   4. plan the extended model for this machine (the cost model's estimate), write plan.json and
//      read it back;
//   5. continually pre-train on Python with 25% English replay and KL distillation against the
//      base, evaluating held-out English (forgetting) and Python (adaptation) before and after;
//   6. print the adaptation/forgetting table and write OUT/summary.json.
// Every step is a `cpt` subcommand a user can run alone; this file only orchestrates them.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "cli/cpt/cmd_run_plan.h"
#include "cli/cpt/demo_text.h"
#include "cli/cpt/run_demo_summary.h"
#include "cli/cpt/commands.h"
#include "cli/cpt/local_profile.h"
#include "cli/executor_process.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/json_reader.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "costmodel/estimate_json.h"
#include "costmodel/step_estimator.h"
#include "spec/model_catalog.h"
#include "spec/model_io.h"
#include "spec/plan.h"

namespace cpt::cli {
namespace {

using core::str_cat;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct RunOptions {
  std::string out;
  int steps = 300;
  int base_steps = 800;
  int add_tokens = 64;
};

// A demo step: a refusal of its input is the step's own line and the demo's exit 2; any other
// failure the demo's exit 3.
void exec_step(const std::vector<std::string>& args) {
  check_step_exit(run_executor_passthrough(args), args);
}

// A single-process plan of `model` on the local machine, with the cost model's prediction (fp32), its
// KL teacher priced when the run distils.
spec::Plan host_plan(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int seq_len, int batch,
                     bool kl_teacher) {
  spec::ParallelConfig p;
  p.micro_batch = batch;
  p.global_batch = batch;
  auto plan = spec::make_plan(model, cluster, spec::Workload{seq_len, 0}, p);
  cost::CostModelOptions o;
  o.precision = spec::Precision::kFp32;
  o.flash_attention = false;
  o = cost::as_run_by_cpt_executor(o);
  o.distill_teacher = kl_teacher;
  const auto ev = cost::evaluate(model, cluster, p, seq_len, o);
  if (const auto* e = std::get_if<cost::Estimate>(&ev)) plan.predicted = cost::prediction_of(*e, o, cluster.gpu());
  return plan;
}

Json train_config(const fs::path& tokenizer, const Json& data, const Json& eval, int steps, double peak, int warmup) {
  return Json{{"tokenizer", {{"model", tokenizer.string()}}},
              {"data", data},
              {"eval", eval},
              {"steps", steps},
              {"lr", {{"schedule", "cosine"}, {"peak", peak}, {"warmup_steps", warmup}, {"min_ratio", 0.1}}},
              {"seed", 1},
              {"log_interval_steps", std::max(1, steps / 5)}};
}

void write_json(const fs::path& p, const Json& j) {
  core::write_file_atomic(p, j.dump(2) + "\n");
}

fs::path cache_root() {
  if (const char* d = std::getenv("CPT_DEPS_DIR")) return fs::path(d);
  if (const char* h = std::getenv("HOME")) return fs::path(h) / ".cache/cpt";
  return fs::temp_directory_path() / "cpt-cache";
}

// The demo's shared inputs: where it writes, the text, the hardware it plans for.
struct Demo {
  fs::path out;
  LocalText text;
  spec::ClusterSpec cluster;
  bool calibrated = false;
  static constexpr int kSeqLen = 128, kBatch = 16;
  [[nodiscard]] Json english_heldout() const {
    return {{"name", "english-heldout"}, {"sources", text.english_heldout}, {"sequences", 256}};
  }
  [[nodiscard]] Json code_heldout() const {
    return {{"name", "python-heldout"}, {"sources", text.code_heldout}, {"extensions", {".py"}}, {"sequences", 256}};
  }
};

// 1. The machine: its probe (OUT/host_probe.json), and the calibrated profile when `cpt calibrate`
// has written one, else the probe's.
void measure_machine(Demo& demo) {
  std::cout << "[1/6] measuring this machine\n";
  const auto probe = run_executor_json({"probe-host", "--seconds", "1.5"});
  write_json(demo.out / "host_probe.json", probe);
  demo.calibrated = fs::exists(local_profile_path());
  demo.cluster = demo.calibrated ? cluster_for_gpu_flag("local", 1, "--gpu") : probed_host_cluster(probe);
  std::cout << str_cat("  ", probe["cores"].get<int>(), " cores, ",
                       fixed(probe["memory_bytes"].get<double>() / 1073741824.0, 1), " GiB; fp32 GEMM up to ",
                       fixed(probe["peak_flops_per_s"].get<double>() / 1e9, 1), " GFLOP/s; copy ",
                       fixed(probe["copy_bytes_per_s"].get<double>() / 1e9, 1), " GB/s\n  planning with ",
                       demo.calibrated ? "the calibrated profile " + local_profile_path().string()
                                       : std::string("this quick probe (cpt calibrate writes a calibrated profile)"),
                       "\n\n");
}

// 2. The base model pre-trained on English, cached by what defines it; its directory.
fs::path base_model_run(const Demo& demo, const spec::ModelSpec& base_model, int base_steps) {
  const auto& text = demo.text;
  const auto key = core::stable_hash_hex(str_cat(Json(text.english_train).dump(), base_steps, "v1"));
  const auto base_dir = cache_root() / str_cat("run-base-", key);
  if (fs::exists(base_dir / "done")) {
    std::cout << "[2/6] base model: reusing " << base_dir.string() << "\n\n";
    return base_dir;
  }
  std::cout << "[2/6] base model: tiny (" << base_model.num_params() << " parameters) pre-trained on English ("
            << text.english_train.size() << " copyright files), " << base_steps << " steps\n";
  const auto tmp = fs::path(str_cat(base_dir.string(), ".tmp-", ::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  exec_step({"data", "train-tokenizer", "/usr/share/doc", "--ext", "copyright", "--vocab-size", "512", "--max-mib", "8",
             "--out", (tmp / "tokenizer").string()});
  spec::save_plan(host_plan(base_model, demo.cluster, Demo::kSeqLen, Demo::kBatch, false), tmp / "plan.json");
  Json cfg =
      train_config(tmp / "tokenizer.model", Json::array({{{"name", "english"}, {"sources", text.english_train}}}),
                   Json::array({demo.english_heldout()}), base_steps, 3e-3, base_steps / 20);
  write_json(tmp / "train.json", cfg);
  exec_step({"train", "--plan", (tmp / "plan.json").string(), "--config", (tmp / "train.json").string(), "--out",
             (tmp / "run").string()});
  core::write_file_atomic(tmp / "done", "ok\n");
  fs::remove_all(base_dir);
  fs::rename(tmp, base_dir);
  std::cout << "\n";
  return base_dir;
}

// The base run's final checkpoint: the newest step directory (the trainer names them).
fs::path final_checkpoint(const fs::path& base_dir) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(base_dir / "run/checkpoints")) {
    const auto name = e.path().filename().string();
    if (name.starts_with("step_") && (newest.empty() || name > newest.filename().string())) newest = e.path();
  }
  if (newest.empty()) throw core::RuntimeError(str_cat(base_dir.string(), ": the cached base model has no checkpoint"));
  return newest;
}

// 3. Vocabulary extension: OUT/tokenizer.model and the base checkpoint grown to it, OUT/base-extended.
void extend_vocabulary(const Demo& demo, const fs::path& base_dir, int add_tokens) {
  const auto& text = demo.text;
  std::cout << "[3/6] vocabulary extension: up to " << add_tokens << " tokens learned from Python source\n";
  fs::remove(demo.out / "tokenizer.model");
  fs::remove_all(demo.out / "base-extended");
  std::vector<std::string> extend{"data", "extend-tokenizer", (base_dir / "tokenizer.model").string(), "--learn"};
  extend.insert(extend.end(), text.code_train.begin(), text.code_train.end());
  extend.insert(extend.end(), {"--ext", ".py", "--count", std::to_string(add_tokens), "--out",
                               (demo.out / "tokenizer.model").string()});
  extend.emplace_back("--avoid");  // keep tokens that are Python's, not English's
  extend.insert(extend.end(), text.english_train.begin(), text.english_train.end());
  exec_step(extend);
  exec_step({"checkpoint", "extend-vocab", final_checkpoint(base_dir).string(), "--tokenizer",
             (demo.out / "tokenizer.model").string(), (demo.out / "base-extended").string()});
  std::cout << "\n";
}

// 4. The plan for the extended model, written and read back.
spec::Plan write_plan(const Demo& demo, const spec::ModelSpec& extended) {
  spec::save_plan(host_plan(extended, demo.cluster, Demo::kSeqLen, Demo::kBatch, true), demo.out / "plan.json");
  const auto plan = spec::load_plan(demo.out / "plan.json");
  std::cout << "[4/6] plan: " << extended.name << " (" << extended.num_params() << " parameters) on "
            << demo.cluster.gpu().display_name << ": 1 process, batch " << Demo::kBatch << " x " << Demo::kSeqLen;
  if (plan.predicted) {
    std::cout << ", predicted " << static_cast<long long>(plan.predicted->tokens_per_s_per_gpu) << " tokens/s ("
              << (demo.calibrated ? "calibrated" : "uncalibrated: run cpt calibrate") << ")";
  }
  std::cout << "\n  " << (demo.out / "plan.json").string() << "\n\n";
  return plan;
}

// 5. Continual pre-training on Python with replay and KL, evaluated often enough for a forecast.
void continual_pretraining(const Demo& demo, int steps) {
  const auto& text = demo.text;
  std::cout << "[5/6] continual pre-training: " << steps
            << " steps on Python, 25% English replay, KL distillation (lambda 0.1) against the base\n";
  Json data =
      Json::array({{{"name", "python"}, {"sources", text.code_train}, {"extensions", {".py"}}, {"weight", 0.75}},
                   {{"name", "english-replay"}, {"sources", text.english_train}, {"weight", 0.25}}});
  Json cfg =
      train_config(demo.out / "tokenizer.model", data, Json::array({demo.english_heldout(), demo.code_heldout()}),
                   steps, 1e-3, std::max(1, steps / 30));
  cfg["init_from"] = (demo.out / "base-extended").string();
  cfg["distill"] = {{"lambda", 0.1}};
  cfg["eval_at_start"] = true;
  cfg["eval_interval_steps"] = std::max(1, steps / 30);  // the curves the forecast is fitted to
  write_json(demo.out / "train.json", cfg);
  fs::remove_all(demo.out / "train");
  exec_step({"train", "--plan", (demo.out / "plan.json").string(), "--config", (demo.out / "train.json").string(),
             "--out", (demo.out / "train").string()});
}

void run(const RunOptions& o) {
  if (!find_executor()) {
    throw core::RuntimeError(
        "`cpt run` trains, and this build has no executor (LibTorch or SentencePiece was not found "
        "at configure time; run scripts/setup and rebuild)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  Demo demo;
  demo.out = o.out.empty() ? default_run_dir() : fs::path(o.out);
  core::create_output_directory(demo.out);
  demo.out = fs::absolute(demo.out);
  demo.text = find_local_text();
  std::cout << "cpt run: continual pre-training on the local machine, from English to Python\nwriting "
            << demo.out.string() << "\n\n";
  measure_machine(demo);
  const auto base_model = spec::find_catalog_model("tiny").value().spec;
  const auto base_dir = base_model_run(demo, base_model, o.base_steps);
  extend_vocabulary(demo, base_dir, o.add_tokens);
  const auto extended = spec::load_model((demo.out / "base-extended/model.json").string(), "base-extended/model.json");
  const auto plan = write_plan(demo, extended);
  continual_pretraining(demo, o.steps);
  summarize_demo(DemoOutcome{demo.out, o.steps, base_model, extended, plan, base_dir, t0});
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto opts = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand(
      "run",
      "The end-to-end demo: measure this machine, pre-train a small base model on English (cached), extend "
      "its vocabulary, plan, continually pre-train on Python with replay and KL, report forgetting/adaptation");
  cmd->add_option("--out", opts->out, "Output directory (default: a new runs/run-<time>)");
  cmd->add_option("--steps", opts->steps, "Continual pre-training steps")
      ->capture_default_str()
      ->check(cli::positive_number());
  cmd->add_option("--base-steps", opts->base_steps, "Base pre-training steps")
      ->capture_default_str()
      ->check(cli::positive_number());
  cmd->add_option("--add-tokens", opts->add_tokens, "Tokens to add to the vocabulary at most")
      ->capture_default_str()
      ->check(cli::positive_number());
  // Plan-and-train for given hardware (cmd_run_plan.h) instead of the demo.
  auto planned = std::make_shared<PlannedRunOptions>();
  cmd->add_option("--model", planned->model, "Plan and train this model instead of the demo (catalog name or JSON)");
  cmd->add_option("--gpu", planned->gpu, "with --model: the GPU to plan for");
  cmd->add_flag("--cpu", planned->cpu, "with --model: plan for this machine's CPU (the calibrated profile)");
  cmd->add_option("--gpus", planned->gpus, "with --model: devices (local ranks)")->check(cli::positive_number());
  cmd->add_option("--config", planned->config, "with --model: TRAIN.json");
  cmd->add_option("--global-batch", planned->global_batch, "with --model: sequences per step")
      ->check(cli::positive_number());
  cmd->add_option("--seq-len", planned->seq_len, "with --model: tokens per sequence")->check(cli::positive_number());
  cmd->add_option("--fix", planned->fix, "with --model: fix parts of the configuration (as cpt plan --fix)");
  cmd->callback([opts, planned] {
    if (!planned->model.empty()) {
      planned->out = opts->out;
      run_planned(*planned);
      return;
    }
    run(*opts);
  });
}

}  // namespace cpt::cli
