// The one translation unit that includes c10d. Gloo's headers come from Debian's libgloo-dev; the
// symbols are LibTorch's own (libtorch_cpu), whose ProcessGroupGloo.hpp compiles only with
// USE_C10D_GLOO defined (the precompiled <torch/torch.h> does not depend on it). ProcessGroupNCCL
// (libtorch_cuda) is compiled in when LibTorch is a CUDA build (CPT_EXECUTOR_CUDA).
#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef CPT_EXECUTOR_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/dist/c10d_communicator.h"
#include "executor/dist/listening_socket.h"
#include "executor/dist/rank_board.h"

namespace cpt::exec {

using core::str_cat;

namespace {
// c10d messages can run over several lines; cpt's errors are one line.
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}
}  // namespace

struct JobStore::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::string where;
};

JobStore::JobStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobStore::~JobStore() = default;

std::shared_ptr<JobStore> JobStore::connect(const LaunchInfo& launch, std::chrono::seconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->where = str_cat(launch.master_addr, ":", launch.master_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(launch.master_port);
  o.isServer = launch.rank == 0 && !launch.agent_hosts_store;
  o.numWorkers = static_cast<std::size_t>(launch.world_size);
  o.waitWorkers = true;
  o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    // Rank 0 serves the store on --master-addr alone (listening_socket.h).
    if (o.isServer) o.masterListenFd = listen_on(launch.master_addr, launch.master_port);
    impl->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, o);
    if (launch.agent_hosts_store) {
      impl->store =
          c10::make_intrusive<c10d::PrefixStore>(str_cat("/worker/attempt_", launch.restart_count), impl->store);
    }
  } catch (const c10::Error& e) {
    RankReporter::of_this_process().note_collective_failure();  // waiting for the others, not its own fault
    throw core::RuntimeError(str_cat("rank ", launch.rank, ": rendezvous at ", impl->where, " failed (",
                                     launch.world_size, " ranks expected, timeout ", timeout.count(),
                                     " s): ", first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    RankReporter::of_this_process().note_collective_failure();
    throw core::RuntimeError(str_cat("rank ", launch.rank, ": rendezvous at ", impl->where, " failed (",
                                     launch.world_size, " ranks expected, timeout ", timeout.count(),
                                     " s): ", first_line(e.what())));
  }
  return std::shared_ptr<JobStore>(new JobStore(std::move(impl)));
}

namespace {

// A c10d Work. Gloo's wait() blocks until the operation is done; NCCL's orders the current CUDA
// stream after it and returns (its timeout is the NCCL watchdog's, which ends the process).
class C10dHandle : public CommHandle {
 public:
  C10dHandle(c10::intrusive_ptr<c10d::Work> work, std::string what) : work_(std::move(work)), what_(std::move(what)) {}
  void wait() override {
    RankReporter::of_this_process().note_waiting(true);
    try {
      work_->wait();
    } catch (const c10::Error& e) {
      RankReporter::of_this_process().note_collective_failure();
      throw core::RuntimeError(str_cat(what_, " failed or timed out: ", first_line(e.what_without_backtrace())));
    } catch (const std::exception& e) {
      RankReporter::of_this_process().note_collective_failure();
      throw core::RuntimeError(str_cat(what_, " failed or timed out: ", first_line(e.what())));
    }
    RankReporter::of_this_process().note_waiting(false);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
};

// One c10d process group (ProcessGroupGloo or ProcessGroupNCCL) behind the Communicator interface.
template <typename ProcessGroup>
class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<ProcessGroup> pg, std::string name, int self_global)
      : pg_(std::move(pg)), name_(std::move(name)), self_(self_global) {}
  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }
  const std::string& name() const override { return name_; }

  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor& inout) override {
    std::vector<at::Tensor> t{inout};
    return post("all_reduce", [&] { return pg_->allreduce(t); });
  }
  // Flat views: c10d wants the output as [size · in.size(0), ...]; the contract is the flat
  // concatenation, whatever the shapes. REQUIRES: `out` contiguous.
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    auto input = in.contiguous().view({-1});
    auto output = out.view({-1});
    return post("all_gather", [&] { return pg_->_allgather_base(output, input); });
  }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    auto input = in.contiguous().view({-1});
    auto output = out.view({-1});
    return post("reduce_scatter", [&] { return pg_->_reduce_scatter_base(output, input); });
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor& t, int root) override {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return post("broadcast", [&] { return pg_->broadcast(v, o); });
  }
  std::unique_ptr<CommHandle> all_to_all(const torch::Tensor& in, torch::Tensor& out,
                                         const std::vector<std::int64_t>& in_rows,
                                         const std::vector<std::int64_t>& out_rows) override {
    CPT_CHECK(in.is_contiguous() && out.is_contiguous(), "all_to_all on group ", name_, ": tensors must be contiguous");
    auto input = in;
    auto output = out;
    auto in_splits = in_rows;
    auto out_splits = out_rows;
    return post("all_to_all", [&] { return pg_->alltoall_base(output, input, out_splits, in_splits); });
  }
  std::unique_ptr<CommHandle> send(torch::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{t};
    return post(str_cat("send to ", peer), [&] { return pg_->send(v, peer, tag); });
  }
  std::unique_ptr<CommHandle> recv(torch::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{t};
    return post(str_cat("recv from ", peer), [&] { return pg_->recv(v, peer, tag); });
  }
  void barrier() override {
    post("barrier", [&] { return pg_->barrier(); })->wait();
  }

 private:
  // Starts an operation (`start` returns its c10d Work). A failure while posting (a malformed
  // tensor; NCCL raises its start-up errors here, on the first operation of a group, not in wait())
  // is a RuntimeError naming the operation and the rank, as a failure in wait() is.
  template <typename Start>
  std::unique_ptr<CommHandle> post(const std::string& op, Start&& start) {
    auto what = str_cat(op, " on group ", name_, " (global rank ", self_, ", rank ", pg_->getRank(), " of ",
                        pg_->getSize(), ")");
    RankReporter::of_this_process().note_posted(what);
    try {
      return std::make_unique<C10dHandle>(start(), std::move(what));
    } catch (const c10::Error& e) {
      RankReporter::of_this_process().note_collective_failure();
      throw core::RuntimeError(str_cat(what, " failed: ", first_line(e.what_without_backtrace())));
    } catch (const std::exception& e) {
      RankReporter::of_this_process().note_collective_failure();
      throw core::RuntimeError(str_cat(what, " failed: ", first_line(e.what())));
    }
  }
  c10::intrusive_ptr<ProcessGroup> pg_;
  std::string name_;
  int self_;
};

