#include "costmodel/pipeline_replay.h"

#include <algorithm>
#include <optional>

#include "core/check.h"

namespace cpt::cost {

using K = spec::ActionKind;

namespace {

constexpr double kUnknown = -1.0;

// What an action means to both replays, per (stage, microbatch): how long a compute action takes,
// when a receive's data arrives (kUnknown until it is sent), and that a send's data arrives
// `p2p_after` after the compute that produced it ends.
class ActionTimes {
 public:
  ActionTimes(const spec::PipelineSchedule& s, std::span<const double> fwd, std::span<const double> bwd,
              std::span<const double> p2p, std::span<const double> wgrad)
      : m_(s.num_microbatches),
        fwd_(fwd),
        bwd_(bwd),
        p2p_(p2p),
        wgrad_(wgrad),
        act_arrives_(static_cast<std::size_t>(s.num_stages() * m_), kUnknown),
        grad_arrives_(act_arrives_),
        fwd_end_(static_cast<std::size_t>(s.num_stages() * m_), 0.0),
        bwd_end_(fwd_end_) {
    const int stages = s.num_stages();
    CPT_CHECK(static_cast<int>(fwd.size()) == stages && static_cast<int>(bwd.size()) == stages &&
                  static_cast<int>(p2p.size()) == stages,
              "durations for ", fwd.size(), "/", bwd.size(), "/", p2p.size(), " stages, schedule has ", stages);
  }

  // Seconds of a compute action (forward, backward, or a split backward's I or W part); nullopt
  // for the others.
  [[nodiscard]] std::optional<double> compute_seconds(const spec::Action& a) const {
    const auto su = static_cast<std::size_t>(a.stage);
    switch (a.kind) {
      case K::kForward:
        return fwd_[su];
      case K::kBackward:
        return bwd_[su];
      case K::kBackwardInput:
      case K::kBackwardWeight:
        CPT_CHECK(wgrad_.size() == fwd_.size(), "split backward ", spec::to_string(a),
                  " needs weight-gradient durations for ", fwd_.size(), " stages, got ", wgrad_.size());
        return a.kind == K::kBackwardInput ? bwd_[su] - wgrad_[su] : wgrad_[su];
      default:
        return std::nullopt;
    }
  }
  [[nodiscard]] static bool is_receive(const spec::Action& a) {
    return a.kind == K::kRecvActivation || a.kind == K::kRecvGrad;
  }
  // When a receive's data arrives; kUnknown until its sender has sent it.
  [[nodiscard]] double arrival(const spec::Action& recv) const {
    return (recv.kind == K::kRecvActivation ? act_arrives_ : grad_arrives_)[idx(recv.stage, recv.microbatch)];
  }
  // A send action: its data arrives at the neighbouring stage after the transfer.
  void send(const spec::Action& a) {
    const auto su = static_cast<std::size_t>(a.stage);
    if (a.kind == K::kSendActivation) {
      act_arrives_[idx(a.stage + 1, a.microbatch)] = fwd_end_[idx(a.stage, a.microbatch)] + p2p_[su];
    } else if (a.kind == K::kSendGrad) {
      grad_arrives_[idx(a.stage - 1, a.microbatch)] = bwd_end_[idx(a.stage, a.microbatch)] + p2p_[su - 1];
    }
  }
  // A compute action ended at `t` (a backward's, or a split backward's I part's, end is when its
  // input gradient can be sent).
  void compute_ended(const spec::Action& a, double t) {
    if (a.kind == K::kForward) fwd_end_[idx(a.stage, a.microbatch)] = t;
    if (a.kind == K::kBackward || a.kind == K::kBackwardInput) bwd_end_[idx(a.stage, a.microbatch)] = t;
  }

