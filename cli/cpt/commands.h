#pragma once
// One registration function per subcommand (CLI11's subcom_in_files pattern): each cmd_*.cpp
// declares its options struct, adds its subcommand to the app and runs it in the callback.
// Errors are thrown as core::Error and mapped to exit codes by main.cpp.

namespace CLI {
class App;
}

namespace cpt::cli {

void register_models_command(CLI::App& app);
void register_profiles_command(CLI::App& app);
void register_run_command(CLI::App& app);
void register_calibrate_command(CLI::App& app);
void register_compare_command(CLI::App& app);
void register_validate_command(CLI::App& app);
void register_estimate_command(CLI::App& app);
void register_plan_command(CLI::App& app);
void register_whatif_command(CLI::App& app);
void register_advise_command(CLI::App& app);
void register_simulate_command(CLI::App& app);
void register_forecast_command(CLI::App& app);
// A subcommand whose implementation is not built yet: it accepts any arguments, says what is
// missing and which issue builds it, and exits 3.
// A subcommand carried out by cpt-exec with the same arguments.
void register_executor_command(CLI::App& app, const char* name, const char* description);

}  // namespace cpt::cli
