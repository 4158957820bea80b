#pragma once
// What the launcher says when its ranks fail (local_launcher.h): the root cause on the first line,
// the other ranks' errors after it as its consequences. From the ranks' status board
// (rank_board.h) and how each process ended. LibTorch-free and pure, so the rules are unit-tested
// without processes:
//
//   1. a rank's own error (I/O, data, memory, a bug; not a collective failing under it), the
//      earliest if several: "rank 0: cannot write ...: No space left on device";
//   2. else a rank killed by a signal the launcher did not send: "rank 1 was killed by signal 9";
//   3. else, when collectives failed or timed out, the ranks the others waited for: those whose
//      heartbeat had stopped when the first collective failed ("rank 1 stopped running at step 12:
//      no heartbeat for 3.1 s before rank 0's collective failed"), else those that had not failed
//      and were not waiting in a collective (stuck in a data loader, a loop); when every local
//      rank was running and waiting, the first collective error, marked as having its cause on
//      another node or in mismatched collectives;
//   4. else the first rank that exited non-zero, with its code.
#include <string>
#include <vector>

#include "executor/dist/rank_board.h"

namespace cpt::exec {

// How one rank ended, and its board slot at the first failure and at its end.
struct RankEnd {
  int rank = 0;       // global rank
  int exit_code = 0;  // core::kExitRuntime when killed by a signal
  int signal = 0;     // the signal that ended it, 0 if it exited
  bool signalled_by_launcher = false;
  RankView at_first_failure, at_end;
};

struct FailureReport {
  int exit_code = 0;
  std::string root;                 // "rank R: ...", the first line
  std::vector<std::string> others;  // "rank Q: ..." for the other ranks that failed
};

// `first_failure_ns`: the board clock when the launcher saw the first rank end non-zero.
// REQUIRES: at least one RankEnd with a non-zero exit code.
[[nodiscard]] FailureReport explain_failure(const std::vector<RankEnd>& ends, std::int64_t first_failure_ns);

}  // namespace cpt::exec
