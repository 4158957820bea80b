#include "costmodel/sim/step_simulator.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include "core/check.h"
#include "core/str_cat.h"
#include "costmodel/sim/event_queue.h"

namespace cpt::cost::sim {

using K = spec::ActionKind;
using core::str_cat;

namespace {

class StepSimulation {
 public:
  // One entry of `d` per simulated replica (one: the symmetric mode).
  StepSimulation(const spec::PipelineSchedule& s, const std::vector<StageDurations>& d, const std::vector<double>& act,
                 const std::vector<double>& stat, const RankSpeed& speed)
      : s_(s),
        d_(d),
        act_(act),
        speed_(speed),
        pp_(static_cast<std::size_t>(s.pp)),
        replicas_(d.size()),
        m_(s.num_microbatches) {
    const auto n = replicas_ * static_cast<std::size_t>(s.num_stages() * m_);
    act_arrival_.assign(n, kUnknown);
    grad_arrival_.assign(n, kUnknown);
    ranks_.resize(replicas_ * pp_);
    for (std::size_t r = 0; r < pp_; ++r) {
      // The backwards that complete a reduction: the rank's last (weight-gradient) backward, or
      // for ZeRO-2 the one of its lowest stage in every microbatch (when all its gradients of that
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
      std::vector<std::size_t> reductions;
      if (d.front().dp_reductions > 1) {
        reductions = lowest_backwards;
      } else if (!backwards.empty()) {
        reductions = {backwards.back()};
      }
      for (std::size_t rep = 0; rep < replicas_; ++rep) {
        auto& rk = ranks_[rep * pp_ + r];
        rk.replica = rep;
        rk.pp_rank = r;
        rk.static_bytes = stat[r];
        rk.peak = stat[r];
        rk.reductions = reductions;
        result_.memory.push_back({static_cast<int>(r), 0.0, stat[r], static_cast<int>(rep)});
      }
    }
  }

  SimulationResult run() {
    for (std::size_t g = 0; g < ranks_.size(); ++g) q_.schedule(0, [this, g] { advance(g); });
    result_.events = q_.run();
    result_.compute_busy_s.assign(pp_, 0.0);
    result_.peak_bytes.assign(pp_, 0.0);
    for (std::size_t g = 0; g < ranks_.size(); ++g) {
      const auto& rk = ranks_[g];
      CPT_CHECK(rk.finished, "pp rank ", rk.pp_rank, " of replica ", rk.replica,
                " did not finish its step (the schedule deadlocks)");
      result_.compute_busy_s[rk.pp_rank] = std::max(result_.compute_busy_s[rk.pp_rank], rk.busy_s);
      result_.peak_bytes[rk.pp_rank] = std::max(result_.peak_bytes[rk.pp_rank], rk.peak);
      // The critical rank finishes last; among ranks that the step-end collective releases together,
      // the one whose compute ended last (the one the others waited for).
      const auto& best = ranks_[static_cast<std::size_t>(result_.critical_replica) * pp_ +
                                static_cast<std::size_t>(result_.critical_rank)];
      if (rk.finish > result_.step_time.value() ||
          (rk.finish == result_.step_time.value() && rk.compute_end > best.compute_end)) {
        result_.step_time = core::Seconds(rk.finish);
        result_.critical_rank = static_cast<int>(rk.pp_rank);
        result_.critical_replica = static_cast<int>(rk.replica);
      }
    }
    const double step = result_.step_time.value();
    result_.idle_s.assign(pp_, step);
    for (const auto& rk : ranks_) {
      const double idle = std::max(0.0, step - rk.busy_s - exposed_after_backward(rk));
      result_.idle_s[rk.pp_rank] = std::min(result_.idle_s[rk.pp_rank], idle);
    }
    const auto& c = ranks_[static_cast<std::size_t>(result_.critical_replica) * pp_ +
                           static_cast<std::size_t>(result_.critical_rank)];
    result_.exposed_comm = core::Seconds(exposed_after_backward(c));
    // The bubble bounds the step on the busiest rank: with uneven stages the rank that finishes
    // last (the first, running the last backward) may hold less work and wait for the others.
    const Rank* busiest = &c;
    for (const auto& rk : ranks_) busiest = rk.busy_s > busiest->busy_s ? &rk : busiest;
    const double idle = step - busiest->busy_s - exposed_after_backward(*busiest);
    result_.bubble_fraction = step > 0 ? std::max(0.0, idle) / step : 0;
    return result_;
  }

