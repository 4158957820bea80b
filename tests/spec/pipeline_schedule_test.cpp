#include "spec/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <tuple>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec {
namespace {

using K = ActionKind;

// Every schedule passes the validator over a sweep of (pp, v, m), including m < pp and m not a
// multiple of pp (GPipe and 1F1B; interleaved needs m % pp == 0, as in Megatron).
TEST(PipelineSchedule, EveryGeneratedScheduleIsValid) {
  int checked = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 17; ++m) {
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZeroBubbleH1}) {
        const auto s = make_schedule(kind, pp, 1, m);
        const auto error = find_schedule_error(s);
        ASSERT_FALSE(error) << to_string(kind) << " pp " << pp << " m " << m << ": " << *error;
        ++checked;
      }
      if (pp < 2 || m % pp != 0) continue;
      for (int v = 2; v <= 4; ++v) {
        const auto s = make_schedule(ScheduleKind::kInterleaved1F1B, pp, v, m);
        const auto error = find_schedule_error(s);
        ASSERT_FALSE(error) << "interleaved pp " << pp << " v " << v << " m " << m << ": " << *error;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 8 * 17 + 3 * 26);  // 26 (pp, m) pairs with pp >= 2 and m % pp == 0
}

// A rank's transfers per microbatch and pass are the sends and receives its schedule holds, and
// the sum of its stages' (the cost model prices the pipeline's calls with them).
TEST(PipelineSchedule, TransfersPerPassAreTheSchedulesSendsAndReceives) {
  for (const auto& [kind, pp, v] :
       {std::tuple{ScheduleKind::k1F1B, 1, 1}, std::tuple{ScheduleKind::k1F1B, 4, 1},
        std::tuple{ScheduleKind::kInterleaved1F1B, 2, 2}, std::tuple{ScheduleKind::kInterleaved1F1B, 4, 3}}) {
    const int m = 8;
    const auto s = make_schedule(kind, pp, v, m);
    for (int r = 0; r < pp; ++r) {
      int transfers = 0, activation_sends = 0, activation_receives = 0;
      for (const auto& a : s.per_rank[static_cast<std::size_t>(r)]) {
        transfers += a.kind == K::kSendActivation || a.kind == K::kRecvActivation || a.kind == K::kSendGrad ||
                     a.kind == K::kRecvGrad;
        activation_sends += a.kind == K::kSendActivation;
        activation_receives += a.kind == K::kRecvActivation;
      }
      EXPECT_EQ(transfers, 2 * m * rank_transfers_per_pass(pp, v, r)) << pp << " " << v << " " << r;
      EXPECT_EQ(activation_sends, m * rank_sends_per_pass(pp, v, r)) << pp << " " << v << " " << r;
      EXPECT_EQ(activation_receives, m * rank_receives_per_pass(pp, v, r)) << pp << " " << v << " " << r;
      int of_stages = 0;
      for (int stage = r; stage < pp * v; stage += pp) of_stages += stage_transfers_per_pass(stage, pp * v);
      EXPECT_EQ(of_stages, rank_transfers_per_pass(pp, v, r)) << pp << " " << v << " " << r;
    }
  }
}

TEST(PipelineSchedule, OneFOneBMatchesThePaperTable) {
  // pp 4, m 6: rank 0 warms up with 3 forwards, then alternates; the last rank alternates at once.
  const auto s = make_schedule(ScheduleKind::k1F1B, 4, 1, 6);
  EXPECT_EQ(to_csv(s),
            "F0.0,F0.1,F0.2,F0.3,B0.0,F0.4,B0.1,F0.5,B0.2,B0.3,B0.4,B0.5\n"
            "F1.0,F1.1,F1.2,B1.0,F1.3,B1.1,F1.4,B1.2,F1.5,B1.3,B1.4,B1.5\n"
            "F2.0,F2.1,B2.0,F2.2,B2.1,F2.3,B2.2,F2.4,B2.3,F2.5,B2.4,B2.5\n"
            "F3.0,B3.0,F3.1,B3.1,F3.2,B3.2,F3.3,B3.3,F3.4,B3.4,F3.5,B3.5\n");
}

// 1F1B holds min(pp − rank, m) microbatches; GPipe holds all m (Narayanan et al. 2021, §2.2.1).
TEST(PipelineSchedule, InFlightMicrobatches) {
  for (int pp : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8, 16}) {
      const auto one = make_schedule(ScheduleKind::k1F1B, pp, 1, m);
      const auto gpipe = make_schedule(ScheduleKind::kGPipe, pp, 1, m);
      for (int r = 0; r < pp; ++r) {
        EXPECT_EQ(max_in_flight(one, r), std::min(pp - r, m)) << pp << " " << m << " " << r;
        EXPECT_EQ(max_in_flight(gpipe, r), m);
      }
    }
  }
  // Interleaved, rank 0 of pp 4, v 2, m 8: warm-up (4−1)·2 + (2−1)·4 = 10 chunk-microbatches, +1.
  EXPECT_EQ(max_in_flight(make_schedule(ScheduleKind::kInterleaved1F1B, 4, 2, 8), 0), 11);
}

