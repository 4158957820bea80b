#include "costmodel/sim/step_simulator.h"

#include <algorithm>
#include <functional>

#include "core/check.h"
#include "core/str_cat.h"
#include "costmodel/sim/event_queue.h"

namespace cpt::cost::sim {

using K = spec::ActionKind;
using core::str_cat;

namespace {

class StepSimulation {
 public:
  StepSimulation(const spec::PipelineSchedule& s, const StageDurations& d, const std::vector<double>& act,
                 const std::vector<double>& stat)
      : s_(s), d_(d), act_(act), pp_(static_cast<std::size_t>(s.pp)), m_(s.num_microbatches) {
    const auto n = static_cast<std::size_t>(s.num_stages() * m_);
    act_arrival_.assign(n, kUnknown);
    grad_arrival_.assign(n, kUnknown);
    ranks_.resize(pp_);
    for (std::size_t r = 0; r < pp_; ++r) {
      ranks_[r].live = 0;
      ranks_[r].static_bytes = stat[r];
      ranks_[r].peak = stat[r];
      // The backward that completes a reduction: the rank's last backward, or for ZeRO-2 the
      // backward of its lowest stage in every microbatch (when all its gradients of that
      // microbatch exist).
      const auto& list = s.per_rank[r];
      int lowest = s.num_stages();
      for (const auto& a : list) lowest = std::min(lowest, a.stage);
      std::vector<std::size_t> backwards, lowest_backwards;
      for (std::size_t i = 0; i < list.size(); ++i) {
        // The weight gradients exist after the full backward, or after the W part of a split one.
        if (list[i].kind != K::kBackward && list[i].kind != K::kBackwardWeight) continue;
        backwards.push_back(i);
        if (list[i].stage == lowest) lowest_backwards.push_back(i);
      }
      if (d.dp_reductions > 1) {
        ranks_[r].reductions = lowest_backwards;
      } else if (!backwards.empty()) {
        ranks_[r].reductions = {backwards.back()};
      }
      result_.memory.push_back({static_cast<int>(r), 0.0, stat[r]});
    }
  }

  SimulationResult run() {
    for (std::size_t r = 0; r < pp_; ++r) q_.schedule(0, [this, r] { advance(r); });
    result_.events = q_.run();
    for (std::size_t r = 0; r < pp_; ++r) {
      CPT_CHECK(ranks_[r].finished, "pp rank ", r, " did not finish its step (the schedule deadlocks)");
      result_.compute_busy_s.push_back(ranks_[r].busy_s);
      result_.peak_bytes.push_back(ranks_[r].peak);
      if (ranks_[r].finish > result_.step_time.value()) {
        result_.step_time = core::Seconds(ranks_[r].finish);
        result_.critical_rank = static_cast<int>(r);
      }
    }
    const auto& c = ranks_[static_cast<std::size_t>(result_.critical_rank)];
    const double step = result_.step_time.value();
    result_.bubble_fraction = step > 0 ? (c.compute_end - (c.busy_s - d_.optimizer.value())) / step : 0;
    result_.exposed_comm = core::Seconds(c.tail_start + d_.dp_after.value() - c.compute_end);
    return result_;
  }

 private:
  static constexpr double kUnknown = -1;

  struct Rank {
    std::size_t next = 0;
    bool busy = false;
    bool waiting = false;  // an advance() is scheduled for a future arrival
    bool finished = false;
    bool tail_scheduled = false;
    double p2p_free = 0;
    double comm_free = 0;  // the collective stream
    double busy_s = 0;
    double live = 0;
    double static_bytes = 0;
    double peak = 0;
    double compute_end = 0;
    double tail_start = 0;
    double finish = 0;
    std::vector<std::size_t> reductions;  // action indices of the backwards that release a reduction
  };

  std::size_t idx(int stage, int mb) const { return static_cast<std::size_t>(stage * m_ + mb); }

  void record(std::size_t r, Stream stream, double start, double end, std::string name) {
    result_.intervals.push_back(Interval{static_cast<int>(r), stream, start, end, std::move(name)});
  }

  // Queues a task on one of rank r's communication streams; returns its end.
  double comm(std::size_t r, Stream stream, double ready, double duration, std::string name) {
    auto& rk = ranks_[r];
    double& free = stream == Stream::kP2p ? rk.p2p_free : rk.comm_free;
    const double start = std::max(ready, free);
    free = start + duration;
    record(r, stream, start, free, std::move(name));
    return free;
  }

  void memory(std::size_t r, double delta) {
    auto& rk = ranks_[r];
    rk.live += delta;
    rk.peak = std::max(rk.peak, rk.static_bytes + rk.live);
    result_.memory.push_back({static_cast<int>(r), q_.now(), rk.static_bytes + rk.live});
  }

  void wait_until(std::size_t r, double t) {
    auto& rk = ranks_[r];
    if (rk.waiting) return;
    rk.waiting = true;
    q_.schedule(t, [this, r] {
      ranks_[r].waiting = false;
      advance(r);
    });
  }