 private:
  static constexpr double kUnknown = -1;
  struct Rank;
  static double exposed_after_backward(const Rank& rk) { return rk.tail_start + rk.after_s - rk.compute_end; }

  struct Rank {
    std::size_t replica = 0, pp_rank = 0;
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
    double after_s = 0;  // the step-end collective
    double finish = 0;
    // The compute task in progress (while busy): its start and its end, which a data-parallel
    // bucket running beside it pushes back (overlap_slowdown) and shared cores move. Its work left
    // is in seconds at the profile's rates, done at `speed` since `since`; an end event of an
    // older generation is stale.
    double task_start = 0, task_end = 0;
    double work_left = 0, speed = 1, since = 0;
    std::uint64_t generation = 0;
    double dp_until = 0;  // the end of the last data-parallel bucket on the collective stream
    // The reduction whose buckets the task in progress produces (-1: none), how many it has, and
    // those still to come before its last: bucket b is ready once `work_done` (the task's work so
    // far, booked at `since`) reaches its threshold; the last when the task ends.
    std::ptrdiff_t last_bucket_of = -1;
    int last_bucket_count = 1;
    double work_done = 0;
    std::vector<std::pair<double, int>> pending_buckets;  // (work threshold, bucket), ascending
    std::uint64_t bucket_generation = 0;
    spec::Action task{};     // the task in progress
    double task_memory = 0;  // its change of live activations at its end, in its stage's (+1 forward, -1 backward)
    std::vector<std::size_t> reductions;  // action indices of the backwards that release a reduction
  };

  // A collective of every replica's pipeline rank r: it starts when the last replica arrives.
  struct Barrier {
    std::size_t arrived = 0;
  };

  std::size_t idx(std::size_t rep, int stage, int mb) const {
    return (rep * static_cast<std::size_t>(s_.num_stages()) + static_cast<std::size_t>(stage)) *
               static_cast<std::size_t>(m_) +
           static_cast<std::size_t>(mb);
  }

  void record(std::size_t g, Stream stream, double start, double end, std::string name) {
    const auto& rk = ranks_[g];
    result_.intervals.push_back(
        Interval{static_cast<int>(rk.pp_rank), stream, start, end, std::move(name), static_cast<int>(rk.replica)});
  }

  // Queues a task on one of rank g's communication streams; returns its end.
  double comm(std::size_t g, Stream stream, double ready, double duration, std::string name) {
    auto& rk = ranks_[g];
    double& free = stream == Stream::kP2p ? rk.p2p_free : rk.comm_free;
    const double start = std::max(ready, free);
    free = start + duration;
    record(g, stream, start, free, std::move(name));
    return free;
  }

  void memory(std::size_t g, double delta) {
    auto& rk = ranks_[g];
    rk.live += delta;
    rk.peak = std::max(rk.peak, rk.static_bytes + rk.live);
    result_.memory.push_back(
        {static_cast<int>(rk.pp_rank), q_.now(), rk.static_bytes + rk.live, static_cast<int>(rk.replica)});
  }

  void wait_until(std::size_t g, double t) {
    auto& rk = ranks_[g];
    if (rk.waiting) return;
    rk.waiting = true;
    q_.schedule(t, [this, g] {
      ranks_[g].waiting = false;
      advance(g);
    });
  }

