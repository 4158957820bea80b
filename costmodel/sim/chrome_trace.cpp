#include "costmodel/sim/chrome_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/units.h"

namespace cpt::cost::sim {

core::Json chrome_trace(const SimulationResult& r) {
  core::Json events = core::Json::array();
  const int ranks = static_cast<int>(r.compute_busy_s.size());
  int replicas = 1;
  for (const auto& i : r.intervals) replicas = std::max(replicas, i.replica + 1);
  // One process per (replica, pipeline rank); named "pp rank r" in the symmetric mode.
  auto pid = [ranks](int replica, int pp_rank) { return replica * ranks + pp_rank; };
  for (int d = 0; d < replicas; ++d) {
    for (int p = 0; p < ranks; ++p) {
      const auto name = replicas > 1 ? "replica " + std::to_string(d) + ", pp rank " + std::to_string(p)
                                     : "pp rank " + std::to_string(p);
      const int id = pid(d, p);
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", id}, {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", id}, {"tid", 0}, {"args", {{"name", "compute"}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", id}, {"tid", 1}, {"args", {{"name", "p2p"}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", id}, {"tid", 2}, {"args", {{"name", "collective"}}}});
    }
  }
  for (const auto& i : r.intervals) {
    events.push_back({{"ph", "X"},
                      {"name", i.name},
                      {"pid", pid(i.replica, i.pp_rank)},
                      {"tid", static_cast<int>(i.stream)},
                      {"ts", i.start_s * 1e6},
                      {"dur", (i.end_s - i.start_s) * 1e6}});
  }
  for (const auto& m : r.memory) {
    events.push_back({{"ph", "C"},
                      {"name", "memory"},
                      {"pid", pid(m.replica, m.pp_rank)},
                      {"ts", m.time_s * 1e6},
                      {"args", {{"GiB", m.bytes / static_cast<double>(core::kGiB)}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace cpt::cost::sim
