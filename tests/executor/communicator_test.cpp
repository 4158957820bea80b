// route_by_device (executor/dist/c10d_communicator.h): a run on GPUs sends each collective to the
// group of its tensor's device, and point-to-point transfers through Gloo. Only the CPU side runs
// on a machine without a GPU; the routing itself is checked with two recording groups.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

#include "executor/dist/c10d_communicator.h"
#include "executor/dist/timed_communicator.h"
#include "executor_test_support.h"

namespace cpt::exec {
namespace {

class Done : public CommHandle {
 public:
  void wait() override {}
};

// Records which operations reached it.
class Recording : public Communicator {
 public:
  Recording(std::string name, int rank, int size, std::vector<std::string>& log)
      : name_(std::move(name)), rank_(rank), size_(size), log_(log) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor&) override { return note("all_reduce"); }
  std::unique_ptr<CommHandle> all_gather(const torch::Tensor&, torch::Tensor&) override { return note("all_gather"); }
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor&, torch::Tensor&) override {
    return note("reduce_scatter");
  }
  std::unique_ptr<CommHandle> broadcast(torch::Tensor&, int) override { return note("broadcast"); }
  std::unique_ptr<CommHandle> all_to_all(const torch::Tensor&, torch::Tensor&, const std::vector<std::int64_t>&,
                                         const std::vector<std::int64_t>&) override {
    return note("all_to_all");
  }
  std::unique_ptr<CommHandle> send(torch::Tensor&, int, int) override { return note("send"); }
  std::unique_ptr<CommHandle> recv(torch::Tensor&, int, int) override { return note("recv"); }
  void barrier() override { note("barrier"); }

 private:
  std::unique_ptr<CommHandle> note(const char* op) {
    log_.push_back(name_ + ":" + op);
    return std::make_unique<Done>();
  }
  std::string name_;
  int rank_, size_;
  std::vector<std::string>& log_;
};

TEST(RouteByDevice, CpuTensorsAndBarriersGoToTheCpuGroup) {
  std::vector<std::string> log;
  auto routed =
      route_by_device(std::make_unique<Recording>("gloo", 1, 2, log), std::make_unique<Recording>("nccl", 1, 2, log));
  EXPECT_EQ(routed->name(), "gloo");
  EXPECT_EQ(routed->rank(), 1);
  EXPECT_EQ(routed->size(), 2);
  auto t = torch::zeros({4});
  auto half = torch::zeros({2});
  routed->all_reduce_sum(t)->wait();
  routed->all_gather(half, t)->wait();
  routed->reduce_scatter_sum(t, half)->wait();
  routed->broadcast(t, 0)->wait();
  routed->send(t, 0, 7)->wait();
  routed->recv(t, 0, 7)->wait();
  routed->barrier();
  EXPECT_EQ(log, (std::vector<std::string>{"gloo:all_reduce", "gloo:all_gather", "gloo:reduce_scatter",
                                           "gloo:broadcast", "gloo:send", "gloo:recv", "gloo:barrier"}));
  if (torch::cuda::is_available()) {  // on a GPU machine: CUDA tensors take the other group
    auto c = torch::zeros({4}, torch::kCUDA);
    routed->all_reduce_sum(c)->wait();
    EXPECT_EQ(log.back(), "nccl:all_reduce");
    routed->send(c, 0, 3)->wait();  // point-to-point: staged through the host, over Gloo
    EXPECT_EQ(log.back(), "gloo:send");
  }
}

TEST(RouteByDevice, RefusesGroupsOfDifferentRanks) {
  std::vector<std::string> log;
  EXPECT_ANY_THROW(
      route_by_device(std::make_unique<Recording>("gloo", 0, 2, log), std::make_unique<Recording>("nccl", 0, 4, log)));
}

