// cpt checkpoint export|import --format hf SRC DST, cpt checkpoint verify DIR
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/exec_commands.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/io/model_weights.h"

namespace cpt::cli {

void register_exec_checkpoint_command(CLI::App& app) {
  auto* ckpt = app.add_subcommand("checkpoint", "Verify checkpoints; convert to and from Hugging Face format");
  ckpt->require_subcommand(1);
  struct Args {
    std::string format = "hf", src, dst;
  };
  auto a = std::make_shared<Args>();
  auto* exp = ckpt->add_subcommand("export", "cpt checkpoint -> Hugging Face directory (config.json + model.safetensors)");
  exp->add_option("--format", a->format, "Target format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  exp->add_option("checkpoint", a->src, "cpt checkpoint directory (OUT/checkpoints/step_*)")->required();
  exp->add_option("out", a->dst, "Output directory (must not exist)")->required();
  exp->callback([a] {
    exec::export_hf(a->src, a->dst);
    std::cout << core::str_cat("exported ", a->src, " -> ", a->dst, " (Hugging Face LlamaForCausalLM, fp32)\n");
  });
  auto* imp = ckpt->add_subcommand("import", "Hugging Face directory -> cpt checkpoint (weights only)");
  imp->add_option("--format", a->format, "Source format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  imp->add_option("hf_dir", a->src, "Directory with config.json and *.safetensors")->required();
  imp->add_option("out", a->dst, "Output checkpoint directory (must not exist)")->required();
  imp->callback([a] {
    exec::import_hf(a->src, a->dst);
    std::cout << core::str_cat("imported ", a->src, " -> ", a->dst, "\n");
  });
  auto* ver = ckpt->add_subcommand("verify", "Check a checkpoint's files against its manifest");
  ver->add_option("checkpoint", a->src, "cpt checkpoint directory")->required();
  ver->callback([a] {
    const auto c = exec::Checkpoint::open(a->src);
    std::cout << core::str_cat(a->src, ": valid checkpoint of ", c.model().name, " at step ", c.step(),
                               c.has_optimizer() ? " (with optimizer state)" : " (weights only)", "\n");
  });
}

}  // namespace cpt::cli
