#pragma once
// A quick measurement of the machine the executor runs on, for planning on it (`cpt run`): fp32
// GEMM throughput at several sizes (LibTorch's kernels, all intra-op threads), memory copy
// bandwidth, cores and memory. A snapshot, not a calibration: `cpt calibrate` fits the
// cost model to measured runs.
#include <cstdint>
#include <vector>

namespace cpt::exec {

struct GemmSample {
  double gflop = 0;            // per call (2·n³)
  double flops_per_s = 0;
};

struct HostProbe {
  int cores = 0;
  int threads = 0;             // LibTorch intra-op threads used for the GEMMs
  double memory_bytes = 0;     // physical memory
  double copy_bytes_per_s = 0; // read + write of a large tensor copy, counted once
  std::vector<GemmSample> gemm;
  [[nodiscard]] double peak_flops_per_s() const;
};

// Takes about `seconds` in total.
HostProbe probe_host(double seconds = 2.0);

}  // namespace cpt::exec