  // Bucket `b` of reduction `k` of pipeline rank r is ready on one replica. The all-reduce /
  // reduce-scatter spans every replica, so it runs once all have it, on every replica's collective
  // stream, for the longest of their durations (a ring runs at its slowest link).
  void bucket_ready(std::size_t g, std::size_t k, int b, int nb) {
    const auto r = ranks_[g].pp_rank;
    auto& barrier = buckets_[{r, k, b}];
    if (++barrier.arrived < replicas_) return;
    double start = q_.now(), dur = 0;
    for (std::size_t rep = 0; rep < replicas_; ++rep) {
      start = std::max(start, ranks_[rep * pp_ + r].comm_free);
      const auto& dd = d_[rep];
      dur = std::max(dur, dd.dp_reduce.value() / nb * (dd.dp_slowdown.empty() ? 1.0 : dd.dp_slowdown[r]));
    }
    for (std::size_t rep = 0; rep < replicas_; ++rep) {
      const auto h = rep * pp_ + r;
      const double end = comm(h, Stream::kCollective, start, dur, str_cat("dp bucket ", b + 1, "/", nb));
      // The compute it runs beside loses overlap_slowdown seconds per second of overlap.
      auto& on = ranks_[h];
      on.dp_until = std::max(on.dp_until, end);
      if (on.busy) {
        const double overlap = std::min(end, on.task_end) - std::max(end - dur, on.task_start);
        if (overlap > 0 && d_[rep].overlap_slowdown > 0) {
          on.work_left += d_[rep].overlap_slowdown * overlap * on.speed;
          schedule_end(h, on.since + on.work_left / on.speed);
        }
      }
    }
  }

  // Rank g's pending buckets at its present speed: new ready events, the older ones stale.
  void schedule_buckets(std::size_t g) {
    auto& k = ranks_[g];
    if (k.pending_buckets.empty()) return;
    const auto generation = ++k.bucket_generation;
    for (const auto& [threshold, b] : k.pending_buckets) {
      const double ready = k.since + std::max(0.0, threshold - k.work_done) / k.speed;
      q_.schedule(std::max(ready, q_.now()), [this, g, generation, b = b] {
        auto& r = ranks_[g];
        if (r.bucket_generation != generation || r.pending_buckets.empty() || r.pending_buckets.front().second != b)
          return;
        r.pending_buckets.erase(r.pending_buckets.begin());
        bucket_ready(g, static_cast<std::size_t>(r.last_bucket_of), b, r.last_bucket_count);
      });
    }
  }

  // Rank g's task now ends at `end`: a new end event, the older ones stale.
  void schedule_end(std::size_t g, double end) {
    auto& k = ranks_[g];
    k.task_end = end;
    const auto generation = ++k.generation;
    q_.schedule(end, [this, g, generation] {
      if (ranks_[g].generation == generation) end_task(g);
    });
  }

  // Shared cores (compute_sharing.h): the computing ranks' speeds change whenever one starts or
  // ends; each busy rank's work done so far is booked at its old speed and its end moved.
  void reshare() {
    if (!speed_) return;
    std::vector<char> computing(pp_, 0);
    for (const auto& k : ranks_) computing[k.pp_rank] = computing[k.pp_rank] || k.busy;
    const double now = q_.now();
    for (std::size_t g = 0; g < ranks_.size(); ++g) {
      auto& k = ranks_[g];
      if (!k.busy) continue;
      const double done = (now - k.since) * k.speed;
      k.work_left = std::max(0.0, k.work_left - done);
      k.work_done += done;
      k.since = now;
      const double speed = speed_(computing, static_cast<int>(k.pp_rank));
      if (speed == k.speed && k.task_end >= now) continue;
      k.speed = speed;
      schedule_end(g, now + k.work_left / speed);
      schedule_buckets(g);
    }
  }

  // The end of rank g's compute task.
  void end_task(std::size_t g) {
    auto& k = ranks_[g];
    const spec::Action a = k.task;
    const double freed = k.task_memory;
    // The reduction's buckets not yet ready (in order), then its last, when the backward that
    // produces them ends.
    if (k.last_bucket_of >= 0) {
      const auto red = static_cast<std::size_t>(k.last_bucket_of);
      const auto pending = std::move(k.pending_buckets);
      k.pending_buckets.clear();
      ++k.bucket_generation;
      for (const auto& [threshold, b] : pending) bucket_ready(g, red, b, k.last_bucket_count);
      k.last_bucket_of = -1;
      bucket_ready(g, red, k.last_bucket_count - 1, k.last_bucket_count);
    }
    record(g, Stream::kCompute, k.task_start, k.task_end, spec::to_string(a));
    k.busy_s += k.task_end - k.task_start;
    k.busy = false;
    if (freed != 0) memory(g, freed * act_[static_cast<std::size_t>(a.stage)]);
    reshare();
    advance(g);
  }

