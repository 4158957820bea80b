#include "executor/measure/step_profiler.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/measure/op_kind.h"
#include "spec/work_kinds.h"

namespace cpt::exec {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

namespace {

std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (cuda) a.insert(ActivityType::CUDA);
  return a;
}

std::vector<OpTime> sorted(std::map<std::string, OpTime>& by) {
  std::vector<OpTime> out;
  for (auto& [name, t] : by) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  return out;
}

// The stepping thread's events, sorted by start and the longer first, split by kind (op_kind.h):
// each event's own time to the kind it falls in, its enclosing event losing that time.
std::map<std::string, double> seconds_by_kind(const std::vector<const ProfiledEvent*>& events) {
  struct Open {
    std::uint64_t end_ns;
    std::string_view region;    // the kind its children inherit (empty: none)
    std::string_view credited;  // the kind its duration was added to
  };
  std::map<std::string, double> by;
  for (const auto k : spec::kWorkKinds) by[std::string(k)] = 0;
  std::vector<Open> stack;
  for (const auto* e : events) {
    // Enclosing events are those that contain this one whole (an event that overlaps without
    // containing it is not its parent).
    while (!stack.empty() && (stack.back().end_ns <= e->start_ns || stack.back().end_ns < e->end_ns)) stack.pop_back();
    const std::string_view own = op_kind(e->name);
    const std::string_view region = stack.empty() ? std::string_view() : stack.back().region;
    const std::string_view kind = own == spec::kKindCommunication ? own : !region.empty() ? region : own;
    const std::string_view credited = kind.empty() ? spec::kKindOther : kind;
    const double s = static_cast<double>(e->end_ns - e->start_ns) * 1e-9;
    by[std::string(credited)] += s;
    if (!stack.empty()) by[std::string(stack.back().credited)] -= s;  // the parent's own time excludes it
    stack.push_back({e->end_ns, kind, credited});
  }
  return by;
}

}  // namespace

StepProfile aggregate_top_level(std::vector<ProfiledEvent> events, std::uint64_t stepping_thread) {
  StepProfile p;
  if (events.empty()) return p;
  // Per thread, by start and then the longer first: an event that starts before the previous
  // top-level event ends lies inside it (RecordFunction scopes nest properly on one thread).
  std::sort(events.begin(), events.end(), [](const ProfiledEvent& a, const ProfiledEvent& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::map<std::string, OpTime> mine, others;
  std::vector<const ProfiledEvent*> stepping;
  std::uint64_t first = UINT64_MAX, last = 0;
  std::uint64_t thread = events.front().thread, open_until = 0;
  for (const auto& e : events) {
    if (e.thread == stepping_thread) {
      first = std::min(first, e.start_ns);
      last = std::max(last, e.end_ns);
      stepping.push_back(&e);
    }
    if (e.thread != thread) {
      thread = e.thread;
      open_until = 0;
    }
    if (e.start_ns < open_until) continue;  // nested inside the current top-level event
    open_until = e.end_ns;
    const bool mine_thread = e.thread == stepping_thread;
    auto& t = (mine_thread ? mine : others)[e.name];
    t.name = e.name;
    ++t.calls;
    const double s = static_cast<double>(e.end_ns - e.start_ns) * 1e-9;
    t.seconds += s;
    if (mine_thread) p.top_level_s += s;
  }
  p.span_s = last > first ? static_cast<double>(last - first) * 1e-9 : 0.0;
  p.by_name = sorted(mine);
  p.seconds_by_kind = seconds_by_kind(stepping);
  p.other_threads = sorted(others);
  return p;
}

namespace {

nlohmann::json ops_json(const std::vector<OpTime>& ops) {
  auto out = nlohmann::json::array();
  for (const auto& t : ops) out.push_back({{"name", t.name}, {"calls", t.calls}, {"seconds", t.seconds}});
  return out;
}

std::vector<OpTime> ops_from_json(const nlohmann::json& j) {
  std::vector<OpTime> out;
  for (const auto& t : j) {
    out.push_back({t.at("name").get<std::string>(), t.at("calls").get<std::int64_t>(), t.at("seconds").get<double>()});
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const StepProfile& p) {
  return {{"span_s", p.span_s},
          {"top_level_s", p.top_level_s},
          {"seconds_by_kind", p.seconds_by_kind},
          {"by_name", ops_json(p.by_name)},
          {"other_threads", ops_json(p.other_threads)}};
}

StepProfile step_profile_from_json(const nlohmann::json& j) {
  StepProfile p;
  p.span_s = j.at("span_s").get<double>();
  p.top_level_s = j.at("top_level_s").get<double>();
  p.seconds_by_kind = j.at("seconds_by_kind").get<std::map<std::string, double>>();
  p.by_name = ops_from_json(j.at("by_name"));
  p.other_threads = ops_from_json(j.at("other_threads"));
  return p;
}

StepProfiler::StepProfiler(bool cuda) {
  if (prof::isProfilerEnabledInMainThread()) {
    throw core::RuntimeError("step profiler: another LibTorch profiler is already running in this process");
  }
  const ProfilerConfig config(ProfilerState::KINETO);
  const auto a = activities(cuda);
  prof::prepareProfiler(config, a);
  prof::enableProfiler(config, a);
  thread_ = at::RecordFunction::currentThreadId();
  running_ = true;
}

StepProfiler::~StepProfiler() {
  if (!running_) return;
  try {
    (void)prof::disableProfiler();
  } catch (...) {  // unwinding already: the profile is lost, the run goes on
  }
}

StepProfile StepProfiler::finish(const std::filesystem::path& trace_path) {
  if (!running_) throw core::RuntimeError("step profiler: finish() called twice");
  running_ = false;
  auto result = prof::disableProfiler();
  std::vector<ProfiledEvent> host;
  host.reserve(result->events().size());
  for (const auto& e : result->events()) {
    // Host-side events only: a GPU's kernels run asynchronously and belong to the trace, not to
    // the host's per-operator time. Asynchronous records too (c10d's "gloo:send" opens when a
    // send is posted and closes when it is waited for, across everything in between): they do
    // not nest.
    if (e.deviceType() != c10::DeviceType::CPU || e.isAsync() || e.endNs() < e.startNs()) continue;
    host.push_back({e.startThreadId(), e.startNs(), e.endNs(), e.name()});
  }
  std::filesystem::create_directories(trace_path.parent_path());
  result->save(trace_path.string());
  return aggregate_top_level(std::move(host), thread_);
}

}  // namespace cpt::exec
