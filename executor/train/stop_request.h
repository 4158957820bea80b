#pragma once
// A run asked to stop (SIGTERM, as a preemption or `scancel` sends it, or SIGINT): the ranks finish
// the step they are in, agree on it, and end the run as if it had reached its last step: a final
// checkpoint and measured.json, then exit code core::kExitStopped, so that `--resume` continues.
// While a StopRequest lives, the two signals only set its flag; the previous handlers come back
// when it ends.
#include <csignal>

#include "executor/dist/communicator.h"

namespace cpt::exec {

class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // COLLECTIVE over `world` (one 4-byte all-reduce; nothing on one process): whether any rank has
  // been asked to stop. Every rank calls it once per step, at the same point.
  [[nodiscard]] bool agreed(Communicator& world) const;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

}  // namespace cpt::exec
