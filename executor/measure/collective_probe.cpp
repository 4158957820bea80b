#include "executor/measure/collective_probe.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <vector>

#include "executor/measure/timing.h"

namespace cpt::exec {

using Clock = std::chrono::steady_clock;

namespace {

// Seconds per call of `call` run back to back by every rank of `world` for about `seconds` (rank
// 0 decides how many calls from its first timing, so every rank runs as many), after a warm-up
// (NCCL connects a pair of ranks on its first call): the slowest rank's mean.
// The host compute of the synchronisation probes: 192 × 192 fp32 GEMMs (about 0.1 ms each on a
// core), `run(count)` of them back to back; `seconds_each()` times one after a warm-up.
class HostGemms {
 public:
  HostGemms() : a_(torch::randn({192, 192})), b_(torch::randn({192, 192})) {}
  void run(int count) const {
    for (int i = 0; i < count; ++i) (void)torch::mm(a_, b_);
  }
  double seconds_each() const {
    run(5);
    const auto t0 = Clock::now();
    run(20);
    return std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count() / 20);
  }

 private:
  torch::Tensor a_, b_;
};

// A probe's rounds sorted by their result (each round's last entry), ascending; the median round.
// REQUIRES: rounds is not empty.
template <std::size_t N>
std::array<double, N> sort_rounds_and_take_median(std::vector<std::array<double, N>>& rounds) {
  std::sort(rounds.begin(), rounds.end(), [](const auto& x, const auto& y) { return x.back() < y.back(); });
  return rounds[rounds.size() / 2];
}

// Training-like work on the host: `layers` pre-norm residual MLP blocks over [512, 64]
// activations (RMS norm, 64 → 176 → 64 with SiLU), forward and backward through autograd, the
// gradients dropped after each piece, as the executor's steps allocate and free theirs.
class HostTrainingWork {
 public:
  explicit HostTrainingWork(int layers) : x_(torch::randn({512, 64})) {
    for (int i = 0; i < layers; ++i) {
      up_.push_back((torch::randn({64, 176}) * 0.1).requires_grad_());
      down_.push_back((torch::randn({176, 64}) * 0.1).requires_grad_());
    }
  }
  void run() {
    torch::Tensor h = x_;
    for (std::size_t i = 0; i < up_.size(); ++i) {
      const auto normed = h * torch::rsqrt(h.square().mean(-1, true) + 1e-6);
      h = h + torch::mm(torch::silu(torch::mm(normed, up_[i])), down_[i]);
    }
    h.square().mean().backward();
    for (auto& w : up_) w.mutable_grad() = torch::Tensor();
    for (auto& w : down_) w.mutable_grad() = torch::Tensor();
  }
  double seconds_each() {
    for (int i = 0; i < 3; ++i) run();
    const auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) run();
    return std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count() / 10);
  }

 private:
  torch::Tensor x_;
  std::vector<torch::Tensor> up_, down_;
};

double time_collective_call(Communicator& world, const std::function<void()>& call, double seconds,
                            const torch::Device& device) {
  const int n = world.size(), me = world.rank();
  call();
  synchronize(device);
  world.barrier();
  const auto t0 = Clock::now();
  call();
  synchronize(device);
  const double first = std::chrono::duration<double>(Clock::now() - t0).count();
  auto reps = torch::tensor({me == 0 ? std::max(3.0, std::min(2000.0, seconds / std::max(first, 1e-6))) : 0.0},
                            torch::kFloat64);
  world.broadcast(reps, 0)->wait();
  const int calls = static_cast<int>(reps.item<double>());
  world.barrier();
  const auto t1 = Clock::now();
  for (int i = 0; i < calls; ++i) call();
  synchronize(device);  // NCCL's wait() only orders the stream
  auto mean = torch::tensor({std::chrono::duration<double>(Clock::now() - t1).count() / calls}, torch::kFloat64);
  auto all = torch::empty({n}, torch::kFloat64);
  world.all_gather(mean, all)->wait();
  return all.max().item<double>();
}

}  // namespace