  void advance(std::size_t r) {
    auto& rk = ranks_[r];
    const auto& list = s_.per_rank[r];
    while (!rk.busy && rk.next < list.size()) {
      const spec::Action a = list[rk.next];
      const auto su = static_cast<std::size_t>(a.stage);
      const double now = q_.now();
      if (a.kind == K::kRecvActivation || a.kind == K::kRecvGrad) {
        const double at = (a.kind == K::kRecvActivation ? act_arrival_ : grad_arrival_)[idx(a.stage, a.microbatch)];
        if (at == kUnknown) return;  // the sender has not posted it; its send will wake us
        if (at > now) return wait_until(r, at);
        ++rk.next;
      } else if (a.kind == K::kSendActivation) {
        const double end = comm(r, Stream::kP2p, now, d_.p2p_after_s[su], str_cat("send act ", spec::to_string(a)));
        act_arrival_[idx(a.stage + 1, a.microbatch)] = end;
        const auto to = static_cast<std::size_t>((a.stage + 1) % s_.pp);
        q_.schedule(end, [this, to] { advance(to); });
        ++rk.next;
      } else if (a.kind == K::kSendGrad) {
        const double end = comm(r, Stream::kP2p, now, d_.p2p_after_s[su - 1], str_cat("send grad ", spec::to_string(a)));
        grad_arrival_[idx(a.stage - 1, a.microbatch)] = end;
        const auto to = static_cast<std::size_t>((a.stage - 1) % s_.pp);
        q_.schedule(end, [this, to] { advance(to); });
        ++rk.next;
      } else {
        const bool fwd = a.kind == K::kForward;
        double dur = (fwd ? d_.forward_s : d_.backward_s)[su];
        if (a.kind == K::kBackwardInput || a.kind == K::kBackwardWeight) {
          CPT_CHECK(d_.weight_grad_s.size() == d_.backward_s.size(), "split backward ", spec::to_string(a),
                    " needs weight-gradient durations");
          const double w = d_.weight_grad_s[su];
          dur = a.kind == K::kBackwardInput ? dur - w : w;
        }
        // Activations are freed by the (full or weight-gradient) backward: spec::max_live_weight's rule.
        const double freed = fwd ? 1 : (a.kind == K::kBackwardInput ? 0 : -1);
        const double end = now + dur;
        rk.busy = true;
        const std::size_t at = rk.next;
        ++rk.next;
        // Gradient buckets of a reduction become ready through this backward (before its end event,
        // so that they are queued when the rank looks at its tail).
        if (!fwd && d_.dp_reduce.value() > 0 &&
            std::find(rk.reductions.begin(), rk.reductions.end(), at) != rk.reductions.end()) {
          const int nb = std::max(1, d_.dp_buckets);
          for (int b = 0; b < nb; ++b) {
            const double ready = now + dur * (b + 1) / nb;
            q_.schedule(ready, [this, r, b, nb] {
              comm(r, Stream::kCollective, q_.now(), d_.dp_reduce.value() / nb, str_cat("dp bucket ", b + 1, "/", nb));
            });
          }
        }
        q_.schedule(end, [this, r, a, now, end, freed] {
          auto& k = ranks_[r];
          record(r, Stream::kCompute, now, end, spec::to_string(a));
          k.busy_s += end - now;
          k.busy = false;
          if (freed != 0) memory(r, freed * act_[static_cast<std::size_t>(a.stage)]);
          advance(r);
        });
        return;
      }
    }
    if (!rk.busy && rk.next == list.size() && !rk.finished && !rk.tail_scheduled) {
      // All compute done: wait for the communication stream, run the step-end collective, then the
      // optimizer.
      rk.tail_scheduled = true;
      rk.compute_end = q_.now();
      q_.schedule(std::max(q_.now(), rk.comm_free), [this, r] { tail(r); });
    }
  }

  void tail(std::size_t r) {
    auto& rk = ranks_[r];
    if (rk.comm_free > q_.now()) {  // buckets queued after we looked
      q_.schedule(rk.comm_free, [this, r] { tail(r); });
      return;
    }
    rk.tail_start = q_.now();
    double t = rk.tail_start;
    if (d_.dp_after.value() > 0) {
      t = comm(r, Stream::kCollective, t, d_.dp_after.value(), "dp after (all-gather / all-reduce)");
    }
    record(r, Stream::kCompute, t, t + d_.optimizer.value(), "optimizer");
    rk.busy_s += d_.optimizer.value();
    rk.finish = t + d_.optimizer.value();
    rk.finished = true;
  }

  const spec::PipelineSchedule& s_;
  const StageDurations& d_;
  const std::vector<double>& act_;
  std::size_t pp_;
  int m_;
  EventQueue q_;
  std::vector<double> act_arrival_, grad_arrival_;
  std::vector<Rank> ranks_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate_step(const spec::PipelineSchedule& schedule, const StageDurations& durations,
                               const std::vector<double>& activation_bytes_per_stage,
                               const std::vector<double>& static_bytes_per_rank) {
  const auto stages = static_cast<std::size_t>(schedule.num_stages());
  CPT_CHECK(durations.forward_s.size() == stages && durations.backward_s.size() == stages &&
                durations.p2p_after_s.size() == stages && activation_bytes_per_stage.size() == stages &&
                static_bytes_per_rank.size() == static_cast<std::size_t>(schedule.pp),
            "per-stage inputs do not match the schedule's ", stages, " stages");
  StepSimulation sim(schedule, durations, activation_bytes_per_stage, static_bytes_per_rank);
  return sim.run();
}

}  // namespace cpt::cost::sim
