#pragma once
// A simulated step as a Chrome trace (chrome://tracing, https://ui.perfetto.dev): one process per
// pipeline rank, one thread per stream (compute, p2p, collective), complete events ("ph": "X", microseconds)
// for every task and a counter track ("ph": "C") for each rank's memory in GiB.

#include "core/json_reader.h"
#include "costmodel/sim/step_simulator.h"

namespace cpt::cost::sim {

core::Json chrome_trace(const SimulationResult& result);

}  // namespace cpt::cost::sim
