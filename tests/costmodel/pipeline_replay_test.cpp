#include "costmodel/pipeline_replay.h"

#include <gtest/gtest.h>

namespace cpt::cost {
namespace {

// Uniform stages, forward 1, backward 2 (readable units): 1F1B takes (m + p − 1)·(f + b), so the
// bubble is (p − 1)/(m + p − 1) of the step (Narayanan et al. 2021, §2.2).
TEST(PipelineReplay, OneFOneBMatchesTheClosedForm) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8, 32}) {
      const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, p, 1, m);
      const std::vector<double> f(static_cast<std::size_t>(p), 1.0), b(static_cast<std::size_t>(p), 2.0),
          z(static_cast<std::size_t>(p), 0.0);
      const auto r = replay_schedule(s, f, b, z);
      EXPECT_DOUBLE_EQ(r.makespan.value(), (m + p - 1) * 3.0) << p << " " << m;
      EXPECT_DOUBLE_EQ(r.busy[0].value(), m * 3.0);
      const auto g = replay_schedule(spec::make_schedule(spec::ScheduleKind::kGPipe, p, 1, m), f, b, z);
      EXPECT_DOUBLE_EQ(g.makespan.value(), (m + p - 1) * 3.0);  // same bubble, more memory
    }
  }
}

// Interleaving with v chunks of time f/v and b/v divides the bubble by v: (p − 1)·(f + b)/v.
TEST(PipelineReplay, InterleavingDividesTheBubble) {
  const int p = 4, v = 2, m = 8;
  const auto s = spec::make_schedule(spec::ScheduleKind::kInterleaved1F1B, p, v, m);
  const std::vector<double> f(8, 0.5), b(8, 1.0), z(8, 0.0);
  const auto r = replay_schedule(s, f, b, z);
  EXPECT_DOUBLE_EQ(r.makespan.value(), m * 3.0 + (p - 1) * 3.0 / v);
}

// ZB-H1 with forward, input gradient and weight gradient 1 each (backward 2): the weight parts fill
// the bubble, which shrinks from (p − 1)·3 to (p − 1)·(3 − 2·1), a third (Qi et al. 2024, ZB-H1);
// the closed form says the same.
TEST(PipelineReplay, ZeroBubbleH1CutsTheBubbleToAThird) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 32}) {
      const auto S = static_cast<std::size_t>(p);
      const std::vector<double> f(S, 1.0), b(S, 2.0), w(S, 1.0), z(S, 0.0);
      const auto zb = spec::make_schedule(spec::ScheduleKind::kZeroBubbleH1, p, 1, m);
      const double one_f_one_b = (m + p - 1) * 3.0;
      const double expected = m >= p ? m * 3.0 + (p - 1) * 1.0 : -1;
      const auto r = replay_schedule(zb, f, b, z, w);
      if (expected > 0) {
        EXPECT_DOUBLE_EQ(r.makespan.value(), expected) << p << " " << m;
      }
      EXPECT_LE(r.makespan.value(), one_f_one_b) << p << " " << m;
      EXPECT_DOUBLE_EQ(r.busy[0].value(), m * 3.0);
      if (expected > 0) {
        EXPECT_DOUBLE_EQ(closed_form_makespan(p, 1, m, f, b, z, w).makespan.value(), expected) << p << " " << m;
      }
    }
  }
}

// A transfer time on every boundary delays the pipeline fill and drain.
TEST(PipelineReplay, TransfersDelayFillAndDrain) {
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 2, 1, 1);
  const std::vector<double> f{1, 1}, b{2, 2}, x{10, 0};
  EXPECT_DOUBLE_EQ(replay_schedule(s, f, b, x).makespan.value(), 1 + 10 + 1 + 2 + 10 + 2);
}

// The closed form equals the replay for uniform stages (every schedule, every shape in the sweep)
// and stays within 5% of it for uneven stages (first and last heavier, as with embedding and head).
TEST(PipelineReplay, ClosedFormMatchesTheReplay) {
  int checked = 0;
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16, 32}) {
      for (int v : {1, 2, 3}) {
        const auto kind = v > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
        if (v > 1 && (p < 2 || m % p != 0)) continue;
        const auto S = static_cast<std::size_t>(p * v);
        const auto s = spec::make_schedule(kind, p, v, m);
        std::vector<double> f(S, 1.0 / v), b(S, 2.0 / v);
        const std::vector<double> z(S, 0.0);
        EXPECT_NEAR(closed_form_makespan(p, v, m, f, b, z).makespan.value(), replay_schedule(s, f, b, z).makespan.value(),
                    1e-9)
            << p << " " << v << " " << m;
        f.front() *= 1.2;
        b.back() *= 1.3;
        const double exact = replay_schedule(s, f, b, z).makespan.value();
        EXPECT_NEAR(closed_form_makespan(p, v, m, f, b, z).makespan.value() / exact, 1.0, 0.05) << p << " " << v << " " << m;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24 + 12 + 12);  // v = 1: all 24; v = 2 and 3: p >= 2 with m % p == 0
}