std::vector<CommMeasurement> measure_collectives(Communicator& world, double max_bytes, double seconds_per_point,
                                                 const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const int n = world.size(), me = world.rank();
  const auto on = torch::TensorOptions().device(device);
  std::vector<CommMeasurement> out;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    for (double bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      // Elements of the full buffer, a multiple of the group size.
      const auto elements = static_cast<std::int64_t>(bytes / 4) / n * n;
      auto full = torch::ones({elements}, on);
      auto part = torch::ones({elements / n}, on);
      const std::string name = op;
      auto call = [&] {
        if (name == "all_reduce") {
          world.all_reduce_sum(full)->wait();
        } else if (name == "all_gather") {
          world.all_gather(part, full)->wait();
        } else if (name == "reduce_scatter") {
          world.reduce_scatter_sum(full, part)->wait();
        } else if (me == 0 || me == 1) {  // one message each way between ranks 0 and 1; half the round trip
          if (me == 0) {
            world.send(full, 1, 7)->wait();
            world.recv(full, 1, 8)->wait();
          } else {
            world.recv(full, 0, 7)->wait();
            world.send(full, 0, 8)->wait();
          }
        }
      };
      double seconds = time_collective_call(world, call, seconds_per_point, device);
      if (name == "send_recv") seconds /= 2;
      out.push_back({name, name == "send_recv" ? 2 : n, static_cast<double>(elements) * 4.0, seconds});
    }
  }
  return out;
}

double measure_scalar_all_reduce(Communicator& world, double seconds) {
  torch::NoGradGuard no_grad;
  auto t = torch::zeros({2}, torch::kFloat64);  // summed thousands of times: zeros stay finite
  return time_collective_call(
      world, [&] { world.all_reduce_sum(t)->wait(); }, seconds, torch::kCPU);
}

std::vector<SyncWait> measure_sync_waits(Communicator& world, double seconds) {
  torch::NoGradGuard no_grad;
  const int n = world.size();
  auto small = torch::zeros({1024});  // summed in place thousands of times: zeros stay finite
  const HostGemms gemms;
  // Rank 0 sizes the segments and the calls; every rank uses its numbers.
  const double per_gemm = gemms.seconds_each();
  const std::array<double, 3> targets{1e-3, 4e-3, 16e-3};
  std::array<double, 6> sizing{};
  for (std::size_t t = 0; t < targets.size(); ++t) {
    sizing[2 * t] = std::max(1.0, std::round(targets[t] / per_gemm));
    sizing[2 * t + 1] = std::max(4.0, std::min(1000.0, seconds / 9 / (targets[t] + 1e-3)));
  }
  auto plan = torch::tensor(std::vector<double>(sizing.begin(), sizing.end()), torch::kFloat64);
  world.broadcast(plan, 0)->wait();
  // Three rounds over the three lengths, each round's back-to-back calls and waits together: the
  // calls' latency drifts by up to 2x between minutes on a shared VM, and the median round per
  // length resists one round taken in another state of the machine.
  constexpr int kRounds = 3;
  auto rounds = torch::empty({kRounds, static_cast<std::int64_t>(targets.size()), 3}, torch::kFloat64);
  for (int r = 0; r < kRounds; ++r) {
    for (std::size_t t = 0; t < targets.size(); ++t) {
      const int count = static_cast<int>(plan[static_cast<std::int64_t>(2 * t)].item<double>());
      const int calls = static_cast<int>(plan[static_cast<std::int64_t>(2 * t + 1)].item<double>());
      world.barrier();
      const auto t1 = Clock::now();
      for (int i = 0; i < calls; ++i) world.all_reduce_sum(small)->wait();
      const double back_to_back = std::chrono::duration<double>(Clock::now() - t1).count() / calls;
      world.barrier();
      auto computed = torch::empty({calls}, torch::kFloat64);
      double waited = 0;
      for (int i = 0; i < calls; ++i) {
        const auto c = Clock::now();
        gemms.run(count);
        const auto w = Clock::now();
        world.all_reduce_sum(small)->wait();
        computed[i] = std::chrono::duration<double>(w - c).count();
        waited += std::chrono::duration<double>(Clock::now() - w).count();
      }
      auto pieces = torch::empty({n, calls}, torch::kFloat64);
      world.all_gather(computed, pieces)->wait();
      // Per call, the slowest rank's compute beyond the ranks' mean (what a rank would wait for
      // the others were their compute all that varied: costmodel/straggler.h's E[max of n] − E[own]).
      rounds[r][static_cast<std::int64_t>(t)][0] = computed.mean().item<double>();
      rounds[r][static_cast<std::int64_t>(t)][1] = waited / calls - back_to_back;
      rounds[r][static_cast<std::int64_t>(t)][2] = (std::get<0>(pieces.max(0)) - pieces.mean(0)).mean().item<double>();
    }
  }
  auto all = torch::empty({n, kRounds, static_cast<std::int64_t>(targets.size()), 3}, torch::kFloat64);
  world.all_gather(rounds, all)->wait();
  const auto mean = all.mean(0);  // [round, length, 3]: the ranks' mean
  std::vector<SyncWait> out;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    std::vector<std::array<double, 3>> per_round;  // segment, spread, extra wait
    for (int r = 0; r < kRounds; ++r) {
      const auto m = mean[r][static_cast<std::int64_t>(t)];
      per_round.push_back({m[0].item<double>(), m[2].item<double>(), m[1].item<double>()});
    }
    const auto median = sort_rounds_and_take_median(per_round);
    out.push_back({median[0], median[2], median[1]});
  }
  return out;
}

