// The launcher's account of a failed job (executor/dist/failure_report.h): root cause first, the
// rank that stopped named; and the ranks' status board it reads (rank_board.h), across a fork.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "core/error.h"
#include "executor/dist/failure_report.h"
#include "executor/dist/rank_board.h"

namespace cpt::exec {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

RankView failed_view(RankFailure kind, std::string message, std::int64_t at_ns) {
  RankView v;
  v.failure = kind;
  v.message = std::move(message);
  v.failed_at_ns = at_ns;
  return v;
}

RankEnd ended(int rank, int code, RankView at_end) {
  RankEnd e;
  e.rank = rank;
  e.exit_code = code;
  e.at_end = std::move(at_end);
  e.at_first_failure = e.at_end;
  return e;
}

// A full disk on rank 1: its own error comes first although rank 0's "connection reset" (caused by
// it) came earlier.
TEST(FailureReport, ARanksOwnErrorIsTheRootCauseEvenWhenItsPeersFailedFirst) {
  const auto reset =
      failed_view(RankFailure::kCollective, "all_reduce on group dp failed: Connection reset by peer", 5);
  const auto disk = failed_view(RankFailure::kOwn, "cannot write ckpt/rank_1.safetensors: No space left on device", 9);
  const auto r = explain_failure({ended(0, 3, reset), ended(1, 3, disk)}, 4);
  EXPECT_EQ(r.root, "rank 1: cannot write ckpt/rank_1.safetensors: No space left on device");
  ASSERT_EQ(r.others.size(), 1u);
  EXPECT_EQ(r.others[0], "rank 0: all_reduce on group dp failed: Connection reset by peer");
  EXPECT_EQ(r.exit_code, core::kExitRuntime);
}

TEST(FailureReport, TheEarliestOwnErrorWinsAndKeepsItsExitCode) {
  const auto r = explain_failure({ended(0, 2, failed_view(RankFailure::kOwn, "bad data", 7)),
                                  ended(1, 1, failed_view(RankFailure::kOwn, "internal error: x", 3))},
                                 1);
  EXPECT_EQ(r.root, "rank 1: internal error: x");
  EXPECT_EQ(r.exit_code, 1);
}

TEST(FailureReport, ARankKilledFromOutsideIsTheRootCause) {
  auto killed = ended(1, core::kExitRuntime, RankView{});
  killed.signal = SIGKILL;
  const auto reset = failed_view(RankFailure::kCollective, "broadcast failed: Connection closed by peer", 5);
  const auto r = explain_failure({ended(0, 3, reset), killed}, 4);
  EXPECT_EQ(r.root.rfind("rank 1 was killed by signal 9", 0), 0u) << r.root;
  ASSERT_EQ(r.others.size(), 1u);
}

// A stopped rank: rank 0 timed out waiting; rank 1's heartbeat had stopped 3 s before (it may have
// been stopped inside a collective); the launcher later killed it (a signal it sent is no cause).
TEST(FailureReport, ARankThatStoppedRunningIsNamed) {
  const auto timeout =
      failed_view(RankFailure::kCollective, "all_reduce on group dp failed or timed out: Timed out", 20 * kSecond);
  RankView silent;
  silent.step = 12;
  silent.waiting = true;
  silent.collectives_posted = 58;
  silent.last_collective = "all_reduce on group dp/0";
  silent.heartbeat_ns = 17 * kSecond;
  // Woken by the launcher, its own collective failed too: not listed as a consequence of itself.
  auto stopped = ended(1, core::kExitRuntime, failed_view(RankFailure::kCollective, "recv timed out", 22 * kSecond));
  stopped.at_first_failure = silent;
  stopped.alive_at_first_failure = true;
  stopped.signalled_by_launcher = true;
  auto timed_out = ended(0, 3, timeout);
  timed_out.at_first_failure.heartbeat_ns = 20 * kSecond;
  const auto r = explain_failure({timed_out, stopped}, 21 * kSecond);
  EXPECT_EQ(
      r.root,
      "rank 1 stopped running at step 12 while waiting in all_reduce on group dp/0: no heartbeat for 3.0 s before "
      "rank 0's collective failed (the process was stopped or frozen)");
  ASSERT_EQ(r.others.size(), 1u);
  EXPECT_EQ(r.others[0].rfind("rank 0: all_reduce on group dp failed or timed out", 0), 0u);
}

// A running rank that the others waited for: not failed, not in a collective (a hung data loader,
// an endless loop) when rank 0 timed out.
TEST(FailureReport, ARankStuckOutsideTheCollectivesIsNamed) {
  const auto timeout =
      failed_view(RankFailure::kCollective, "all_reduce on group dp failed or timed out: Timed out", 20 * kSecond);
  RankView silent;
  silent.step = 12;
  silent.collectives_posted = 57;
  silent.last_collective = "all_reduce on group dp";
  silent.last_activity_ns = 17 * kSecond;
  silent.heartbeat_ns = 20 * kSecond;
  auto stuck = ended(1, core::kExitRuntime, RankView{});
  stuck.at_first_failure = silent;
  stuck.alive_at_first_failure = true;
  stuck.signal = SIGKILL;
  stuck.signalled_by_launcher = true;
  const auto r = explain_failure({ended(0, 3, timeout), stuck}, 21 * kSecond);
  EXPECT_EQ(r.root,
            "rank 1 stopped making progress outside any collective at step 12: its last collective (all_reduce on "
            "group dp) was 3.0 s before rank 0's collective failed");
}

// Every local rank waiting: the cause is elsewhere; the first collective error is given, saying so.
TEST(FailureReport, WhenEveryRankWaitedTheCauseIsSaidToBeElsewhere) {
  auto waiting = failed_view(RankFailure::kCollective, "recv from 2 failed or timed out: Timed out", 8);
  auto still_waiting = RankView{};
  still_waiting.waiting = true;
  auto other = ended(1, core::kExitRuntime, RankView{});
  other.at_first_failure = still_waiting;
  other.alive_at_first_failure = true;
  other.signal = SIGKILL;
  other.signalled_by_launcher = true;
  const auto r = explain_failure({ended(0, 3, waiting), other}, 9);
  EXPECT_EQ(
      r.root.rfind("rank 0: recv from 2 failed or timed out: Timed out (no rank of this node failed or stopped", 0), 0u)
      << r.root;
}

// On GPUs NCCL's watchdog ends the rank that timed out with SIGABRT: the rank it waited for (its
// heartbeat stopped) is still the one named.
TEST(FailureReport, AStoppedRankComesBeforeTheWatchdogsAbort) {
  auto aborted = ended(0, core::kExitRuntime, RankView{});
  aborted.signal = SIGABRT;
  RankView silent;
  silent.heartbeat_ns = 10 * kSecond;
  auto stopped = ended(1, core::kExitRuntime, RankView{});
  stopped.at_first_failure = silent;
  stopped.alive_at_first_failure = true;
  stopped.signalled_by_launcher = true;
  const auto r = explain_failure({aborted, stopped}, 20 * kSecond);
  EXPECT_EQ(r.root.rfind("rank 1 stopped running: no heartbeat for 10.0 s", 0), 0u) << r.root;
}

// A rank that failed while the job was asked to stop (its final checkpoint on a full disk) is the
// root cause, and the job's code is its failure's, not the stop's 4.
TEST(FailureReport, AFailureDuringAStopIsSaid) {
  const auto r =
      explain_failure({ended(0, 3, failed_view(RankFailure::kOwn, "cannot write the checkpoint of step 40", 5)),
                       ended(1, 4, RankView{})},
                      6);
  EXPECT_EQ(r.root, "rank 0: cannot write the checkpoint of step 40");
  EXPECT_EQ(r.exit_code, 3);
}

TEST(FailureReport, WithoutBoardMessagesTheFirstNonZeroExitIsNamed) {
  const auto r = explain_failure({ended(0, 0, RankView{}), ended(1, 4, RankView{})}, 1);
  EXPECT_EQ(r.root, "rank 1 exited with code 4");
  EXPECT_EQ(r.exit_code, 4);
}

// Both ranks refuse the plan (exit 2); rank 1 records its error first, and the launcher's SIGTERM,
// sent when rank 0 exits, ends rank 1 before it exits itself: the job still exits 2.
TEST(FailureReport, TheRootsExitCodeIsWhatItsErrorMeansNotTheSignalAfterIt) {
  auto refused = failed_view(RankFailure::kOwn, "plan: a mixture of experts with ep 2 ...", 5);
  refused.exit_code = core::kExitBadInput;
  auto terminated = ended(1, core::kExitRuntime, refused);
  terminated.signal = SIGTERM;
  terminated.signalled_by_launcher = true;
  auto also_refused = refused;
  also_refused.failed_at_ns = 6;
  const auto r = explain_failure({ended(0, core::kExitBadInput, also_refused), terminated}, 7);
  EXPECT_EQ(r.root, "rank 1: plan: a mixture of experts with ep 2 ...");
  EXPECT_EQ(r.exit_code, core::kExitBadInput);
}

// A child process finds its slot through the environment, as a rank does, and what it records is
// what the launcher reads.
TEST(RankBoard, WhatARankRecordsTheLauncherReads) {
  const RankBoard board(2);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv(kRankBoardEnv, board.env_value().c_str(), 1);
    ::setenv("LOCAL_RANK", "1", 1);
    const auto rank = RankReporter::from_environment();
    rank.note_step(3);
    rank.note_posted("all_gather on group tp");
    rank.note_waiting(true);
    rank.note_collective_failure();
    std::_Exit(rank.record_failure(std::string(5000, 'm'), 3) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const RankView v = board.read(1);
  EXPECT_EQ(v.step, 3);
  EXPECT_EQ(v.collectives_posted, 1u);
  EXPECT_EQ(v.last_collective, "all_gather on group tp");
  EXPECT_FALSE(v.waiting);  // a failed rank no longer waits
  EXPECT_EQ(v.failure, RankFailure::kCollective);
  EXPECT_GT(v.failed_at_ns, 0);
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_EQ(v.message.size(), sizeof(RankSlot::message) - 1);  // truncated, not overrun
  EXPECT_EQ(board.read(0).failure, RankFailure::kNone);
  EXPECT_EQ(board.read(0).step, -1);
  // This process has no board: nothing is recorded and the caller prints its error itself.
  EXPECT_FALSE(RankReporter::from_environment().record_failure("x", 2));
}

}  // namespace
}  // namespace cpt::exec