// An operation Gloo refuses when it is posted (here an all-gather whose output is not size × input;
// NCCL raises its start-up errors the same way) is a RuntimeError naming the operation, group and
// rank (exit 3), not a LibTorch exception (exit 1). Two ranks as two threads of this process.
TEST(C10dCommunicator, AnOperationRefusedWhenPostedIsARuntimeErrorNamingIt) {
  std::vector<std::string> errors(2);
  testing::on_two_gloo_ranks("g", [&](int rank, Communicator& group) {
    auto in = torch::ones({4});
    auto out = torch::empty({5});  // should be 8
    try {
      (void)group.all_gather(in, out);
    } catch (const core::RuntimeError& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
    group.barrier();  // the group still works
  });
  for (int rank : {0, 1}) {
    const auto& e = errors[static_cast<std::size_t>(rank)];
    EXPECT_EQ(e.rfind("all_gather on group g (global rank " + std::to_string(rank) + ", rank " + std::to_string(rank) +
                          " of 2) failed: ",
                      0),
              0u)
        << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// A group whose operations block their caller for a while when started (as Gloo's reduce-scatter
// does for part of its work) and whose wait() blocks too.
class SlowToStart : public Recording {
 public:
  explicit SlowToStart(std::vector<std::string>& log) : Recording("slow", 0, 2, log) {}
  std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return Recording::reduce_scatter_sum(in, out);
  }
};

// The time a caller spends blocked in a group counts both starting an operation and waiting for it.
TEST(TimedCommunicator, CountsTheTimeAnOperationBlocksItsStartAndItsWait) {
  std::vector<std::string> log;
  CommClock clock;
  auto timed = with_timing(std::make_unique<SlowToStart>(log), clock);
  auto in = torch::ones({4});
  auto out = torch::empty({2});
  auto handle = timed->reduce_scatter_sum(in, out);
  EXPECT_GE(clock.seconds, 0.029);  // before the wait: the start alone
  EXPECT_EQ(clock.calls, 1);
  handle->wait();
  EXPECT_LT(clock.seconds, 1.0);
  EXPECT_EQ(log, std::vector<std::string>{"slow:reduce_scatter"});
}

// On a group of one rank an operation is a local copy: timed, not counted as a call (the cost
// model counts none; a ZeRO optimizer of one shard still calls its group).
TEST(TimedCommunicator, OperationsOnOneRankAreNotCalls) {
  CommClock clock;
  auto timed = with_timing(make_solo_communicator("solo"), clock);
  auto t = torch::ones({4});
  timed->all_reduce_sum(t)->wait();
  timed->barrier();
  EXPECT_EQ(clock.calls, 0);
  EXPECT_EQ(clock.bytes, 0);
  std::vector<std::string> log;
  CommClock two;
  auto pair = with_timing(std::make_unique<Recording>("pair", 0, 2, log), two);
  pair->all_reduce_sum(t)->wait();
  EXPECT_EQ(two.calls, 1);
  EXPECT_EQ(two.bytes, 16);
}

// Each call's bytes as the cost model's step inventory counts them: an all-reduce's buffer, an
// all-gather's gathered result, a reduce-scatter's input, what an all-to-all sends.
TEST(TimedCommunicator, CountsTheBytesTheCostModelCounts) {
  std::vector<std::string> log;
  CommClock clock;
  auto pair = with_timing(std::make_unique<Recording>("pair", 0, 2, log), clock);
  auto shard = torch::ones({4});  // 16 bytes
  auto whole = torch::ones({8});  // 32 bytes
  pair->all_gather(shard, whole)->wait();
  EXPECT_EQ(clock.bytes, 32);
  pair->reduce_scatter_sum(whole, shard)->wait();
  EXPECT_EQ(clock.bytes, 64);
  auto rows = torch::ones({3, 2}, torch::kFloat64);  // 48 bytes sent
  auto received = torch::empty({1, 2}, torch::kFloat64);
  pair->all_to_all(rows, received, {2, 1}, {0, 1})->wait();
  EXPECT_EQ(clock.bytes, 112);
  EXPECT_EQ(clock.calls, 3);
}

}  // namespace
}  // namespace cpt::exec