TEST(PipelineSchedule, ClosedFormInFlightEqualsTheSchedule) {
  int checked = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 24; ++m) {
      for (ScheduleKind kind :
           {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1}) {
        const bool inter = kind == ScheduleKind::kInterleaved1F1B;
        if (inter && (pp < 2 || m % pp != 0)) continue;
        for (int v = inter ? 2 : 1; v <= (inter ? 4 : 1); ++v) {
          const auto s = make_schedule(kind, pp, v, m);
          for (int r = 0; r < pp; ++r) {
            ASSERT_EQ(in_flight_closed_form(kind, pp, v, m, r), max_in_flight(s, r))
                << to_string(kind) << " pp " << pp << " v " << v << " m " << m << " rank " << r;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// ZB-H1 for pp 4, m 8 (Qi et al. 2024, ZB-H1's pattern): at step x rank r runs F(x),
// I(x − (3 − r)), W(x − 3). Rank 0 has 1F1B's warm-up of three forwards and runs each W right after
// its I; the last rank runs F and I alternately and its W's three microbatches behind.
TEST(PipelineSchedule, ZeroBubbleH1MatchesThePattern) {
  const auto s = make_schedule(ScheduleKind::kZeroBubbleH1, 4, 1, 8);
  const auto csv = to_csv(s);
  const auto first_line = csv.substr(0, csv.find('\n'));
  EXPECT_EQ(first_line,
            "F0.0,F0.1,F0.2,F0.3,I0.0,W0.0,F0.4,I0.1,W0.1,F0.5,I0.2,W0.2,F0.6,I0.3,W0.3,F0.7,I0.4,W0.4,"
            "I0.5,W0.5,I0.6,W0.6,I0.7,W0.7");
  const auto last = s.per_rank[3];
  std::vector<std::string> compute;
  for (const auto& a : last) {
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackwardInput ||
        a.kind == ActionKind::kBackwardWeight) {
      compute.push_back(to_string(a));
    }
  }
  EXPECT_EQ(core::join(std::vector<std::string>(compute.begin(), compute.begin() + 10), ","),
            "F3.0,I3.0,F3.1,I3.1,F3.2,I3.2,F3.3,I3.3,W3.0,F3.4");
  // Every rank holds at most pp microbatches whose weight gradient is pending.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(max_in_flight(s, r), 4) << r;
}

TEST(PipelineSchedule, InterleavedRanksHoldTheirChunks) {
  const auto s = make_schedule(ScheduleKind::kInterleaved1F1B, 2, 2, 4);
  for (int r = 0; r < 2; ++r) {
    for (const Action& a : s.per_rank[static_cast<std::size_t>(r)]) EXPECT_EQ(a.stage % 2, r);
  }
  EXPECT_EQ(to_csv(s).substr(0, 24), "F0.0,F0.1,F2.0,F2.1,F0.2");
}

// The validator catches each kind of broken schedule.
TEST(PipelineSchedule, ValidatorFindsMissingWrongOrderAndDeadlock) {
  const auto good = make_schedule(ScheduleKind::k1F1B, 2, 1, 2);
  ASSERT_FALSE(find_schedule_error(good));

  auto missing = good;
  missing.per_rank[1].erase(missing.per_rank[1].begin() + 1);  // drop F1.0 (after RA1.0)
  EXPECT_EQ(*find_schedule_error(missing), "missing F1.0 on pp rank 1");

  auto order = good;
  auto& r0 = order.per_rank[0];
  std::swap(r0[0], r0[1]);  // rank 0 begins F0.0, SA0.0; swapped, it sends before computing
  EXPECT_EQ(*find_schedule_error(order), "SA0.0 on pp rank 0 must run after F0.0 on pp rank 0");

  // Rank 1 waits for microbatch 1 before 0 while rank 0 waits for the gradient of 0: a cycle.
  PipelineSchedule dead{ScheduleKind::k1F1B, 2, 1, 2, {}};
  dead.per_rank = {{{K::kForward, 0, 0},
                    {K::kSendActivation, 0, 0},
                    {K::kRecvGrad, 0, 0},
                    {K::kBackward, 0, 0},
                    {K::kForward, 0, 1},
                    {K::kSendActivation, 0, 1},
                    {K::kRecvGrad, 0, 1},
                    {K::kBackward, 0, 1}},
                   {{K::kRecvActivation, 1, 1},
                    {K::kForward, 1, 1},
                    {K::kBackward, 1, 1},
                    {K::kSendGrad, 1, 1},
                    {K::kRecvActivation, 1, 0},
                    {K::kForward, 1, 0},
                    {K::kBackward, 1, 0},
                    {K::kSendGrad, 1, 0}}};
  EXPECT_EQ(*find_schedule_error(dead),
            "deadlock: every unfinished rank waits on a receive whose send never comes: RG0.0 on pp rank 0, RA1.1 on "
            "pp rank 1");

  auto wrong_rank = good;
  wrong_rank.per_rank[0][0].stage = 1;
  EXPECT_EQ(*find_schedule_error(wrong_rank), "F1.0 on pp rank 0: stage 1 belongs to pp rank 1");
}

TEST(PipelineSchedule, SplitBackwardIsAccepted) {
  // One stage, one microbatch, backward split into input and weight parts (zero-bubble style).
  PipelineSchedule s{
      ScheduleKind::k1F1B, 1, 1, 1, {{{K::kForward, 0, 0}, {K::kBackwardInput, 0, 0}, {K::kBackwardWeight, 0, 0}}}};
  EXPECT_FALSE(find_schedule_error(s));
  std::swap(s.per_rank[0][1], s.per_rank[0][2]);
  EXPECT_EQ(*find_schedule_error(s), "W0.0 on pp rank 0 runs before I0.0 on pp rank 0");
}

TEST(PipelineSchedule, PreconditionsAreChecked) {
  EXPECT_THROW(make_schedule(ScheduleKind::kInterleaved1F1B, 4, 2, 6), core::InternalError);
  EXPECT_THROW(make_schedule(ScheduleKind::k1F1B, 4, 2, 8), core::InternalError);
}

}  // namespace
}  // namespace cpt::spec
