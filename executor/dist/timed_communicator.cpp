#include "executor/dist/timed_communicator.h"

#include "executor/measure/op_kind.h"

#include <ATen/record_function.h>

#include <chrono>
#include <string>

namespace cpt::exec {

namespace {

using Clock = std::chrono::steady_clock;

class TimedHandle : public CommHandle {
 public:
  TimedHandle(std::unique_ptr<CommHandle> inner, CommClock& clock, std::shared_ptr<const std::string> scope)
      : inner_(std::move(inner)), clock_(clock), scope_(std::move(scope)) {}
  void wait() override {
    RECORD_USER_SCOPE(*scope_);  // seen by a running step profiler (measure/step_profiler.h) only
    const auto t0 = Clock::now();
    inner_->wait();
    clock_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  std::unique_ptr<CommHandle> inner_;
  CommClock& clock_;
  std::shared_ptr<const std::string> scope_;  // "comm wait GROUP"
};

class TimedCommunicator : public Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> inner, CommClock& clock)
      : inner_(std::move(inner)),
        clock_(clock),
        scope_(std::make_shared<const std::string>(kCommWaitScopePrefix + inner_->name())) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor& inout) override {
    return timed(inout, [&] { return inner_->all_reduce_sum(inout); });
  }
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    return timed(out, [&] { return inner_->all_gather(in, out); });
  }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    return timed(in, [&] { return inner_->reduce_scatter_sum(in, out); });
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor& t, int root) override {
    return timed(t, [&] { return inner_->broadcast(t, root); });
  }
  std::unique_ptr<CommHandle> all_to_all(const torch::Tensor& in, torch::Tensor& out,
                                         const std::vector<std::int64_t>& in_rows,
                                         const std::vector<std::int64_t>& out_rows) override {
    return timed(in, [&] { return inner_->all_to_all(in, out, in_rows, out_rows); });
  }
  std::unique_ptr<CommHandle> send(torch::Tensor& t, int peer, int tag) override {
    return timed(t, [&] { return inner_->send(t, peer, tag); });
  }
  std::unique_ptr<CommHandle> recv(torch::Tensor& t, int peer, int tag) override {
    return timed(t, [&] { return inner_->recv(t, peer, tag); });
  }
  void barrier() override {
    count_call();
    RECORD_USER_SCOPE(*scope_);
    const auto t0 = Clock::now();
    inner_->barrier();
    clock_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  // A call is an operation among ranks: on a group of one it is a local copy, which pays no
  // per-call cost and which the cost model does not count (Estimate::calls_per_step).
  void count_call(std::int64_t bytes = 0) {
    if (inner_->size() == 1) return;
    ++clock_.calls;
    clock_.bytes += bytes;
  }
  // Starts an operation, counting the time the start itself blocks (Gloo does part of some
  // collectives on the calling thread: a 2 MB reduce-scatter spends about half its time there).
  // `payload`: the tensor whose bytes the operation counts (the header).
  template <typename Start>
  std::unique_ptr<CommHandle> timed(const torch::Tensor& payload, Start&& start) {
    count_call(static_cast<std::int64_t>(payload.nbytes()));
    RECORD_USER_SCOPE(*scope_);
    const auto t0 = Clock::now();
    auto h = start();
    clock_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return std::make_unique<TimedHandle>(std::move(h), clock_, scope_);
  }
  std::unique_ptr<Communicator> inner_;
  CommClock& clock_;
  std::shared_ptr<const std::string> scope_;
};

}  // namespace

std::unique_ptr<Communicator> with_timing(std::unique_ptr<Communicator> inner, CommClock& clock) {
  return std::make_unique<TimedCommunicator>(std::move(inner), clock);
}

}  // namespace cpt::exec
