// Every hand-off file parses in its own language (JSON; TOML with Python's tomllib; bash -n for the
// scripts) and states the plan's degrees consistently.
#include "planner/handoff.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::planner {
namespace {

int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

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
  const std::vector<spec::ParallelConfig> configs = {
      {.tp = 8, .dp = 8, .global_batch = 64, .zero_stage = 1, .recompute = spec::Recompute::kSelective,
       .sequence_parallel = true},
      {.tp = 4, .dp = 4, .pp = 4, .virtual_stages = 2, .global_batch = 64, .recompute = spec::Recompute::kFull,
       .schedule = spec::ScheduleKind::kInterleaved1F1B},
      {.tp = 2, .cp = 2, .dp = 16, .global_batch = 64, .zero_stage = 3, .hybrid_shard = true,
       .offload = spec::Offload::kOptimizer},
  };
  int checked = 0;
  for (const auto& c : configs) {
    const auto plan = spec::make_plan(model, cluster, spec::Workload{4096, 0}, c);
    const auto dir = std::filesystem::temp_directory_path() / ("cpt_handoff_" + std::to_string(checked));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto files = write_handoff(plan, dir);
    ASSERT_EQ(files.size(), 5u);
    const auto ds = nlohmann::json::parse(slurp(dir / "ds_config.json"));
    EXPECT_EQ(ds["train_batch_size"].get<int>(),
              ds["train_micro_batch_size_per_gpu"].get<int>() * ds["gradient_accumulation_steps"].get<int>() * c.dp);
    EXPECT_EQ(ds["zero_optimization"]["stage"], c.zero_stage);
    for (const char* script : {"torchrun.sh", "slurm.sbatch", "megatron_args.sh"}) {
      EXPECT_EQ(run("bash -n " + (dir / script).string()), 0) << script;
    }
    EXPECT_NE(slurp(dir / "megatron_args.sh").find("--tensor-model-parallel-size " + std::to_string(c.tp)), std::string::npos);
    if (have_tomllib) {
      // The product of torchtitan's degrees is the GPU count.
      const std::string check =
          "python3 -c 'import tomllib,sys; p=tomllib.load(open(sys.argv[1],\"rb\"))[\"parallelism\"]; "
          "n=p[\"data_parallel_replicate_degree\"]*p[\"data_parallel_shard_degree\"]*p[\"tensor_parallel_degree\"]*"
          "p[\"context_parallel_degree\"]*p[\"pipeline_parallel_degree\"]; sys.exit(0 if n==int(sys.argv[2]) else 1)' " +
          (dir / "torchtitan.toml").string() + " " + std::to_string(cluster.num_gpus);
      EXPECT_EQ(run(check), 0) << slurp(dir / "torchtitan.toml");
    }
    std::filesystem::remove_all(dir);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace cpt::planner
