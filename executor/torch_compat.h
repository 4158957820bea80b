#pragma once
// The LibTorch this executor was built against, and the version switches that are not c10d's
// (those live in c10d_communicator.cpp only; see docs/architecture.md). This header is
// LibTorch-free so that the CLI can report the build without including torch.

#include <string>

namespace cpt::exec {

struct TorchBuildInfo {
  std::string torch_version;  // e.g. "2.11.0", from torch/version.h
  bool cuda_compiled = false; // LibTorch is a CUDA build and cpt compiled its CUDA/NCCL paths
  int cuda_devices = 0;       // CUDA devices visible now (0 on CPU-only machines)
  std::string nccl_version;   // "" unless cuda_compiled
  int cpu_threads = 0;        // intra-op threads LibTorch will use
};

// Queries LibTorch (and CUDA/NCCL when compiled in). Never throws on a machine without a GPU.
TorchBuildInfo torch_build_info();

// A tiny CPU computation through LibTorch (a 2x2 matmul), returning the sum of the result: proves
// that the library links and runs. [[1,2],[3,4]] @ [[1,2],[3,4]] = [[7,10],[15,22]]: sum 54.
double torch_smoke_compute();

}  // namespace cpt::exec
