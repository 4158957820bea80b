#pragma once
// A run's measurements, taken around each step and gathered into the typed record of
// spec/measured_run.h (OUT/measured.json) at the end. Each rank meters itself; finish() is
// collective over the world group and only rank 0's result is complete.
//
//   RunMeter meter(*groups.clocks, device.is_cpu());
//   while (...) {
//     meter.begin_step(step == first_step);
//     ... the step ...
//     meter.end_step(seconds, tokens, /*timed=*/step > first_step && !profiled);
//   }
//   spec::save_measured_run(out / "measured.json", meter.finish(facts, *groups.world, layout));
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/dist/communicator.h"
#include "executor/dist/process_groups.h"
#include "executor/measure/op_counter.h"
#include "executor/train/step_optimizer.h"
#include "spec/measured_run.h"
#include "spec/rank_layout.h"

namespace cpt::exec {

// What the record needs that the meter does not see.
struct RunFacts {
  std::string device;      // Device::str()
  std::int64_t steps = 0;  // trained by this invocation
  std::int64_t skipped_steps = 0;
  double final_loss = 0;
  std::int64_t dp_bucket_bytes = 0;
  bool padded = false;                 // TRAIN.json's packing is "padded"
  ModelStateBytes state;               // this rank's, after the last step
  RecipeBytes recipe;                  // this rank's teacher and EWC storage
  std::int64_t peak_memory_bytes = 0;  // this rank's
};

class RunMeter {
 public:
  // `clocks` (this rank's timed groups) must outlive the meter. `counts_dispatch`: count the first
  // step's operators and calls (on the CPU: on a GPU the autograd engine runs backward on its device
  // thread, which the counter does not observe).
  RunMeter(const CommClocks& clocks, bool counts_dispatch);

  // Before a step. The first step of the process is counted, not timed: observing operators costs
  // time, and it pays one-off allocations.
  void begin_step(bool first_of_process);
  // After it: its wall time and tokens; `timed` says whether it enters the means (not the first of
  // the process, not a profiled one).
  void end_step(double seconds, std::int64_t tokens, bool timed);

  // Tokens per second over the timed steps (0 before any).
  [[nodiscard]] double tokens_per_s() const;

  // Collective over `world`: every rank's parts, memory and counts gathered into rank 0's record.
  spec::MeasuredRun finish(const RunFacts& facts, Communicator& world, const spec::RankLayout& layout) const;

 private:
  [[nodiscard]] std::array<double, 5> waits_now() const;  // tp, cp, dp, pp, ep seconds so far

  const CommClocks& clocks_;
  bool counts_dispatch_;
  std::optional<OpCounter> op_counter_;
  std::optional<spec::MeasuredDispatch> first_step_dispatch_;
  std::array<std::int64_t, 5> calls_at_start_{};
  std::array<std::int64_t, 5> bytes_at_start_{};
  std::array<double, 5> waits_at_start_{};
  std::array<double, 5> timed_waits_{};  // summed over the timed steps
  std::vector<double> timed_seconds_;
  std::int64_t timed_tokens_ = 0;
};

}  // namespace cpt::exec
