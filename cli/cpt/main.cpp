// cpt: plan, simulate and run distributed continual pre-training of LLaMA-style models.
//
// Exit codes (core/error.h): 0 ok, 1 internal error (a bug), 2 bad input, 3 runtime failure.
// Every error is one line on stderr: "cpt: error: <message>".
#include <filesystem>
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <algorithm>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cpt/commands.h"
#include "cli/executor_process.h"
#include "cli/numeric_flags.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/log.h"
#include "core/version.h"

namespace {

int fail(int code, const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n') c = ' ';  // the contract is one line
  }
  std::cerr << "cpt: error: " << line << "\n";
  return code;
}

// "unknown flag --modle (did you mean --model?)" for the first flag a parsed subcommand did not
// take; none when every flag was known. CLI11 checks required flags before unknown ones, so a
// misspelt required flag would otherwise read as a missing one.
std::optional<std::string> unknown_flag(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const std::string& word : sub->remaining()) {
      if (word.rfind("--", 0) != 0) continue;
      const std::string flag = word.substr(0, word.find('='));
      std::vector<std::string> names;
      for (const CLI::Option* option : sub->get_options()) {
        for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
      }
      const auto hint = cpt::core::closest_match(flag, names);
      return "unknown flag " + flag + " for `cpt " + sub->get_name() + "`" +
             (hint.empty() ? std::string() : " (did you mean " + hint + "?)");
    }
  }
  return std::nullopt;
}

// Every subcommand's --out: an empty path would write nothing (or fail late, in the filesystem).
void refuse_empty_out(CLI::App& app) {
  const CLI::Validator non_empty(
      [](const std::string& path) {
        return path.empty() ? std::string("expected a directory path, got an empty string") : std::string();
      },
      "PATH", "non-empty path");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* option : sub->get_options([](CLI::Option* o) { return o->check_lname("out"); })) {
      option->check(non_empty);
    }
    refuse_empty_out(*sub);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cpt;
  // For the executor processes it starts: LibTorch's Kineto profiler (`cpt train --profile-step`)
  // reads its log level when LibTorch loads, and on a machine without a GPU logs an ERROR line for
  // the GPUs it did not find. Quiet (5 is above its highest level; 4 still prints errors) unless
  // the user chose a level. Set here, before any fork, and inherited.
  ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  CLI::App app("cpt: plan, simulate and run distributed continual pre-training of LLaMA-style models", "cpt");
  app.set_version_flag("--version", std::string(core::kVersion) + "+g" + core::kGitSha +
                                        (core::kBuiltWithTorch ? std::string(" (LibTorch ") + core::kTorchVersion + ")"
                                                               : std::string(" (no executor)")));
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")->capture_default_str();
  app.parse_complete_callback([&] { core::set_log_level(core::parse_log_level(log_level, "--log-level")); });
  app.require_subcommand(1);
  app.footer("Run `cpt SUBCOMMAND --help` for the options of each subcommand.");

  // In the order of the user's journey: decide, check, replay, do, measure; then the catalogs.
  cli::register_plan_command(app);
  cli::register_whatif_command(app);
  cli::register_estimate_command(app);
  cli::register_simulate_command(app);
  cli::register_executor_command(app, "train", "Run the training job a plan describes (cpt train --help)");
  cli::register_run_command(app);
  cli::register_calibrate_command(app);
  cli::register_compare_command(app);
  cli::register_forecast_command(app);
  cli::register_validate_command(app);
  cli::register_executor_command(app, "data", "Train tokenizers; prepare token shards from text, directories or JSONL");
  cli::register_executor_command(app, "checkpoint",
                                 "Verify checkpoints; export to and import from Hugging Face format");
  cli::register_executor_command(app, "doctor", "Diagnose a training run: loss, learning rate, gradients, data, start");
  cli::register_advise_command(app);
  cli::register_models_command(app);
  cli::register_profiles_command(app);
  refuse_empty_out(app);

  try {
    // CLI11 reports an unknown first word as "a subcommand is required"; name it instead.
    if (argc > 1 && argv[1][0] != '-') {
      std::vector<std::string> names;
      for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        names.push_back(sub->get_name());
      if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
        const auto hint = core::closest_match(argv[1], names);
        std::string message = std::string("unknown subcommand \"") + argv[1] + "\"";
        if (!hint.empty()) message += " (did you mean \"" + hint + "\"?)";
        return fail(core::kExitBadInput, message + " (see `cpt --help`)");
      }
    }
    app.parse(argc, argv);
    return core::kExitOk;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (const auto typo = unknown_flag(app)) return fail(core::kExitBadInput, *typo + " (see `cpt --help`)");
    return fail(core::kExitBadInput, cli::parse_error_message(e) + " (see `cpt --help`)");
  } catch (const cli::StepRefusedInput&) {
    return core::kExitBadInput;  // the step's own line is the error
  } catch (const core::Error& e) {
    return fail(e.exit_code(), e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(core::kExitRuntime, e.what());  // the environment's failure, not cpt's
  } catch (const std::exception& e) {
    return fail(core::kExitInternal, std::string("internal error: ") + e.what());
  }
}
