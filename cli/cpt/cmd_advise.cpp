// cpt advise --model M --gpu G --gpus N --global-batch GB --seq-len S [--json]: which framework
// family (ZeRO-2, ZeRO-3/FSDP, FSDP hybrid, 3D) wins for this case, with each family's best plan.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/numeric_flags.h"
#include "cli/cpt/commands.h"
#include "cli/cpt/local_profile.h"
#include "cli/output.h"
#include "cli/cpt/recipe_flag.h"
#include "cli/cpt/runtime_flag.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/estimate_json.h"
#include "planner/advise.h"
#include "spec/hardware_catalog.h"
#include "spec/model_io.h"

namespace cpt::cli {
namespace {

struct AdviseOptions {
  std::string model, gpu;
  int gpus = 0, global_batch = 0, seq_len = 0;
  std::string runtime;  // empty: each family's own
  std::string config;   // TRAIN.json: the continual recipe priced
  bool json = false;
};

void run(const AdviseOptions& o) {
  const auto recipe = read_recipe(o.config);
  std::string vocabulary_note;
  const auto model = model_of_recipe(spec::load_model(o.model, "--model"), recipe, vocabulary_note);
  const auto cluster = cluster_for_gpu_flag(o.gpu, o.gpus, "--gpu");
  planner::SearchOptions so;
  so.global_batch = o.global_batch;
  so.seq_len = o.seq_len;
  so.runtime = runtime_named(o.runtime);
  so.cost = with_recipe(so.cost, recipe);
  const auto a = planner::advise(model, cluster, so);
  if (o.json) {
    core::Json fams = core::Json::array();
    for (const auto& f : a.families) {
      core::Json j = {{"family", f.family}, {"runtime", spec::to_string(f.runtime)}};
      if (f.best) {
        j["config"] = config_summary(f.best->config);
        j["estimate"] = cost::evaluation_to_json(f.best->estimate);
      } else {
        j["fits"] = false;
        j["why_not"] = f.why_not;
      }
      fams.push_back(j);
    }
    print_json(
        {{"families", fams},
         {"winner", a.winner >= 0 ? core::Json(a.families[static_cast<std::size_t>(a.winner)].family) : core::Json()},
         {"reason", a.reason},
         {"recipe", describe_recipe(so.cost)}});
    return;
  }
  using core::Align;
  core::TextTable t({"family", "runtime", "best plan", "tokens/s/GPU", "MFU", "peak GiB"},
                    {Align::kLeft, Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight});
  for (const auto& f : a.families) {
    if (!f.best) {
      t.add_row({f.family, spec::to_string(f.runtime), "does not fit (" + f.why_not + ")", "-", "-", "-"});
      continue;
    }
    const auto& e = f.best->estimate;
    t.add_row({f.family, spec::to_string(f.runtime), config_summary(f.best->config), fixed(e.tokens_per_s_per_gpu, 0),
               fixed(100 * e.mfu, 1) + "%", fixed(core::to_gibibytes(e.peak_memory().total()), 1)});
  }
  std::cout << model.name << " on " << cluster.num_gpus << " x " << cluster.gpu().name
            << ", continual recipe: " << describe_recipe(so.cost) << "\n"
            << (vocabulary_note.empty() ? "" : vocabulary_note + "\n") << "\n"
            << t.render() << "\n"
            << (a.winner >= 0 ? "winner: " + a.families[static_cast<std::size_t>(a.winner)].family + ". " : "")
            << a.reason << ".\n";
}

}  // namespace

void register_advise_command(CLI::App& app) {
  auto o = std::make_shared<AdviseOptions>();
  auto* cmd = app.add_subcommand("advise", "Which framework family wins: ZeRO-2, ZeRO-3/FSDP, FSDP hybrid or 3D");
  cmd->add_option("--model", o->model, "Catalog name, model JSON or Hugging Face config.json")->required();
  cmd->add_option("--gpu", o->gpu, "GPU name")->required();
  cmd->add_option("--gpus", o->gpus, "Number of GPUs")->required()->check(cli::positive_number());
  cmd->add_option("--global-batch", o->global_batch, "Sequences per step")->required()->check(cli::positive_number());
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence")->required()->check(cli::positive_number());
  add_runtime_option(*cmd, o->runtime,
                     "default: each family's own (ZeRO-2 deepspeed, the FSDP families fsdp, 3D megatron)");
  add_recipe_option(*cmd, o->config);
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