OverlapMeasurement measure_overlap_slowdown(Communicator& world, double seconds) {
  torch::NoGradGuard no_grad;
  const int n = world.size();
  const HostGemms gemms;
  const std::int64_t part_elements = 64 * 1024;  // 256 KiB from each rank
  auto part = torch::ones({part_elements}), full = torch::empty({part_elements * n});
  auto gather = [&] { return world.all_gather(part, full); };
  // Rank 0 sizes a chunk of GEMMs to twice a call (the call then fits inside it) and the number
  // of calls per round; every rank uses its numbers.
  const double per_gemm = gemms.seconds_each();
  for (int i = 0; i < 3; ++i) gather()->wait();
  const auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i) gather()->wait();
  const double per_call = std::chrono::duration<double>(Clock::now() - t0).count() / 10;
  constexpr int kRounds = 5;
  auto plan = torch::tensor({std::max(1.0, std::round(2 * per_call / per_gemm)),
                             std::max(5.0, std::min(1000.0, seconds / (kRounds * 5 * per_call)))},
                            torch::kFloat64);
  world.broadcast(plan, 0)->wait();
  const int chunk = static_cast<int>(plan[0].item<double>()), calls = static_cast<int>(plan[1].item<double>());
  auto timed = [&](const std::function<void()>& body) {
    world.barrier();
    const auto start = Clock::now();
    body();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  // Rounds of the three, each round's slowdown apart: the median round is the machine's (the
  // scheduler does not always treat the backend's threads alike; one round can hide the calls
  // that the next does not).
  auto times = torch::empty({kRounds, 3}, torch::kFloat64);
  for (int r = 0; r < kRounds; ++r) {
    times[r][0] = timed([&] { gemms.run(chunk * calls); });
    times[r][1] = timed([&] {
      for (int i = 0; i < calls; ++i) gather()->wait();
    });
    times[r][2] = timed([&] {
      for (int i = 0; i < calls; ++i) {
        auto handle = gather();
        gemms.run(chunk);
        handle->wait();
      }
    });
  }
  auto all = torch::empty({n, kRounds, 3}, torch::kFloat64);
  world.all_gather(times, all)->wait();
  const auto mean = all.mean(0);              // [round, 3]: the ranks' mean
  std::vector<std::array<double, 4>> rounds;  // gemm, comm, overlapped, slowdown
  for (int r = 0; r < kRounds; ++r) {
    const double g = mean[r][0].item<double>(), c = mean[r][1].item<double>(), o = mean[r][2].item<double>();
    rounds.push_back({g, c, o, c > 0 ? std::max(0.0, (o - g) / c) : 0.0});
  }
  const auto median = sort_rounds_and_take_median(rounds);
  OverlapMeasurement m;
  m.bytes = static_cast<double>(full.numel()) * 4.0;
  m.gemm_s = median[0];
  m.comm_s = median[1];
  m.overlapped_s = median[2];
  m.slowdown = median[3];
  for (const auto& r : rounds) m.round_slowdowns.push_back(r[3]);
  return m;
}

