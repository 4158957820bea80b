// cpt doctor RUN_DIR [--json]: what to check when the loss does not fall (executor/diagnose/run_doctor.h).
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cpt_exec/exec_commands.h"
#include "cli/output.h"
#include "core/str_cat.h"
#include "executor/diagnose/run_doctor.h"

namespace cpt::cli {

void register_exec_doctor_command(CLI::App& app) {
  struct Args {
    std::string run;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("doctor", "Diagnose a training run: loss, learning rate, gradients, data, start");
  cmd->add_option("RUN_DIR", args->run, "The --out directory of cpt train")->required();
  cmd->add_flag("--json", args->json, "Print {checks: [{check, verdict, detail, suggestion}], counts}");
  cmd->callback([args] {
    const auto findings = exec::diagnose_run(args->run);
    std::map<std::string, int> counts{{"ok", 0}, {"warn", 0}, {"FAIL", 0}};
    for (const auto& f : findings) ++counts[exec::to_string(f.verdict)];
    if (args->json) {
      nlohmann::ordered_json checks = nlohmann::ordered_json::array();
      for (const auto& f : findings) {
        checks.push_back({{"check", f.check},
                          {"verdict", f.verdict == exec::Verdict::kOk     ? "ok"
                                      : f.verdict == exec::Verdict::kWarn ? "warn"
                                                                          : "fail"},
                          {"detail", f.detail},
                          {"suggestion", f.suggestion}});
      }
      print_json({{"run", args->run},
                  {"checks", checks},
                  {"counts", {{"ok", counts["ok"]}, {"warn", counts["warn"]}, {"fail", counts["FAIL"]}}}});
      return;
    }
    std::cout << "doctor: " << args->run << "\n";
    for (const auto& f : findings) {
      std::cout << core::str_cat("  [", exec::to_string(f.verdict), "] ", f.check, ": ", f.detail, "\n");
      if (!f.suggestion.empty()) std::cout << "         -> " << f.suggestion << "\n";
    }
    std::cout << core::str_cat(counts["ok"], " ok, ", counts["warn"], " warnings, ", counts["FAIL"], " failures\n");
  });
}

}  // namespace cpt::cli
