// Every hand-off file parses in its own language (JSON; TOML with Python's tomllib; bash -n for the
// scripts) and states the plan's degrees consistently.
#include "planner/handoff.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "planner/export_gaps.h"
#include "planner/torchtitan_export.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"
#include "spec/plan.h"
#include "spec/rank_layout.h"

namespace cpt::planner {
namespace {

int run(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Handoff, EveryFileParsesAndAgreesWithThePlan) {
  const auto model = spec::find_catalog_model("llama3-70b")->spec;
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 64, "--gpu");
  const bool have_tomllib = run("python3 -c 'import tomllib'") == 0;
  const bool have_shellcheck = run("command -v shellcheck") == 0;  // scripts/setup installs it
  const std::vector<spec::ParallelConfig> configs = {
      {.tp = 8,
       .dp = 8,
       .global_batch = 64,
       .zero_stage = 1,
       .recompute = spec::Recompute::kSelective,
       .sequence_parallel = true},
      {.tp = 4,
       .dp = 4,
       .pp = 4,
       .virtual_stages = 2,
       .global_batch = 64,
       .recompute = spec::Recompute::kFull,
       .schedule = spec::ScheduleKind::kInterleaved1F1B},
      {.tp = 2,
       .cp = 2,
       .dp = 16,
       .global_batch = 64,
       .zero_stage = 3,
       .hybrid_shard = true,
       .offload = spec::Offload::kOptimizer},
      // DeepSpeed's pipeline engine: ZeRO-1 at most.
      {.tp = 2, .dp = 8, .pp = 4, .global_batch = 64, .zero_stage = 2},
  };
  int checked = 0;
  for (const auto& c : configs) {
    const auto plan = spec::make_plan(model, cluster, spec::Workload{4096, 0}, c);
    const auto dir = std::filesystem::temp_directory_path() / ("cpt_handoff_" + std::to_string(checked));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto files = write_handoff(plan, dir);
    ASSERT_EQ(files.size(), 6u);
    const auto ds = nlohmann::json::parse(slurp(dir / "ds_config.json"));
    // With model parallelism the batch follows from the model's mpu (DeepSpeed would check a stated
    // one against the world size); DeepSpeed's pipeline engine takes ZeRO-1 at most.
    EXPECT_EQ(ds.contains("train_batch_size"), c.tp * c.pp * c.cp == 1);
    EXPECT_EQ(c.global_batch,
              ds["train_micro_batch_size_per_gpu"].get<int>() * ds["gradient_accumulation_steps"].get<int>() * c.dp);
    EXPECT_EQ(ds["zero_optimization"]["stage"], c.pp > 1 ? std::min(c.zero_stage, 1) : c.zero_stage);
    // Offload runs DeepSpeed's CPU Adam, built from the config's optimizer block.
    EXPECT_EQ(ds.contains("optimizer"), c.offload != spec::Offload::kNone);
    for (const char* script : {"torchrun.sh", "slurm.sbatch", "megatron_args.sh"}) {
      EXPECT_EQ(run("bash -n " + (dir / script).string()), 0) << script;
      if (have_shellcheck) {
        EXPECT_EQ(run("shellcheck " + (dir / script).string()), 0) << script;
      }
    }
    const std::string megatron = slurp(dir / "megatron_args.sh");
    EXPECT_NE(megatron.find("--tensor-model-parallel-size " + std::to_string(c.tp)), std::string::npos);
    // Optimizer offload as Megatron-Core's hybrid-device optimizer (which validate_args allows only
    // with the precision-aware optimizer) over the distributed optimizer.
    const bool offloads = c.offload != spec::Offload::kNone;
    EXPECT_EQ(megatron.find("--optimizer-cpu-offload") != std::string::npos, offloads) << megatron;
    EXPECT_EQ(megatron.find("--use-precision-aware-optimizer") != std::string::npos, offloads);
    if (offloads) {
      EXPECT_NE(megatron.find("--use-distributed-optimizer"), std::string::npos);
    }
    if (have_tomllib) {
      // The product of torchtitan's degrees is the GPU count.
      const std::string check =
          "python3 -c 'import tomllib,sys; p=tomllib.load(open(sys.argv[1],\"rb\"))[\"parallelism\"]; "
          "n=p[\"data_parallel_replicate_degree\"]*p[\"data_parallel_shard_degree\"]*p[\"tensor_parallel_degree\"]*"
          "p[\"context_parallel_degree\"]*p[\"pipeline_parallel_degree\"]; sys.exit(0 if n==int(sys.argv[2]) else "
          "1)' " +
          (dir / "torchtitan.toml").string() + " " + std::to_string(cluster.num_gpus);
      EXPECT_EQ(run(check), 0) << slurp(dir / "torchtitan.toml");
    }
    std::filesystem::remove_all(dir);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A model's name is the user's (its model JSON): in the files other programs read it cannot end a
// string or a comment and run as code — slurm.sbatch's job name keeps a word of it, torchtitan's
// TOML and Python module quote it.
TEST(Handoff, AHostileModelNameRunsNowhere) {
  auto model = spec::find_catalog_model("llama3-8b")->spec;
  model.name = "x\"\n[evil]\nrm -rf /tmp/cpt-hostile #'$(id)";
  model.layers = 30;  // no torchtitan flavour: the name lands in its files
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 8, "--gpu");
  const auto plan =
      spec::make_plan(model, cluster, spec::Workload{2048, 0}, spec::ParallelConfig{.dp = 8, .global_batch = 64});
  const auto dir = std::filesystem::temp_directory_path() / ("cpt_handoff_hostile." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_handoff(plan, dir);
  for (const char* file :
       {"slurm.sbatch", "torchtitan.toml", "torchtitan_config.py", "megatron_args.sh", "torchrun.sh"}) {
    for (const auto& line : lines_of(dir / file)) {
      EXPECT_FALSE(line.starts_with("rm ") || line.starts_with("[evil]")) << file << ": " << line;
    }
  }
  EXPECT_EQ(run("bash -n " + (dir / "slurm.sbatch").string()), 0);
  EXPECT_EQ(run("python3 -c 'import ast,sys; ast.parse(open(sys.argv[1]).read())' " +
                (dir / "torchtitan_config.py").string()),
            0);
  if (run("python3 -c 'import tomllib'") == 0) {
    EXPECT_EQ(run("python3 -c 'import tomllib,sys; t=tomllib.load(open(sys.argv[1],\"rb\")); "
                  "sys.exit(0 if t[\"model\"][\"flavor\"].startswith(\"x\\\"\\n\") else 1)' " +
                  (dir / "torchtitan.toml").string()),
              0)
        << slurp(dir / "torchtitan.toml");
  }
  std::filesystem::remove_all(dir);
}

// Hybrid sharding's shard degree in torchtitan's TOML and DeepSpeed's hpZ partition is the dp
// shard group spec::RankLayout places (the dp ranks of one node), whatever the rank order: with
// tp-cp-pp-dp on 8-GPU nodes, tp 2 pp 2 dp 8 puts 2 dp ranks on a node (8 / (tp·pp)), not 4.
TEST(Handoff, HybridShardDegreesAreTheLayoutsShardGroups) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 32, "--gpu");
  spec::ParallelConfig c{.tp = 2, .dp = 8, .pp = 2, .global_batch = 64, .zero_stage = 3, .hybrid_shard = true};
  for (const bool pp_inside_dp : {false, true}) {
    if (pp_inside_dp) c.axis_order = {spec::Axis::kTp, spec::Axis::kCp, spec::Axis::kPp, spec::Axis::kDp};
    const int shard = static_cast<int>(spec::RankLayout(c, 8).dp_shard_group(0).size());
    EXPECT_EQ(shard, pp_inside_dp ? 2 : 4);
    const auto plan = spec::make_plan(spec::find_catalog_model("llama3-8b")->spec, cluster, spec::Workload{4096, 0}, c);
    const auto toml = torchtitan_toml(plan);
    EXPECT_NE(toml.find("data_parallel_shard_degree = " + std::to_string(shard) + "\n"), std::string::npos) << toml;
    EXPECT_NE(toml.find("data_parallel_replicate_degree = " + std::to_string(8 / shard) + "\n"), std::string::npos);
    EXPECT_EQ(deepspeed_config(plan)["zero_optimization"]["zero_hpz_partition_size"].get<int>(), shard);
  }
}

std::string megatron_of(const char* model, int gpus, const spec::ParallelConfig& c) {
  const auto plan = spec::make_plan(spec::find_catalog_model(model)->spec,
                                    spec::HardwareCatalog::builtin().cluster_for_gpu("h100", gpus, "--gpu"),
                                    spec::Workload{2048, 0}, c);
  return megatron_args(plan);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The Megatron arguments build the plan's model: its RoPE base and Llama 3.1 scaling, norm epsilon,
// q/k/v biases and no
// dropout where the family trains without; its rank order and uneven pipeline split.
TEST(Handoff, MegatronArgumentsBuildThePlansModel) {
  const std::string llama = megatron_of("llama3-8b", 8, {.tp = 2, .dp = 4, .global_batch = 64});
  EXPECT_TRUE(has(llama, "--rotary-base 500000")) << llama;
  EXPECT_TRUE(has(llama, "--attention-dropout 0.0")) << llama;
  EXPECT_TRUE(has(llama, "--hidden-dropout 0.0")) << llama;
  EXPECT_TRUE(has(llama, "--norm-epsilon 1e-05")) << llama;
  EXPECT_FALSE(has(llama, "--add-qkv-bias"));
  EXPECT_TRUE(has(llama, "export CUDA_DEVICE_MAX_CONNECTIONS=1"));
  EXPECT_FALSE(has(llama, "--use-rope-scaling")) << llama;  // Llama 3 has none; 3.1 and 3.2 do
  EXPECT_TRUE(has(megatron_of("llama3.1-8b", 8, {.tp = 2, .dp = 4, .global_batch = 64}),
                  "--use-rope-scaling --rope-scaling-factor 8"));
  EXPECT_TRUE(has(megatron_of("llama3.2-1b", 8, {.dp = 8, .global_batch = 64}), "--rope-scaling-factor 32"));
  const std::string qwen = megatron_of("qwen2.5-7b", 8, {.tp = 2, .dp = 4, .global_batch = 64});
  EXPECT_TRUE(has(qwen, "--add-qkv-bias")) << qwen;
  EXPECT_TRUE(has(qwen, "--rotary-base 1000000")) << qwen;
  EXPECT_TRUE(has(qwen, "--norm-epsilon 1e-06")) << qwen;
  const std::string gpt = megatron_of("gpt3-175b", 8, {.tp = 8, .global_batch = 64});
  EXPECT_FALSE(has(gpt, "--hidden-dropout")) << gpt;  // GPT trains with Megatron's dropout
  spec::ParallelConfig pp_dp{.tp = 2, .dp = 2, .pp = 2, .global_batch = 64};
  pp_dp.axis_order = {spec::Axis::kTp, spec::Axis::kCp, spec::Axis::kPp, spec::Axis::kDp};
  EXPECT_TRUE(has(megatron_of("llama3-8b", 8, pp_dp), "--use-tp-pp-dp-mapping"));
  // 126 layers over 64 stages: [1, 2 x 62, 1], which Megatron needs stated.
  const std::string big = megatron_of("llama3.1-405b", 512, {.tp = 8, .pp = 64, .global_batch = 64});
  EXPECT_TRUE(has(big, "--decoder-first-pipeline-num-layers 1")) << big;
  EXPECT_TRUE(has(big, "--decoder-last-pipeline-num-layers 1")) << big;
  // 80 layers over 4 ranks x 3 virtual stages: no first/last arguments state it; the layout does,
  // and replaces the virtual-stage count (Megatron-LM refuses both).
  spec::ParallelConfig interleaved{.tp = 8, .pp = 4, .virtual_stages = 3, .global_batch = 64};
  interleaved.schedule = spec::ScheduleKind::kInterleaved1F1B;
  const std::string layout = megatron_of("llama3-70b", 32, interleaved);
  EXPECT_TRUE(has(layout, "--pipeline-model-parallel-layout \"Et*")) << layout;
  EXPECT_TRUE(has(layout, "L\"\n")) << layout;
  EXPECT_FALSE(has(layout, "--num-virtual-stages-per-pipeline-rank")) << layout;
  EXPECT_FALSE(has(layout, "--decoder-first-pipeline-num-layers")) << layout;
  interleaved.virtual_stages = 5;  // 80 = 4 x 5 x 4: even
  EXPECT_TRUE(has(megatron_of("llama3-70b", 32, interleaved), "--num-virtual-stages-per-pipeline-rank 5"));
}

// ZeRO-2/3 without a pipeline or offload is Megatron-FSDP with its required flags and without
// CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM refuses it), hybrid sharding its HSDP (an instance per
// node's shard group); with a pipeline the export keeps the distributed optimizer, says so, and
// --target megatron counts it as a gap.
TEST(Handoff, ShardingBeyondTheOptimizerIsMegatronFsdp) {
  const spec::ParallelConfig zero3{.tp = 2, .dp = 4, .global_batch = 64, .zero_stage = 3};
  const std::string fsdp = megatron_of("llama3-8b", 8, zero3);
  for (const char* flag : {"--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                           "--no-gradient-accumulation-fusion", "--ckpt-format fsdp_dtensor",
                           "--use-distributed-optimizer", "unset CUDA_DEVICE_MAX_CONNECTIONS"}) {
    EXPECT_TRUE(has(fsdp, flag)) << flag << "\n" << fsdp;
  }
  EXPECT_FALSE(has(fsdp, "CUDA_DEVICE_MAX_CONNECTIONS=1")) << fsdp;
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  EXPECT_EQ(find_export_gap(m, zero3, 4096, spec::Runtime::kMegatron), ExportGap::kNone);
  const spec::ParallelConfig zero2{.dp = 8, .global_batch = 64, .zero_stage = 2};
  EXPECT_TRUE(has(megatron_of("llama3-8b", 8, zero2), "--data-parallel-sharding-strategy optim_grads\n"));
  spec::ParallelConfig piped{.tp = 2, .dp = 2, .pp = 2, .global_batch = 64, .zero_stage = 3};
  const std::string zero1 = megatron_of("llama3-8b", 8, piped);
  EXPECT_FALSE(has(zero1, "--use-megatron-fsdp")) << zero1;
  EXPECT_TRUE(has(zero1, "is expressed as ZeRO-1")) << zero1;
  EXPECT_EQ(find_export_gap(m, piped, 4096, spec::Runtime::kMegatron), ExportGap::kShardingBeyondOptimizer);
  piped.pp = 1;
  piped.dp = 4;
  piped.offload = spec::Offload::kOptimizer;
  EXPECT_FALSE(has(megatron_of("llama3-8b", 8, piped), "--use-megatron-fsdp"));
  // 32 H100s in nodes of 8 under tp 2: 4 data-parallel ranks a node shard, 4 instances replicate.
  const spec::ParallelConfig hybrid{.tp = 2, .dp = 16, .global_batch = 64, .zero_stage = 3, .hybrid_shard = true};
  const std::string hsdp = megatron_of("llama3-8b", 32, hybrid);
  EXPECT_TRUE(has(hsdp, "--use-megatron-fsdp")) << hsdp;
  EXPECT_TRUE(has(hsdp, "--num-distributed-optimizer-instances 4\n")) << hsdp;
  EXPECT_TRUE(has(hsdp, "sharded over the 4 data-parallel ranks of a node")) << hsdp;
  EXPECT_EQ(find_export_gap(m, hybrid, 4096, spec::Runtime::kMegatron), ExportGap::kNone);
  EXPECT_FALSE(has(fsdp, "--num-distributed-optimizer-instances")) << fsdp;
}

// The configuration each export writes where it cannot state the plan's: gap by gap until it runs
// as written; refusals and plans that run as planned unchanged.
TEST(Handoff, ConfigAsExportedRewritesEachGap) {
  const auto m = spec::find_catalog_model("llama3-8b")->spec;
  const spec::ParallelConfig piped{.tp = 2,
                                   .dp = 2,
                                   .pp = 2,
                                   .global_batch = 64,
                                   .zero_stage = 3,
                                   .hybrid_shard = true,
                                   .schedule = spec::ScheduleKind::kZeroBubbleH1};
  const auto megatron = config_as_exported(m, piped, 4096, spec::Runtime::kMegatron);
  EXPECT_EQ(megatron.zero_stage, 1);
  EXPECT_FALSE(megatron.hybrid_shard);
  EXPECT_EQ(megatron.schedule, spec::ScheduleKind::k1F1B);
  EXPECT_EQ(find_export_gap(m, megatron, 4096, spec::Runtime::kMegatron), ExportGap::kNone);
  EXPECT_EQ(describe_changes(piped, megatron), "ZeRO-3 -> ZeRO-1, hybrid sharding -> none, zb_h1 -> 1f1b");
  const spec::ParallelConfig interleaved{.tp = 2,
                                         .dp = 2,
                                         .pp = 2,
                                         .virtual_stages = 2,
                                         .global_batch = 64,
                                         .zero_stage = 3,
                                         .schedule = spec::ScheduleKind::kInterleaved1F1B};
  const auto deepspeed = config_as_exported(m, interleaved, 4096, spec::Runtime::kDeepSpeed);
  EXPECT_EQ(deepspeed.zero_stage, 1);
  EXPECT_EQ(deepspeed.virtual_stages, 1);
  EXPECT_EQ(deepspeed.schedule, spec::ScheduleKind::k1F1B);
  // torchtitan offloads everything or nothing; ZeRO-0 beside tp runs as FSDP.
  const spec::ParallelConfig offloaded{
      .dp = 8, .global_batch = 64, .zero_stage = 3, .offload = spec::Offload::kOptimizer};
  EXPECT_EQ(config_as_exported(m, offloaded, 4096, spec::Runtime::kTorchtitan).offload,
            spec::Offload::kOptimizerAndParams);
  const spec::ParallelConfig replicated{.tp = 2, .dp = 4, .global_batch = 64};
  EXPECT_EQ(config_as_exported(m, replicated, 4096, spec::Runtime::kTorchtitan).zero_stage, 3);
  // Runs as planned, or refused: unchanged.
  const spec::ParallelConfig plain{.tp = 2, .dp = 4, .global_batch = 64, .zero_stage = 1};
  EXPECT_EQ(config_as_exported(m, plain, 4096, spec::Runtime::kMegatron), plain);
  EXPECT_EQ(describe_changes(plain, plain), "");
  const spec::ParallelConfig zero3_pp{.dp = 4, .pp = 2, .global_batch = 64, .zero_stage = 3};
  EXPECT_EQ(config_as_exported(m, zero3_pp, 4096, spec::Runtime::kCpt), zero3_pp);
}

void write_script(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << "#!/usr/bin/env bash\n" << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

// The launchers start `cpt train --plan PLAN --config TRAIN.json [options]` (with stand-ins for
// torchrun, srun, scontrol and cpt on PATH): torchrun.sh from anywhere, slurm.sbatch from the copy
// Slurm runs, with the rendezvous host from scontrol; a failing scontrol, a missing plan or a
// missing TRAIN.json argument stop them before anything starts.
TEST(Handoff, LaunchersStartCptTrainWithThePlanAndTheConfig) {
  namespace fs = std::filesystem;
  // Per process: a run of the suite beside another must not share the scripts.
  const auto root = fs::temp_directory_path() / ("cpt_handoff_launch." + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto dir = root / "plan dir it's";  // a space and a quote in the path
  const auto bin = root / "bin";
  fs::create_directories(dir);
  fs::create_directories(bin);
  const auto plan =
      spec::make_plan(spec::find_catalog_model("llama3-8b")->spec,
                      spec::HardwareCatalog::builtin().cluster_for_gpu("h100", 16, "--gpu"), spec::Workload{4096, 0},
                      spec::ParallelConfig{.tp = 2, .dp = 8, .global_batch = 64});
  spec::save_plan(plan, dir / "plan.json");
  write_handoff(plan, dir);
  const auto args = root / "args";
  // torchrun gives each rank the rendezvous address it was given.
  write_script(bin / "torchrun",
               "while [ \"$1\" != --no-python ]; do\n"
               "  if [ \"$1\" = --master-addr ]; then export MASTER_ADDR=\"$2\"; fi\n"
               "  shift\n"
               "done\nshift\nexec \"$@\"\n");
  write_script(bin / "srun", "exec \"$@\"\n");
  write_script(bin / "scontrol", "echo node-a\necho node-b\n");
  write_script(bin / "cpt", "printf '%s\\n' \"$MASTER_ADDR\" \"$@\" > \"" + args.string() + "\"\n");
  const std::string env = "cd / && PATH=\"" + bin.string() + ":$PATH\" SLURM_JOB_NODELIST=n[1-2] ";
  const std::string plan_json = (dir / "plan.json").string();

  ASSERT_EQ(run(env + "bash \"" + (dir / "torchrun.sh").string() + "\" job.json --steps 3"), 0);
  EXPECT_EQ(lines_of(args), (std::vector<std::string>{"127.0.0.1", "train", "--plan", plan_json, "--config", "job.json",
                                                      "--steps", "3"}));
  // Slurm runs a copy of the batch script from its spool directory.
  fs::copy_file(dir / "slurm.sbatch", root / "spooled.sbatch");
  fs::remove(args);
  ASSERT_EQ(run(env + "bash \"" + (root / "spooled.sbatch").string() + "\" job.json"), 0);
  EXPECT_EQ(lines_of(args), (std::vector<std::string>{"node-a", "train", "--plan", plan_json, "--config", "job.json"}));

  fs::remove(args);
  EXPECT_NE(run(env + "bash \"" + (dir / "torchrun.sh").string() + "\""), 0);  // no TRAIN.json
  EXPECT_NE(run(env + "CPT_PLAN_DIR=/nonexistent bash \"" + (root / "spooled.sbatch").string() + "\" job.json"), 0);
  write_script(bin / "scontrol", "exit 1\n");
  EXPECT_NE(run(env + "bash \"" + (root / "spooled.sbatch").string() + "\" job.json"), 0);
  EXPECT_FALSE(fs::exists(args));  // cpt was never started
  fs::remove_all(root);
}

}  // namespace
}  // namespace cpt::planner
