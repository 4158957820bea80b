#include "costmodel/sim/chrome_trace.h"

#include <nlohmann/json.hpp>

#include "core/units.h"

namespace cpt::cost::sim {

core::Json chrome_trace(const SimulationResult& r) {
  core::Json events = core::Json::array();
  const int ranks = static_cast<int>(r.compute_busy_s.size());
  for (int p = 0; p < ranks; ++p) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", p}, {"args", {{"name", "pp rank " + std::to_string(p)}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", p}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", p}, {"tid", 1}, {"args", {{"name", "p2p"}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", p}, {"tid", 2}, {"args", {{"name", "collective"}}}});
  }
  for (const auto& i : r.intervals) {
    events.push_back({{"ph", "X"},
                      {"name", i.name},
                      {"pid", i.pp_rank},
                      {"tid", static_cast<int>(i.stream)},
                      {"ts", i.start_s * 1e6},
                      {"dur", (i.end_s - i.start_s) * 1e6}});
  }
  for (const auto& m : r.memory) {
    events.push_back({{"ph", "C"},
                      {"name", "memory"},
                      {"pid", m.pp_rank},
                      {"ts", m.time_s * 1e6},
                      {"args", {{"GiB", m.bytes / static_cast<double>(core::kGiB)}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace cpt::cost::sim
