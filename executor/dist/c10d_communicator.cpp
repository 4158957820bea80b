// The one translation unit that includes c10d. Gloo's headers come from Debian's libgloo-dev; the
// symbols are LibTorch's own (libtorch_cpu), whose ProcessGroupGloo.hpp compiles only with
// USE_C10D_GLOO defined (the precompiled <torch/torch.h> does not depend on it).
#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/dist/c10d_communicator.h"

namespace cpt::exec {

using core::str_cat;

namespace {
// c10d messages can run over several lines; cpt's errors are one line.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
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
  o.isServer = launch.rank == 0;
  o.numWorkers = static_cast<std::size_t>(launch.world_size);
  o.waitWorkers = true;
  o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    impl->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, o);
  } catch (const c10::Error& e) {
    throw core::RuntimeError(str_cat("rank ", launch.rank, ": rendezvous at ", impl->where, " failed (", launch.world_size,
                                     " ranks expected, timeout ", timeout.count(), " s): ", first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    throw core::RuntimeError(str_cat("rank ", launch.rank, ": rendezvous at ", impl->where, " failed (", launch.world_size,
                                     " ranks expected, timeout ", timeout.count(), " s): ", first_line(e.what())));
  }
  return std::shared_ptr<JobStore>(new JobStore(std::move(impl)));
}

namespace {

class GlooHandle : public CommHandle {
 public:
  GlooHandle(c10::intrusive_ptr<c10d::Work> work, std::string what) : work_(std::move(work)), what_(std::move(what)) {}
  void wait() override {
    try {
      work_->wait();
    } catch (const c10::Error& e) {
      throw core::RuntimeError(str_cat(what_, " failed or timed out: ", first_line(e.what_without_backtrace())));
    } catch (const std::exception& e) {
      throw core::RuntimeError(str_cat(what_, " failed or timed out: ", first_line(e.what())));
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::string name, int self_global)
      : pg_(std::move(pg)), name_(std::move(name)), self_(self_global) {}
  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }
  const std::string& name() const override { return name_; }

  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor& inout) override {
    std::vector<at::Tensor> t{inout};
    return handle(pg_->allreduce(t), "all_reduce");
  }
  // Flat views: c10d wants the output as [size · in.size(0), ...]; the contract is the flat
  // concatenation, whatever the shapes. REQUIRES: `out` contiguous.
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    auto input = in.contiguous().view({-1});
    auto output = out.view({-1});
    return handle(pg_->_allgather_base(output, input), "all_gather");
  }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    auto input = in.contiguous().view({-1});
    auto output = out.view({-1});
    return handle(pg_->_reduce_scatter_base(output, input), "reduce_scatter");
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor& t, int root) override {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return handle(pg_->broadcast(v, o), "broadcast");
  }
  std::unique_ptr<CommHandle> send(torch::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{t};
    return handle(pg_->send(v, peer, tag), str_cat("send to ", peer));
  }
  std::unique_ptr<CommHandle> recv(torch::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{t};
    return handle(pg_->recv(v, peer, tag), str_cat("recv from ", peer));
  }
  void barrier() override { handle(pg_->barrier(), "barrier")->wait(); }

 private:
  std::unique_ptr<CommHandle> handle(c10::intrusive_ptr<c10d::Work> w, const std::string& op) {
    return std::make_unique<GlooHandle>(std::move(w), str_cat(op, " on group ", name_, " (global rank ", self_,
                                                              ", rank ", pg_->getRank(), " of ", pg_->getSize(), ")"));
  }
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::string name_;
  int self_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_group(const JobStore& store, const std::string& name, const std::vector<int>& ranks,
                                              int self, std::chrono::seconds timeout, const std::string& interface) {
  const auto it = std::find(ranks.begin(), ranks.end(), self);
  CPT_CHECK(it != ranks.end(), "rank ", self, " is not in group ", name);
  if (ranks.size() == 1) return make_solo_communicator(name);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store.impl().store);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  try {
    // The named interface, or Gloo's default: the address the host name resolves to, else loopback.
    opts->devices.push_back(interface.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                              : c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, static_cast<int>(it - ranks.begin()),
                                                          static_cast<int>(ranks.size()), opts);
    return std::make_unique<GlooCommunicator>(std::move(pg), name, self);
  } catch (const c10::Error& e) {
    throw core::RuntimeError(str_cat("rank ", self, ": creating group ", name, " failed: ", first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    throw core::RuntimeError(str_cat("rank ", self, ": creating group ", name, " failed: ", first_line(e.what())));
  }
}

}  // namespace cpt::exec
