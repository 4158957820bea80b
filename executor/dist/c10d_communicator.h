#pragma once
// Communicators over LibTorch's c10d: one TCPStore per job (rank 0 serves it), one PrefixStore per
// group ("dp/3", "tp/0", ...), ProcessGroupGloo for CPU tensors and ProcessGroupNCCL for CUDA
// tensors (a run on GPUs routes each operation by its tensor's device: route_by_device). The only
// file that includes c10d headers is c10d_communicator.cpp.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "executor/dist/communicator.h"
#include "executor/dist/launch_info.h"

namespace cpt::exec {

// The job's rendezvous. connect() blocks until every rank has joined (or the timeout passes:
// RuntimeError naming MASTER_ADDR:MASTER_PORT and how many joined).
class JobStore {
 public:
  static std::shared_ptr<JobStore> connect(const LaunchInfo& launch, std::chrono::seconds timeout);
  ~JobStore();
  struct Impl;
  [[nodiscard]] Impl& impl() const { return *impl_; }

 private:
  explicit JobStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The group `name` of the global `ranks` (in group order); this process is global rank `self`,
// which must be one of them. COLLECTIVE over those ranks: each of them must create the group with
// the same name and ranks. Operations slower than `timeout` fail with RuntimeError.
// Where Gloo's transport listens: the named interface (GLOO_SOCKET_IFNAME), else `host` (a one-node
// job's --master-addr: loopback by default, so nothing listens beyond the machine), else Gloo's
// default device (the address the host name resolves to, for jobs across nodes).
struct GlooTransport {
  std::string interface;
  std::string host;
};

// The transport for `launch`: its GLOO_SOCKET_IFNAME, else (one node) its --master-addr.
GlooTransport gloo_transport_of(const LaunchInfo& launch);

std::unique_ptr<Communicator> make_gloo_group(const JobStore& store, const std::string& name,
                                              const std::vector<int>& ranks, int self, std::chrono::seconds timeout,
                                              const GlooTransport& transport = {});

// The group `name` over NCCL, as make_gloo_group; for CUDA tensors on the current CUDA device
// (set it to the rank's device first). Groups of one are solo communicators. ConfigError when
// LibTorch has no CUDA; RuntimeError when NCCL fails to start.
std::unique_ptr<Communicator> make_nccl_group(const JobStore& store, const std::string& name,
                                              const std::vector<int>& ranks, int self, std::chrono::seconds timeout);

// One communicator over two groups of the same ranks: operations on CUDA tensors go to `cuda`, on
// CPU tensors to `cpu`, barriers to `cpu`; rank, size and name are `cpu`'s. REQUIRES: same rank and
// size.
std::unique_ptr<Communicator> route_by_device(std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> cuda);

}  // namespace cpt::exec
