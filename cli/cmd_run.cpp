// cpt run: plan and train in one shot. Until the executor (#6, #7) and the CPU profile of this
// machine (#9) exist it resolves its inputs, reports what this machine and this build can do, and
// says what is missing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/output.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "core/units.h"
#include "core/version.h"
#include "spec/hardware_catalog.h"
#include "cli/executor_process.h"
#include "spec/model_io.h"

namespace cpt::cli {
namespace {

using core::str_cat;

// The embedded default behind `make run`: a ~25M-parameter LLaMA-style model, planned for one
// 8-GPU H100 node (the CPU profile of this machine arrives with `cpt calibrate`, issue #9).
struct RunOptions {
  std::string model = "cpt-25m";
  std::string gpu = "h100";
  int gpus = 8;
  int seq_len = 512;
};

std::string executor_status() {
  if (!find_executor()) return "not built (LibTorch not found at configure time; run scripts/setup)";
  auto r = run_executor({"info"});
  while (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
  if (r.exit_code != 0) return str_cat("cpt-exec failed (exit ", r.exit_code, ")");
  return str_cat("cpt-exec: ", r.out);
}

void run(const RunOptions& o) {
  const auto model = spec::load_model(o.model, "--model");
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu(o.gpu, o.gpus, "--gpu");
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const double mem_gib = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE)) /
                         static_cast<double>(core::kGiB);
  core::TextTable t({"what", "resolved"});
  t.add_row({"model", str_cat(model.name, ": ", model.layers, " layers, hidden ", model.hidden, ", heads ", model.heads,
                              "/", model.kv_heads, ", vocab ", model.vocab, ", ", format_count(model.num_params()),
                              " parameters")});
  t.add_row({"cluster", str_cat(cluster.num_gpus, " x ", cluster.gpu().display_name, " in ", cluster.num_nodes, " ",
                                cluster.node.name, " node(s), ", cluster.fabric.name)});
  t.add_row({"workload", str_cat("sequence length ", o.seq_len)});
  t.add_row({"this machine", str_cat(cores, " CPU cores, ", fixed(mem_gib, 1), " GiB memory")});
  t.add_row({"executor", executor_status()});
  t.add_row({"cpt", str_cat(core::kVersion, "+g", core::kGitSha)});
  std::cout << "cpt run: one-shot plan and train\n\n" << t.render() << "\n"
            << "Not built yet: the executor that trains (issues #6, #7) and the profile of this machine's\n"
            << "CPU (issue #9). When they land, this command plans the model above for this machine with\n"
            << "the planner (`cpt plan`, built), writes plan.json, reads it back and trains on local text.\n";
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto opts = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Plan and train in one shot (no arguments: the embedded default)");
  cmd->add_option("--model", opts->model, "Catalog name or model JSON")->capture_default_str();
  cmd->add_option("--gpu", opts->gpu, "GPU name (implies node and fabric)")->capture_default_str();
  cmd->add_option("--gpus", opts->gpus, "Number of GPUs")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", opts->seq_len, "Tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([opts] { run(*opts); });
}

}  // namespace cpt::cli
