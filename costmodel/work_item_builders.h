#pragma once
// The step inventory's entries as its producers build them (step_inventory.cpp, expert_work.cpp).
#include "core/units.h"
#include "costmodel/step_inventory.h"

namespace cpt::cost {

// One operation per call, each paying one overhead.
inline WorkItem calls_of(WorkPass pass, WorkScope scope, CommGroup group, WorkKind kind, core::Bytes bytes,
                         double calls, double kernels_per_call, Exposure exposure = Exposure::kBlocking) {
  return {pass,     scope,
          group,    kind,
          exposure, bytes,
          calls,    calls,
          calls,    calls * kernels_per_call,
          false,    exposure == Exposure::kBlocking};
}

inline WorkItem waiting(WorkItem item) {
  item.waits_for_slowest = true;
  return item;
}

}  // namespace cpt::cost