// At speed 1 everywhere the fluid replay is the list replay, for every schedule and with
// transfers and uneven stages.
TEST(PipelineReplayAtSpeeds, AtSpeedOneItIsTheReplay) {
  const RankSpeed one = [](std::span<const char>, int) { return 1.0; };
  for (const auto kind : {spec::ScheduleKind::k1F1B, spec::ScheduleKind::kGPipe, spec::ScheduleKind::kZeroBubbleH1}) {
    for (int p : {1, 2, 4}) {
      for (int m : {1, 3, 8}) {
        const auto s = spec::make_schedule(kind, p, 1, m);
        std::vector<double> f, b, w, x;
        for (int i = 0; i < p; ++i) {
          f.push_back(1.0 + 0.3 * i);
          b.push_back(2.0 + 0.5 * (i % 2));
          w.push_back(0.8);
          x.push_back(0.1 * i);
        }
        const std::span<const double> split = kind == spec::ScheduleKind::kZeroBubbleH1 ? std::span<const double>(w)
                                                                                         : std::span<const double>();
        const auto a = replay_schedule(s, f, b, x, split);
        const auto c = replay_schedule_at_speeds(s, f, b, x, split, one);
        EXPECT_NEAR(c.makespan.value(), a.makespan.value(), 1e-9) << spec::to_string(kind) << " " << p << " " << m;
        for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
          EXPECT_NEAR(c.busy[r].value(), a.busy[r].value(), 1e-9);
          EXPECT_NEAR(c.work[r].value(), a.work[r].value(), 1e-9);
          EXPECT_NEAR(c.finish[r].value(), a.finish[r].value(), 1e-9);
        }
      }
    }
  }
  const auto s = spec::make_schedule(spec::ScheduleKind::kInterleaved1F1B, 4, 2, 8);
  const std::vector<double> f(8, 0.5), b(8, 1.0), z(8, 0.0);
  EXPECT_NEAR(replay_schedule_at_speeds(s, f, b, z, {}, one).makespan.value(), replay_schedule(s, f, b, z).makespan.value(),
              1e-9);
}

// Two pipeline ranks sharing cores: a rank computing alone runs at speed 2, both together at 1.
// 1F1B, p = 2, m = 2, forward 1, backward 2, by hand:
//   0.0-0.5  r0 F0 alone                 2.5-3.5  r0 B0 (1 of 2 done), r1 F1 together
//   0.5-1.5  r0 F1, r1 F0 together       3.5-4.5  r0 B0 (done), r1 B1 (1 of 2) together
//   1.5-2.5  r1 B0 alone (2 at speed 2)  4.5-5.0  r1 B1 alone;  5.0-6.0  r0 B1 alone
// Makespan 6 (9 at speed 1, 4.5 at speed 2); each rank computes 4.5 s of wall clock for 6 s of work.
TEST(PipelineReplayAtSpeeds, RanksComputingAloneRunFaster) {
  const RankSpeed shared = [](std::span<const char> computing, int) {
    return computing[0] && computing[1] ? 1.0 : 2.0;
  };
  const auto s = spec::make_schedule(spec::ScheduleKind::k1F1B, 2, 1, 2);
  const std::vector<double> f(2, 1.0), b(2, 2.0), z(2, 0.0);
  const auto r = replay_schedule_at_speeds(s, f, b, z, {}, shared);
  EXPECT_NEAR(r.makespan.value(), 6.0, 1e-9);
  EXPECT_NEAR(r.finish[0].value(), 6.0, 1e-9);
  EXPECT_NEAR(r.finish[1].value(), 5.0, 1e-9);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(r.busy[i].value(), 4.5, 1e-9);
    EXPECT_NEAR(r.work[i].value(), 6.0, 1e-9);
  }
}

}  // namespace
}  // namespace cpt::cost