// A point-to-point transfer of a CUDA tensor staged through host memory over Gloo: the send copies
// the tensor to the host when it is posted; the receive lands in a host buffer and is copied into
// the tensor by wait().
class StagedHandle : public CommHandle {
 public:
  StagedHandle(std::unique_ptr<CommHandle> inner, torch::Tensor host, torch::Tensor device_target)
      : inner_(std::move(inner)), host_(std::move(host)), target_(std::move(device_target)) {}
  void wait() override {
    inner_->wait();
    if (target_.defined()) target_.copy_(host_);
  }

 private:
  std::unique_ptr<CommHandle> inner_;
  torch::Tensor host_, target_;
};

// Two groups over the same ranks, each collective routed by its tensor's device: CUDA tensors to
// the NCCL group, CPU tensors (the executor's scalar reductions: loss tokens, norms, counts) to
// Gloo, as a c10d group with the backends "cpu:gloo,cuda:nccl" does. Barriers go to Gloo.
// Point-to-point transfers go through Gloo even for CUDA tensors (staged in host memory): NCCL
// matches a pair's sends and receives in posting order, not by tag, and a 1F1B step posts its send
// before its receive on both ranks of a pair, so large messages would wait on each other forever.
// (NCCL's batched send/receive, Megatron's batch_isend_irecv, is the faster way; not built.)
class DeviceRoutedCommunicator : public Communicator {
 public:
  DeviceRoutedCommunicator(std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> cuda)
      : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  const std::string& name() const override { return cpu_->name(); }
  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor& inout) override { return on(inout).all_reduce_sum(inout); }
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    return on(in).all_gather(in, out);
  }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    return on(in).reduce_scatter_sum(in, out);
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor& t, int root) override { return on(t).broadcast(t, root); }
  std::unique_ptr<CommHandle> all_to_all(const torch::Tensor& in, torch::Tensor& out,
                                         const std::vector<std::int64_t>& in_rows,
                                         const std::vector<std::int64_t>& out_rows) override {
    return on(in).all_to_all(in, out, in_rows, out_rows);
  }
  std::unique_ptr<CommHandle> send(torch::Tensor& t, int peer, int tag) override {
    if (!t.is_cuda()) return cpu_->send(t, peer, tag);
    auto host = t.to(torch::kCPU).contiguous();
    auto inner = cpu_->send(host, peer, tag);
    return std::make_unique<StagedHandle>(std::move(inner), host, torch::Tensor());
  }
  std::unique_ptr<CommHandle> recv(torch::Tensor& t, int peer, int tag) override {
    if (!t.is_cuda()) return cpu_->recv(t, peer, tag);
    auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    auto inner = cpu_->recv(host, peer, tag);
    return std::make_unique<StagedHandle>(std::move(inner), host, t);
  }
  void barrier() override { cpu_->barrier(); }

 private:
  Communicator& on(const torch::Tensor& t) { return t.is_cuda() ? *cuda_ : *cpu_; }
  std::unique_ptr<Communicator> cpu_, cuda_;
};

}  // namespace