  void advance(std::size_t g) {
    auto& rk = ranks_[g];
    const auto rep = rk.replica;
    const auto& d = d_[rep];
    const auto& list = s_.per_rank[rk.pp_rank];
    while (!rk.busy && rk.next < list.size()) {
      const spec::Action a = list[rk.next];
      const auto su = static_cast<std::size_t>(a.stage);
      const double now = q_.now();
      if (a.kind == K::kRecvActivation || a.kind == K::kRecvGrad) {
        const double at =
            (a.kind == K::kRecvActivation ? act_arrival_ : grad_arrival_)[idx(rep, a.stage, a.microbatch)];
        if (at == kUnknown) return;  // the sender has not posted it; its send will wake us
        if (at > now) return wait_until(g, at);
        ++rk.next;
      } else if (a.kind == K::kSendActivation) {
        const double end = comm(g, Stream::kP2p, now, d.p2p_after_s[su], str_cat("send act ", spec::to_string(a)));
        act_arrival_[idx(rep, a.stage + 1, a.microbatch)] = end;
        const auto to = rep * pp_ + static_cast<std::size_t>((a.stage + 1) % s_.pp);
        q_.schedule(end, [this, to] { advance(to); });
        ++rk.next;
      } else if (a.kind == K::kSendGrad) {
        const double end = comm(g, Stream::kP2p, now, d.p2p_after_s[su - 1], str_cat("send grad ", spec::to_string(a)));
        grad_arrival_[idx(rep, a.stage - 1, a.microbatch)] = end;
        const auto to = rep * pp_ + static_cast<std::size_t>((a.stage - 1) % s_.pp);
        q_.schedule(end, [this, to] { advance(to); });
        ++rk.next;
      } else {
        const bool fwd = a.kind == K::kForward;
        double dur = (fwd ? d.forward_s : d.backward_s)[su];
        if (a.kind == K::kBackwardInput || a.kind == K::kBackwardWeight) {
          CPT_CHECK(d.weight_grad_s.size() == d.backward_s.size(), "split backward ", spec::to_string(a),
                    " needs weight-gradient durations");
          const double w = d.weight_grad_s[su];
          dur = a.kind == K::kBackwardInput ? dur - w : w;
        }
        // Compute lost to the communication beside it: ZeRO-3's hidden gathers and reduce-scatters
        // (the input-gradient part of a split backward has them), and the data-parallel buckets
        // still running from earlier backwards.
        const auto& z3 = fwd ? d.zero3_overlapped_forward_s : d.zero3_overlapped_backward_s;
        if (!z3.empty() && a.kind != K::kBackwardWeight) dur += d.overlap_slowdown * z3[su];
        const double unslowed = dur;
        if (rk.dp_until > now) dur += d.overlap_slowdown * std::min(unslowed, rk.dp_until - now);
        // Activations are freed by the (full or weight-gradient) backward: spec::max_live_weight's rule.
        const double freed = fwd ? 1 : (a.kind == K::kBackwardInput ? 0 : -1);
        rk.busy = true;
        rk.task = a;
        rk.task_memory = freed;
        rk.task_start = now;
        rk.since = now;
        rk.work_left = dur;
        rk.work_done = 0;
        const std::size_t at = rk.next;
        ++rk.next;
        // Gradient buckets of a reduction become ready through this backward, at their share of its
        // unslowed work; the last one when it ends (end_task, before the rank looks at its tail).
        const auto red = std::find(rk.reductions.begin(), rk.reductions.end(), at);
        if (!fwd && d.dp_reduce.value() > 0 && red != rk.reductions.end()) {
          const int nb = std::max(1, d.dp_buckets);
          rk.last_bucket_of = red - rk.reductions.begin();
          rk.last_bucket_count = nb;
          rk.pending_buckets.clear();
          for (int b = 0; b + 1 < nb; ++b) rk.pending_buckets.emplace_back(unslowed * (b + 1) / nb, b);
        }
        schedule_end(g, now + dur / rk.speed);
        schedule_buckets(g);
        reshare();
        return;
      }
    }
    if (!rk.busy && rk.next == list.size() && !rk.finished && !rk.tail_scheduled) {
      // All compute done: wait for the communication stream, then the step-end collective (with
      // every replica) and the optimizer.
      rk.tail_scheduled = true;
      rk.compute_end = q_.now();
      q_.schedule(std::max(q_.now(), rk.comm_free), [this, g] { tail(g); });
    }
  }

