#pragma once
// What the launcher says when its ranks fail (local_launcher.h): the root cause on the first line,
// the other ranks' errors after it as its consequences. From the ranks' status board
// (rank_board.h) and how each process ended. LibTorch-free and pure, so the rules are unit-tested
// without processes:
//
//   1. a rank's own error (I/O, data, memory, a bug; not a collective failing under it), the
//      earliest if several: "rank 0: cannot write ...: No space left on device";
//   2. else a rank alive when the first rank failed whose heartbeat had stopped: "rank 1 stopped
//      running at step 12 while waiting in all_reduce ...: no heartbeat for 3.1 s before rank 0's
//      collective failed (the process was stopped or frozen)" (before rule 3: NCCL's watchdog ends
//      the rank that timed out waiting for it with SIGABRT);
//   3. else the first rank killed by a signal the launcher did not send (a crash signal never
//      counts as the launcher's): "rank 1 was killed by signal 11 (Segmentation fault)";
//   4. else, when a collective timed out, the ranks alive and outside every collective when it
//      did (stuck in a data loader, a loop): "rank 1 stopped making progress outside any
//      collective at step 12: ..."; otherwise the first collective error, marked as having its
//      cause on another node or in mismatched collectives;
//   5. else the first rank that exited non-zero, with its code.
#include <string>
#include <vector>

#include "executor/dist/rank_board.h"

namespace cpt::exec {

// How one rank ended, and its board slot at the first failure and at its end.
struct RankEnd {
  int rank = 0;                         // global rank
  int exit_code = 0;                    // core::kExitRuntime when killed by a signal
  int signal = 0;                       // the signal that ended it, 0 if it exited
  bool signalled_by_launcher = false;   // the signal that ended it was one the launcher sent
  bool alive_at_first_failure = false;  // not yet ended when the launcher saw the first failure
  std::int64_t ended_ns = 0;            // when the launcher saw it end (board clock)
  RankView at_first_failure, at_end;
};

// The rank left an error on the board.
[[nodiscard]] bool failed_with_error(const RankEnd& end);

struct FailureReport {
  int exit_code = 0;
  std::string root;                 // "rank R: ...", the first line
  std::vector<std::string> others;  // "rank Q: ..." for the other ranks that failed
};

// `first_failure_ns`: the board clock when the launcher saw the first rank end non-zero.
// REQUIRES: at least one RankEnd with a non-zero exit code.
[[nodiscard]] FailureReport explain_failure(const std::vector<RankEnd>& ends, std::int64_t first_failure_ns);

}  // namespace cpt::exec
