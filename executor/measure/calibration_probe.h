#pragma once
// What `cpt calibrate --device cpu` measures through LibTorch, for costmodel/calibration_fit.h:
// fp32 GEMMs over a grid of training-like shapes, memory bandwidth (a large copy), the fused
// AdamW step, and the collectives of the executor's own c10d backend over message sizes.
#include <cstdint>
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // one [m, k] x [k, n] product
  [[nodiscard]] double flop() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

struct HostMeasurements {
  int cores = 0;
  int threads = 0;             // intra-op threads the measurements used
  double memory_bytes = 0;
  std::vector<GemmMeasurement> gemm;
  double copy_bytes_per_s = 0;      // read + write, counted once each
  double adamw_params_per_s = 0;    // fused AdamW on fp32 parameters
};

// About `seconds` in total; `progress(done, total)` after each measurement.
HostMeasurements measure_host(double seconds, const std::function<void(int, int)>& progress);

struct CommMeasurement {
  std::string op;      // all_reduce, all_gather, reduce_scatter, send_recv
  int ranks = 0;
  double bytes = 0;    // the full buffer (all_gather: the gathered result)
  double seconds = 0;  // one call, the slowest rank's mean
};

// COLLECTIVE over `world`: every op at every size in [4 KiB, max_bytes], ×4 apart, each timed
// for about `seconds_per_point`; every rank returns the same list.
std::vector<CommMeasurement> measure_collectives(Communicator& world, double max_bytes, double seconds_per_point);

}  // namespace cpt::exec