  void tail(std::size_t g) {
    auto& rk = ranks_[g];
    if (rk.comm_free > q_.now()) {  // buckets queued after we looked
      q_.schedule(rk.comm_free, [this, g] { tail(g); });
      return;
    }
    const auto r = rk.pp_rank;
    if (++tails_[r].arrived < replicas_) return;
    // The last replica of pipeline rank r is here: the step-end collective spans them all.
    double start = q_.now();
    for (std::size_t rep = 0; rep < replicas_; ++rep) start = std::max(start, ranks_[rep * pp_ + r].comm_free);
    double after = 0;
    for (const auto& dd : d_)
      after = std::max(after, dd.dp_after.value() * (dd.dp_slowdown.empty() ? 1.0 : dd.dp_slowdown[r]));
    for (std::size_t rep = 0; rep < replicas_; ++rep) {
      const auto h = rep * pp_ + r;
      auto& k = ranks_[h];
      k.tail_start = start;
      k.after_s = after;
      double t = start;
      if (after > 0) t = comm(h, Stream::kCollective, t, after, "step-end collectives");
      if (const double outside = d_[rep].outside_schedule.value(); outside > 0) {
        record(h, Stream::kCompute, t, t + outside, "straggler wait and call dispatch");
        t += outside;
      }
      const double opt = d_[rep].optimizer.value();
      record(h, Stream::kCompute, t, t + opt, "optimizer");
      k.busy_s += opt;
      k.finish = t + opt;
      k.finished = true;
    }
  }

  const spec::PipelineSchedule& s_;
  const std::vector<StageDurations>& d_;
  const std::vector<double>& act_;
  const RankSpeed& speed_;
  std::size_t pp_;
  std::size_t replicas_;
  int m_;
  EventQueue q_;
  std::vector<double> act_arrival_, grad_arrival_;
  std::vector<Rank> ranks_;  // replica-major: ranks_[replica · pp + pp_rank]
  std::map<std::tuple<std::size_t, std::size_t, int>, Barrier> buckets_;
  std::map<std::size_t, Barrier> tails_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate_replicas(const spec::PipelineSchedule& schedule, const std::vector<StageDurations>& replicas,
                                   const std::vector<double>& activation_bytes_per_stage,
                                   const std::vector<double>& static_bytes_per_rank, const RankSpeed& speed) {
  const auto stages = static_cast<std::size_t>(schedule.num_stages());
  CPT_CHECK(!replicas.empty(), "no replica to simulate");
  for (const auto& d : replicas) {
    CPT_CHECK(d.forward_s.size() == stages && d.backward_s.size() == stages && d.p2p_after_s.size() == stages &&
                  d.dp_reductions == replicas.front().dp_reductions,
              "per-stage durations do not match the schedule's ", stages, " stages");
    CPT_CHECK(d.zero3_overlapped_forward_s.size() == d.zero3_overlapped_backward_s.size() &&
                  (d.zero3_overlapped_forward_s.empty() || d.zero3_overlapped_forward_s.size() == stages),
              "ZeRO-3's overlapped communication is not given per stage (", stages, " stages)");
  }
  CPT_CHECK(activation_bytes_per_stage.size() == stages &&
                static_bytes_per_rank.size() == static_cast<std::size_t>(schedule.pp),
            "per-stage inputs do not match the schedule's ", stages, " stages");
  StepSimulation sim(schedule, replicas, activation_bytes_per_stage, static_bytes_per_rank, speed);
  return sim.run();
}

SimulationResult simulate_step(const spec::PipelineSchedule& schedule, const StageDurations& durations,
                               const std::vector<double>& activation_bytes_per_stage,
                               const std::vector<double>& static_bytes_per_rank, const RankSpeed& speed) {
  return simulate_replicas(schedule, {durations}, activation_bytes_per_stage, static_bytes_per_rank, speed);
}

}  // namespace cpt::cost::sim
