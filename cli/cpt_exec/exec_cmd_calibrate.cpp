// cpt-exec calibrate-host | calibrate-comm: the measurements behind `cpt calibrate` (JSON on
// stdout; calibrate-comm from rank 0 of the ranks it starts).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/numeric_flags.h"
#include "cli/cpt_exec/exec_commands.h"
#include "cli/output.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/device.h"
#include "executor/dist/c10d_communicator.h"
#include "executor/dist/launch_info.h"
#include "executor/dist/local_launcher.h"
#include "executor/measure/calibration_probe.h"
#include "executor/measure/collective_probe.h"

namespace cpt::cli {

namespace {
std::string h_label(const torch::Device& device) {
  return device.is_cuda() ? "device" : "host";
}

// The host probes of `ranks` processes run in step (`cpt calibrate` starts one per rank, as `cpt
// train` shares the machine): before each measurement every process waits until all have finished
// the one before, so each runs while all the others run too (a process that started late, or
// whose last step ran long, would otherwise measure part of its grid on a quieter machine). Each
// writes the steps it has done to DIR/rank.R (-1: it failed, and the others stop waiting) and
// polls the others' files (1 ms sleeps). A process that finishes a step first sleeps until the
// others have, so the tail of a step runs on a slightly quieter machine.
class StepBarrier {
 public:
  StepBarrier(std::filesystem::path dir, int rank, int ranks, double seconds)
      : dir_(std::move(dir)), rank_(rank), ranks_(ranks), patience_s_(std::max(300.0, 4 * seconds)) {}
  void arrive(int step) const {
    if (ranks_ <= 1) return;
    core::write_file_atomic(file_of(rank_), std::to_string(step));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(patience_s_);
    for (int r = 0; r < ranks_; ++r) {
      for (;;) {
        std::ifstream in(file_of(r));
        int theirs = -2;
        if (in >> theirs && theirs == -1) {
          throw core::RuntimeError(core::str_cat("calibrate-host: process ", r, " of ", ranks_, " failed"));
        }
        if (theirs >= step) break;
        if (std::chrono::steady_clock::now() > deadline) {
          throw core::RuntimeError(core::str_cat("calibrate-host: process ", r, " of ", ranks_, " did not reach step ",
                                                 step, " within ", patience_s_, " s (", dir_.string(), ")"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  // Tells the others this process failed (they stop waiting for it).
  void fail() const noexcept {
    if (ranks_ <= 1) return;
    try {
      core::write_file_atomic(file_of(rank_), "-1");
    } catch (...) {  // the caller is already failing; the others time out instead
    }
  }

 private:
  [[nodiscard]] std::filesystem::path file_of(int r) const { return dir_ / ("rank." + std::to_string(r)); }
  std::filesystem::path dir_;
  int rank_, ranks_;
  double patience_s_;
};
struct CalibrateArgs {
  double seconds = 20;
  int threads = 0;
  int ranks = 2;
  double max_mib = 16;
  double seconds_per_point = 0.15;
  std::string device = "cpu";
  bool quiet = false;
  std::string together_dir;
  int together_rank = 0;
  int together_ranks = 1;
};

// calibrate-host: this process's measurements, in step with the others of --together-dir.
void calibrate_host(const CalibrateArgs& args) {
  if (args.threads > 0) at::set_num_threads(args.threads);
  const auto device = exec::pick_device(args.device);
  if (!args.together_dir.empty() && args.together_rank >= args.together_ranks) {
    throw core::ConfigError(core::str_cat("--together-rank: expected below --together-ranks (", args.together_ranks,
                                          "), got ", args.together_rank));
  }
  const StepBarrier barrier(args.together_dir, args.together_rank, args.together_dir.empty() ? 1 : args.together_ranks,
                            args.seconds);
  exec::HostMeasurements h;
  try {
    barrier.arrive(0);
    h = exec::measure_host(
        args.seconds,
        [&](int done, int total) {
          if (!args.quiet) std::cerr << "\rcalibrate: " << h_label(device) << " " << done << "/" << total << std::flush;
          barrier.arrive(done);
        },
        device);
  } catch (...) {
    barrier.fail();
    throw;
  }
  if (!args.quiet) std::cerr << "\n";
  h.cuda_devices = device.is_cuda() ? static_cast<int>(torch::cuda::device_count()) : 0;
  print_json(spec::to_json(h));
}

// What ranks lose to one another, measured on the CPU only (host GEMMs between and beside blocking
// calls; on a GPU the copy engines and SMs contend otherwise, the profile's defaults stand):
// the compute jitter's waits, compute beside an in-flight collective, and training-like work
// resuming from a blocking call. Nulls and an empty array on a GPU.
struct Interference {
  nlohmann::ordered_json sync_waits = nlohmann::ordered_json::array();
  nlohmann::ordered_json overlap;
  nlohmann::ordered_json resume;
};

Interference measure_interference(exec::Communicator& world, double seconds_per_point) {
  Interference out;
  for (const auto& w : exec::measure_sync_waits(world, std::max(1.5, 10 * seconds_per_point))) {
    out.sync_waits.push_back({{"segment_s", w.segment_s}, {"extra_wait_s", w.extra_s}, {"spread_s", w.spread_s}});
  }
  const auto o = exec::measure_overlap_slowdown(world, std::max(2.0, 10 * seconds_per_point));
  out.overlap = {{"bytes", o.bytes},       {"gemm_s", o.gemm_s},
                 {"comm_s", o.comm_s},     {"overlapped_s", o.overlapped_s},
                 {"slowdown", o.slowdown}, {"round_slowdowns", o.round_slowdowns}};
  const auto r = exec::measure_compute_after_calls(world, std::max(2.0, 10 * seconds_per_point));
  out.resume = {{"bytes", r.bytes},
                {"segment_s", r.segment_s},
                {"after_call_s", r.after_call_s},
                {"lost_per_call_s", r.lost_per_call_s},
                {"round_lost_s", r.round_lost_s}};
  return out;
}

// calibrate-comm: started without RANK, launches --nproc-per-node ranks of itself; each rank times
// the collectives, the executor's scalar all-reduce and, on the CPU, the interference; rank 0 prints.
void calibrate_comm(const CalibrateArgs& args) {
  if (std::getenv("RANK") == nullptr) {
    exec::LocalLaunch launch;
    launch.nproc_per_node = args.ranks;
    const int code =
        exec::run_local_ranks({"calibrate-comm", "--max-mib", std::to_string(args.max_mib), "--seconds-per-point",
                               std::to_string(args.seconds_per_point), "--device", args.device},
                              launch);
    if (code != 0) throw ExitWith{code};
    return;
  }
  const auto launch = exec::launch_info_from_env();
  const auto device =
      exec::pick_device(args.device, launch.local_rank, launch.local_world_size, launch.gpu_bound_per_task);
  // Ranks on one host share its cores.
  at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / launch.local_world_size));
  const auto timeout = std::chrono::seconds(120);
  const auto store = exec::JobStore::connect(launch, timeout);
  std::vector<int> all(static_cast<std::size_t>(launch.world_size));
  for (int r = 0; r < launch.world_size; ++r) all[static_cast<std::size_t>(r)] = r;
  auto world = exec::make_gloo_group(*store, "world", all, launch.rank, timeout, exec::gloo_transport_of(launch));
  if (device.is_cuda()) {
    world = exec::route_by_device(std::move(world), exec::make_nccl_group(*store, "world", all, launch.rank, timeout));
  }
  const auto samples = exec::measure_collectives(*world, args.max_mib * 1024 * 1024, args.seconds_per_point, device);
  // The executor's per-step scalar all-reduces (CPU tensors, Gloo).
  const double scalar_s = exec::measure_scalar_all_reduce(*world, std::max(0.5, args.seconds_per_point));
  const Interference interference =
      device.is_cuda() ? Interference{} : measure_interference(*world, args.seconds_per_point);
  if (launch.rank != 0) return;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& s : samples) {
    rows.push_back({{"op", s.op}, {"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
  }
  print_json({{"backend", device.is_cuda() ? "nccl" : "gloo"},
              {"ranks", launch.world_size},
              {"samples", rows},
              {"scalar_all_reduce", {{"ranks", launch.world_size}, {"bytes", 16}, {"seconds", scalar_s}}},
              {"sync_waits", interference.sync_waits},
              {"overlap", interference.overlap},
              {"resume", interference.resume}});
}

}  // namespace

void register_exec_calibrate_commands(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* host = app.add_subcommand(
      "calibrate-host",
      "Measure GEMMs, attention, cross-entropy, dispatch cost, memory bandwidth and AdamW on the local device (JSON)");
  host->add_option("--seconds", args->seconds, "Time budget")->check(CLI::Range(1.0, 600.0))->capture_default_str();
  host->add_option("--threads", args->threads, "Intra-op threads (0: LibTorch's default)")
      ->check(CLI::NonNegativeNumber);
  host->add_option("--device", args->device, "cpu, or cuda (the first CUDA device, bf16)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  host->add_flag("--quiet", args->quiet, "No progress on stderr");
  host->add_option("--together-dir", args->together_dir,
                   "Run each measurement in step with the other processes of --together-ranks (a shared directory)");
  host->add_option("--together-rank", args->together_rank, "This process's index among --together-ranks")
      ->check(CLI::NonNegativeNumber);
  host->add_option("--together-ranks", args->together_ranks, "Processes measuring together")
      ->check(cli::positive_number());
  host->callback([args] { calibrate_host(*args); });

  auto* comm = app.add_subcommand("calibrate-comm", "Time the executor's collectives over message sizes (JSON)");
  comm->add_option("--nproc-per-node", args->ranks, "Ranks to start on the local host")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  comm->add_option("--max-mib", args->max_mib, "Largest message")
      ->check(CLI::Range(0.01, 1024.0))
      ->capture_default_str();
  comm->add_option("--seconds-per-point", args->seconds_per_point, "Time per (op, size)")
      ->check(CLI::Range(0.01, 10.0))
      ->capture_default_str();
  comm->add_option("--device", args->device, "cpu (Gloo), or cuda (NCCL, one CUDA device per rank)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  comm->callback([args] { calibrate_comm(*args); });
}

}  // namespace cpt::cli