 private:
  [[nodiscard]] std::size_t idx(int stage, int mb) const { return static_cast<std::size_t>(stage * m_ + mb); }
  int m_;
  std::span<const double> fwd_, bwd_, p2p_, wgrad_;
  std::vector<double> act_arrives_, grad_arrives_;  // input / output gradient of (stage, mb)
  std::vector<double> fwd_end_, bwd_end_;
};

ReplayResult result_of(const std::vector<double>& busy, const std::vector<double>& work,
                       const std::vector<double>& finish) {
  ReplayResult out;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    out.busy.emplace_back(busy[r]);
    out.work.emplace_back(work[r]);
    out.finish.emplace_back(finish[r]);
    out.makespan = std::max(out.makespan, core::Seconds(finish[r]));
  }
  return out;
}

}  // namespace

ReplayResult replay_schedule(const spec::PipelineSchedule& s, std::span<const double> fwd, std::span<const double> bwd,
                             std::span<const double> p2p, std::span<const double> wgrad) {
  ActionTimes times(s, fwd, bwd, p2p, wgrad);
  const auto pp = static_cast<std::size_t>(s.pp);
  std::vector<std::size_t> next(pp, 0);
  std::vector<double> clock(pp, 0.0);
  std::vector<double> busy(pp, 0.0);
  std::size_t remaining = 0;
  for (const auto& l : s.per_rank) remaining += l.size();
  while (remaining > 0) {
    bool progress = false;
    for (std::size_t r = 0; r < pp; ++r) {
      const auto& list = s.per_rank[r];
      while (next[r] < list.size()) {
        const auto& a = list[next[r]];
        double& t = clock[r];
        if (ActionTimes::is_receive(a)) {
          const double at = times.arrival(a);
          if (at == kUnknown) break;
          t = std::max(t, at);
        } else if (const auto d = times.compute_seconds(a)) {
          t += *d;
          busy[r] += *d;
          times.compute_ended(a, t);
        } else {
          times.send(a);
        }
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    CPT_CHECK(progress, "schedule deadlocks; run find_schedule_error first");
  }
  return result_of(busy, busy, clock);
}

ReplayResult replay_schedule_at_speeds(const spec::PipelineSchedule& s, std::span<const double> fwd,
                                       std::span<const double> bwd, std::span<const double> p2p,
                                       std::span<const double> wgrad, const RankSpeed& speed) {
  ActionTimes times(s, fwd, bwd, p2p, wgrad);
  const auto pp = static_cast<std::size_t>(s.pp);
  std::vector<std::size_t> next(pp, 0);
  std::vector<char> computing(pp, 0);
  std::vector<double> remaining(pp, 0.0), duration(pp, 0.0), wake(pp, kUnknown), rate(pp, 0.0);
  std::vector<double> busy(pp, 0.0), work(pp, 0.0), finish(pp, 0.0);
  double now = 0;
  // Runs rank r's non-compute actions at `now` until it starts a compute, waits or is done.
  // Returns whether anything happened.
  const auto advance = [&](std::size_t r) {
    bool moved = false;
    const auto& list = s.per_rank[r];
    while (!computing[r] && next[r] < list.size()) {
      const auto& a = list[next[r]];
      if (ActionTimes::is_receive(a)) {
        const double at = times.arrival(a);
        if (at == kUnknown || at > now) {
          wake[r] = at;
          return moved;
        }
        wake[r] = kUnknown;
      } else if (const auto d = times.compute_seconds(a)) {
        CPT_CHECK(*d >= 0, "replay_schedule_at_speeds: ", spec::to_string(a), " lasts ", *d, " s");
        duration[r] = *d;
        remaining[r] = *d;
        computing[r] = 1;
        return true;
      } else {
        times.send(a);
      }
      ++next[r];
      moved = true;
      finish[r] = now;
    }
    return moved;
  };
  for (;;) {
    // Settle every rank at `now` (a send may release another rank's receive at this instant).
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t r = 0; r < pp; ++r) moved = advance(r) || moved;
    }
    // The next event: a compute ending at its current rate, or a transfer arriving.
    double dt = -1;
    for (std::size_t r = 0; r < pp; ++r) {
      if (computing[r]) {
        rate[r] = speed(computing, static_cast<int>(r));
        CPT_CHECK(rate[r] > 0, "replay_schedule_at_speeds: rank ", r, " has speed ", rate[r]);
        const double left = remaining[r] / rate[r];
        dt = dt < 0 ? left : std::min(dt, left);
      } else if (wake[r] != kUnknown) {
        dt = dt < 0 ? wake[r] - now : std::min(dt, wake[r] - now);
      }
    }
    if (dt < 0) break;  // nothing computes and nothing is on its way: done (or deadlocked, below)
    now += dt;
    for (std::size_t r = 0; r < pp; ++r) {
      if (!computing[r]) continue;
      busy[r] += dt;
      remaining[r] -= rate[r] * dt;
      if (remaining[r] > 1e-12 * std::max(1.0, duration[r])) continue;
      times.compute_ended(s.per_rank[r][next[r]], now);
      work[r] += duration[r];
      computing[r] = 0;
      ++next[r];
      finish[r] = now;
    }
  }
  for (std::size_t r = 0; r < pp; ++r) {
    CPT_CHECK(next[r] == s.per_rank[r].size(), "schedule deadlocks; run find_schedule_error first");
  }
  return result_of(busy, work, finish);
}

