// cpt-exec: the LibTorch side of cpt, started by `cpt` for the subcommands that train or measure
// (cli/executor_process.h says why it is a separate binary): info, train, data, checkpoint. Exit codes as for `cpt`
// (core/error.h).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <nlohmann/json.hpp>

#include "cli/cpt_exec/exec_commands.h"
#include "cli/numeric_flags.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/dist/rank_board.h"
#include "executor/measure/calibration_probe.h"
#include "executor/host_memory.h"
#include "executor/measure/host_probe.h"
#include "executor/torch_compat.h"

namespace {

// A rank of cpt's launcher leaves its error on the ranks' status board, and the launcher prints it
// with the others', root cause first (executor/dist/failure_report.h); any other process prints it.
// Returns `exit_code`, the code the error means.
int report_error(const std::string& program, const std::string& message, int exit_code) {
  if (!cpt::exec::RankReporter::of_this_process().record_failure(message, exit_code))
    std::cerr << program << ": error: " << message << "\n";
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cpt;
  (void)exec::keep_freed_host_memory();  // before any thread or large allocation (host_memory.h)
  // LibTorch's failed enforces (a CPU allocation the machine refuses among them) are exceptions
  // the handlers below turn into one line and an exit code, never an abort.
  FLAGS_caffe2_use_fatal_for_enforce = false;
  // Started by `cpt train|data|checkpoint`, it answers as `cpt` (usage lines, error prefixes).
  const char* invoked_as = std::getenv("CPT_EXEC_INVOKED_AS");
  const std::string name = invoked_as != nullptr ? invoked_as : "cpt-exec";
  CLI::App app("cpt-exec: the LibTorch executor of cpt (normally started by `cpt`)", name);
  app.require_subcommand(1);
  bool json = false;
  auto* info = app.add_subcommand("info", "The LibTorch this executor was built with, and a smoke computation");
  info->add_flag("--json", json, "Print JSON");
  info->callback([&] {
    const auto b = exec::torch_build_info();
    const bool smoke_ok = exec::torch_smoke_compute() == 54.0;
    if (json) {
      cli::print_json({{"torch_version", b.torch_version},
                       {"cuda_compiled", b.cuda_compiled},
                       {"cuda_devices", b.cuda_devices},
                       {"nccl_version", b.nccl_version},
                       {"cpu_threads", b.cpu_threads},
                       {"smoke_ok", smoke_ok}});
      return;
    }
    std::cout << core::str_cat("LibTorch ", b.torch_version, ", ", b.cpu_threads, " CPU threads",
                               b.cuda_compiled ? core::str_cat(", CUDA build with NCCL ", b.nccl_version, " (",
                                                               b.cuda_devices, " CUDA devices visible)")
                                               : std::string(", CPU build"),
                               "; smoke matmul ", smoke_ok ? "ok" : "WRONG")
              << "\n";
  });
  auto* probe = app.add_subcommand("probe-host", "Measure this machine: fp32 GEMM throughput, memory bandwidth (JSON)");
  double probe_seconds = 2.0;
  probe->add_option("--seconds", probe_seconds, "Time budget")->check(CLI::Range(0.1, 60.0))->capture_default_str();
  probe->callback([&] {
    const auto p = exec::probe_host(probe_seconds);
    nlohmann::ordered_json gemm = nlohmann::ordered_json::array();
    for (const auto& g : p.gemm) gemm.push_back({{"gflop", g.gflop}, {"flops_per_s", g.flops_per_s}});
    cli::print_json({{"cores", p.cores},
                     {"threads", p.threads},
                     {"memory_bytes", p.memory_bytes},
                     {"copy_bytes_per_s", p.copy_bytes_per_s},
                     {"peak_flops_per_s", p.peak_flops_per_s()},
                     {"seconds_per_dispatched_op", exec::measure_dispatch_cost(0.1)},
                     {"gemm", gemm}});
  });
  cli::register_exec_train_command(app);
  cli::register_exec_data_command(app);
  cli::register_exec_doctor_command(app);
  cli::register_exec_calibrate_commands(app);
  cli::register_exec_checkpoint_command(app);
  try {
    app.parse(argc, argv);
    return core::kExitOk;
  } catch (const cli::ExitWith& e) {
    return e.code;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << name << ": error: " << cli::parse_error_message(e) << "\n";
    return core::kExitBadInput;
  } catch (const core::Error& e) {
    return report_error(name, e.what(), e.exit_code());
  } catch (const c10::OutOfMemoryError& e) {
    return report_error(name, core::str_cat("out of device memory: ", e.what_without_backtrace()), core::kExitRuntime);
  } catch (const c10::Error& e) {
    // LibTorch's CPU allocator fails with a plain enforce: the machine's memory, not a cpt bug.
    const std::string what = e.what_without_backtrace();
    if (what.find("can't allocate memory") != std::string::npos) {
      return report_error(name, core::str_cat("out of host memory: ", what), core::kExitRuntime);
    }
    return report_error(name, core::str_cat("internal error in LibTorch: ", what), core::kExitInternal);
  } catch (const std::filesystem::filesystem_error& e) {
    return report_error(name, e.what(), core::kExitRuntime);  // the environment's failure, not cpt's
  } catch (const std::exception& e) {
    return report_error(name, core::str_cat("internal error: ", e.what()), core::kExitInternal);
  }
}