std::unique_ptr<Communicator> route_by_device(std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> cuda) {
  CPT_CHECK(cpu && cuda && cpu->size() == cuda->size() && cpu->rank() == cuda->rank(),
            "route_by_device: the two groups must span the same ranks");
  return std::make_unique<DeviceRoutedCommunicator>(std::move(cpu), std::move(cuda));
}

GlooTransport gloo_transport_of(const LaunchInfo& launch) {
  const bool one_node = launch.world_size == launch.local_world_size;
  return {launch.gloo_socket_ifname, one_node ? launch.master_addr : std::string()};
}

std::unique_ptr<Communicator> make_gloo_group(const JobStore& store, const std::string& name,
                                              const std::vector<int>& ranks, int self, std::chrono::seconds timeout,
                                              const GlooTransport& transport) {
  const auto it = std::find(ranks.begin(), ranks.end(), self);
  CPT_CHECK(it != ranks.end(), "rank ", self, " is not in group ", name);
  if (ranks.size() == 1) return make_solo_communicator(name);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store.impl().store);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  try {
    opts->devices.push_back(!transport.interface.empty()
                                ? c10d::ProcessGroupGloo::createDeviceForInterface(transport.interface)
                            : !transport.host.empty() ? c10d::ProcessGroupGloo::createDeviceForHostname(transport.host)
                                                      : c10d::ProcessGroupGloo::createDefaultDevice());
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, static_cast<int>(it - ranks.begin()),
                                                          static_cast<int>(ranks.size()), opts);
    return std::make_unique<C10dCommunicator<c10d::ProcessGroupGloo>>(std::move(pg), name, self);
  } catch (const c10::Error& e) {
    RankReporter::of_this_process().note_collective_failure();  // the peers' rendezvous
    throw core::RuntimeError(
        str_cat("rank ", self, ": creating group ", name, " failed: ", first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    RankReporter::of_this_process().note_collective_failure();
    throw core::RuntimeError(str_cat("rank ", self, ": creating group ", name, " failed: ", first_line(e.what())));
  }
}

std::unique_ptr<Communicator> make_nccl_group(const JobStore& store, const std::string& name,
                                              const std::vector<int>& ranks, int self, std::chrono::seconds timeout) {
  const auto it = std::find(ranks.begin(), ranks.end(), self);
  CPT_CHECK(it != ranks.end(), "rank ", self, " is not in group ", name);
  if (ranks.size() == 1) return make_solo_communicator(name);
#ifdef CPT_EXECUTOR_CUDA
  // Its own key space in the store: the Gloo group of the same name keys its rendezvous there too.
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(str_cat(name, "/nccl"), store.impl().store);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, static_cast<int>(it - ranks.begin()),
                                                          static_cast<int>(ranks.size()), opts);
    return std::make_unique<C10dCommunicator<c10d::ProcessGroupNCCL>>(std::move(pg), name, self);
  } catch (const c10::Error& e) {
    RankReporter::of_this_process().note_collective_failure();  // the peers' rendezvous
    throw core::RuntimeError(
        str_cat("rank ", self, ": creating NCCL group ", name, " failed: ", first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    RankReporter::of_this_process().note_collective_failure();
    throw core::RuntimeError(str_cat("rank ", self, ": creating NCCL group ", name, " failed: ", first_line(e.what())));
  }
#else
  (void)store;
  (void)timeout;
  throw core::ConfigError(
      str_cat("group ", name, ": NCCL needs a CUDA build of LibTorch; this cpt was built against a ", "CPU-only one"));
#endif
}

}  // namespace cpt::exec