ResumeMeasurement measure_compute_after_calls(Communicator& world, double seconds) {
  const int n = world.size();
  auto buffer = torch::zeros({64 * 1024});  // 256 KiB, summed in place: zeros stay finite
  // Rank 0 sizes a piece of work to about 1.5 ms (a tiny model's layer between two calls) and the
  // pieces per round; every rank uses its numbers.
  const double per_layer = HostTrainingWork(1).seconds_each();
  for (int i = 0; i < 3; ++i) world.all_reduce_sum(buffer)->wait();
  const auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i) world.all_reduce_sum(buffer)->wait();
  const double per_call = std::chrono::duration<double>(Clock::now() - t0).count() / 10;
  constexpr int kRounds = 5;
  const double layers = std::max(1.0, std::min(64.0, std::round(1.5e-3 / per_layer)));
  auto plan = torch::tensor(
      {layers, std::max(10.0, std::min(1000.0, seconds / (kRounds * (2 * layers * per_layer + per_call))))},
      torch::kFloat64);
  world.broadcast(plan, 0)->wait();
  HostTrainingWork work(static_cast<int>(plan[0].item<double>()));
  const int pieces = static_cast<int>(plan[1].item<double>());
  for (int i = 0; i < 3; ++i) work.run();
  auto times = torch::empty({kRounds, 2}, torch::kFloat64);  // alone, after a call: per piece
  for (int r = 0; r < kRounds; ++r) {
    world.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < pieces; ++i) work.run();
    times[r][0] = std::chrono::duration<double>(Clock::now() - start).count() / pieces;
    world.barrier();
    double computed = 0;
    for (int i = 0; i < pieces; ++i) {
      const auto c = Clock::now();
      work.run();
      computed += std::chrono::duration<double>(Clock::now() - c).count();
      world.all_reduce_sum(buffer)->wait();
    }
    times[r][1] = computed / pieces;
  }
  auto all = torch::empty({n, kRounds, 2}, torch::kFloat64);
  world.all_gather(times, all)->wait();
  const auto mean = all.mean(0);              // [round, 2]: the ranks' mean
  std::vector<std::array<double, 3>> rounds;  // alone, after a call, lost
  for (int r = 0; r < kRounds; ++r) {
    const double alone = mean[r][0].item<double>(), after = mean[r][1].item<double>();
    rounds.push_back({alone, after, std::max(0.0, after - alone)});
  }
  const auto median = sort_rounds_and_take_median(rounds);
  ResumeMeasurement m;
  m.bytes = static_cast<double>(buffer.numel()) * 4.0;
  m.segment_s = median[0];
  m.after_call_s = median[1];
  m.lost_per_call_s = median[2];
  for (const auto& r : rounds) m.round_lost_s.push_back(r[2]);
  return m;
}

}  // namespace cpt::exec