double bubble_fill(double f, double b, double w, bool zero_bubble) {
  return zero_bubble ? std::max(f + b - 2 * w, f) : f + b;
}

PipelineTerms closed_form_terms(int v, int m, double critical_work, double others, double transfers) {
  PipelineTerms t;
  t.bubble_s = others / v;
  t.transfers_s = 2 * transfers / v;
  t.makespan_s = m * critical_work + t.bubble_s + t.transfers_s;
  return t;
}

ReplayResult closed_form_makespan(int pp, int v, int m, std::span<const double> fwd, std::span<const double> bwd,
                                  std::span<const double> p2p, std::span<const double> wgrad) {
  const auto stages = static_cast<std::size_t>(pp * v);
  CPT_CHECK(fwd.size() == stages && bwd.size() == stages && p2p.size() == stages, "durations for ", fwd.size(),
            " stages, expected ", stages);
  const bool zero_bubble = !wgrad.empty();
  if (zero_bubble) {
    CPT_CHECK(wgrad.size() == stages, "weight-gradient durations for ", wgrad.size(), " stages, expected ", stages);
  }
  // Per rank: forward, backward and weight-gradient time over its chunks, one microbatch.
  std::vector<double> f(static_cast<std::size_t>(pp), 0.0), b(f), w(f);
  for (std::size_t s = 0; s < stages; ++s) {
    const auto r = s % static_cast<std::size_t>(pp);
    f[r] += fwd[s];
    b[r] += bwd[s];
    if (zero_bubble) w[r] += wgrad[s];
  }
  std::size_t crit = 0;
  for (std::size_t r = 1; r < f.size(); ++r) {
    if (f[r] + b[r] > f[crit] + b[crit]) crit = r;
  }
  double others = 0;
  for (std::size_t r = 0; r < f.size(); ++r) {
    if (r != crit) others += bubble_fill(f[r], b[r], w[r], zero_bubble);
  }
  double transfers = 0;
  for (std::size_t s = 0; s + 1 < stages; ++s) transfers += p2p[s];
  const PipelineTerms t = closed_form_terms(v, m, f[crit] + b[crit], others, transfers);
  ReplayResult out;
  out.makespan = core::Seconds(t.makespan_s);
  for (std::size_t r = 0; r < f.size(); ++r) {
    out.busy.emplace_back(m * (f[r] + b[r]));
    out.work.emplace_back(m * (f[r] + b[r]));
    out.finish.emplace_back(r == crit ? out.makespan.value() : m * (f[r] + b[r]));
  }
  return out;
}

}  // namespace cpt::cost
