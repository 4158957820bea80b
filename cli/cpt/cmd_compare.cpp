// cpt compare RUN_DIR [--json] [--log FILE] [--cluster PROFILE]: the cost model's prediction for
// the run's plan beside what the run measured (OUT/measured.json), with the relative error of each
// field (cli/cpt/run_comparison.h), appended to a local fidelity log.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cpt/commands.h"
#include "cli/output.h"
#include "cli/cpt/run_comparison.h"
#include "core/error.h"
#include "core/output_directory.h"
#include "core/str_cat.h"

namespace cpt::cli {

namespace {

using core::str_cat;
using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct CompareOptions {
  std::string run;
  std::string log;
  std::string cluster;  // evaluate on this profile instead of the plan's
  bool json = false;
};

fs::path default_log() {
  if (const char* p = std::getenv("CPT_FIDELITY_LOG"); p != nullptr && *p != '\0') return p;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / ".cache" / "cpt" / "fidelity.jsonl";
}

void print_table(const std::string& run, const RunComparison& comparison, const std::string& layout) {
  std::cout << str_cat("compare ", run, ": ", comparison.plan.model.name, " on ", comparison.plan.cluster.name, ", ",
                       layout, "\n");
  std::cout << "  field                     predicted      measured    error\n";
  for (const auto& f : comparison.fields) {
    const auto error = f.relative_error();
    std::cout << str_cat("  ", f.name, std::string(f.name.size() < 24 ? 24 - f.name.size() : 1, ' '), " ",
                         fixed(f.predicted, 6), "  ", fixed(f.measured, 6), "  ",
                         error ? fixed(100 * *error, 1) + "%" : std::string("-"), "\n");
  }
  if (const auto& profile = comparison.profile) {
    std::cout << str_cat(
        "  (kind_*: step ", profile->at("step").get<long long>(), " of rank ", profile->at("rank").get<long long>(),
        ", profiled: ", fixed(profile->at("step_time_s").get<double>(), 6), " s with the profiler on)\n");
  }
}

void run(const CompareOptions& o) {
  const fs::path dir = o.run;
  const fs::path log = o.log.empty() ? default_log() : fs::path(o.log);
  core::prepare_output_file(log);
  const RunComparison comparison = compare_run(dir, o.cluster);
  const Json fields = comparison.fields_json();
  const std::string layout = config_summary(comparison.plan.parallel);
  const std::string packing = comparison.padded ? "padded" : "packed";
  std::ofstream appended(log, std::ios::app);
  if (!appended) {
    throw core::RuntimeError(str_cat(log.string(), ": cannot open it to append: ", std::strerror(errno)));
  }
  appended << Json{{"run", fs::absolute(dir).string()},
                   {"model", comparison.plan.model.name},
                   {"cluster", comparison.plan.cluster.name},
                   {"layout", layout},
                   {"packing", packing},
                   {"fields", fields}}
                  .dump()
           << "\n";
  if (o.json) {
    print_json(
        {{"run", dir.string()}, {"layout", layout}, {"packing", packing}, {"fields", fields}, {"log", log.string()}});
    return;
  }
  print_table(dir.string(), comparison, layout);
  std::cout << "  (appended to " << log.string() << ")\n";
}

}  // namespace

void register_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  auto* cmd = app.add_subcommand("compare", "Predicted vs measured for a training run (step time, tokens/s, memory)");
  cmd->add_option("RUN_DIR", o->run, "The --out directory of cpt train")->required();
  cmd->add_option("--log", o->log,
                  "Fidelity log to append to (default: $CPT_FIDELITY_LOG or ~/.cache/cpt/fidelity.jsonl)");
  cmd->add_flag("--json", o->json, "Print {fields: {NAME: {predicted, measured, rel_err}}}");
  cmd->add_option("--cluster", o->cluster, "Predict on this profile (name or file) instead of the plan's");
  cmd->callback([o] { run(*o); });
}

}  // namespace cpt::cli
