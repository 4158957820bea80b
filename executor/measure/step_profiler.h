#pragma once
// Profiles one training step with LibTorch's Kineto profiler: every operator this rank dispatches
// (forward, the autograd engine's backward, the optimizer, the loss) and, as user scopes, the
// seconds it spends waiting in each communication group ("comm wait dp", timed_communicator.h).
//
// `cpt train --profile-step S` profiles step S on every rank and writes, per rank R,
//   OUT/profile/step_S.rank_R.trace.json  the Chrome trace (opens in Perfetto / chrome://tracing)
//   OUT/profile/step_S.rank_R.ops.json    the step's time by operator name (this header's StepProfile)
// which is what one needs to see where a layout's step time goes beside a single-process run
// (per-operator comparison).
//
// Contract: one StepProfiler alive at a time per process; it observes the thread that made it (the
// "stepping thread") and the threads LibTorch propagates its state to (the autograd engine's
// device threads, Gloo's workers): those land in StepProfile::other_threads. Asynchronous records
// (a posted send, open until waited for) stay in the trace but not in the aggregate. While the
// profiler is on each operator costs a few µs more, so the trainer leaves the profiled step out
// of measured.json's means (metrics.jsonl still lists it) and lines the ranks up after it.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cpt::exec {

// Seconds spent in operators of one name at top level: an event not inside another event of the
// same thread (aten::linear counts, the aten::addmm inside it does not; an autograd node counts
// under its own name, e.g. "autograd::engine::evaluate_function: MmBackward0").
struct OpTime {
  std::string name;
  std::int64_t calls = 0;
  double seconds = 0;
};

struct StepProfile {
  double span_s = 0;             // the stepping thread's first event's start to its last's end
  double top_level_s = 0;        // sum of by_name (≤ span_s)
  std::vector<OpTime> by_name;   // the stepping thread's top-level time by name, largest first
  // The stepping thread's own time (less its children's) by kind of work, op_kind.h's rule:
  // "gemm", "attention", "loss", "optimizer", "communication", "other"; sums to top_level_s.
  std::map<std::string, double> seconds_by_kind;
  // Every other thread's (the autograd engine's device threads on a GPU, the communication
  // libraries' workers where they record): work that may overlap the stepping thread's.
  std::vector<OpTime> other_threads;
};

nlohmann::json to_json(const StepProfile& p);
StepProfile step_profile_from_json(const nlohmann::json& j);

class StepProfiler {
 public:
  // Starts profiling. `cuda`: also record the GPU's kernels (a CUDA device's step).
  explicit StepProfiler(bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  // Stops, writes the Chrome trace to `trace_path` and returns the aggregate. Call once.
  StepProfile finish(const std::filesystem::path& trace_path);

 private:
  bool running_ = false;
  std::uint64_t thread_ = 0;  // at::RecordFunction's id of the thread that made the profiler
};

// The aggregate of events given as (thread, start ns, end ns, name), in any order, where
// `stepping_thread` made the profiler: exposed for the unit test of the nesting rule.
struct ProfiledEvent {
  std::uint64_t thread = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::string name;
};
StepProfile aggregate_top_level(std::vector<ProfiledEvent> events, std::uint64_t stepping_thread);

}  // namespace cpt::exec
