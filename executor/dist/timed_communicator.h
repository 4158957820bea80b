#pragma once
// A Communicator that counts the seconds its caller spends blocked in it (starting an operation,
// inside wait() and barrier()): the exposed communication time of a group, which the trainer reports per step in
// measured.json beside the cost model's tp_comm / dp_comm / pp_comm + pp_bubble. Work that
// overlaps computation (an asynchronous bucket all-reduce) only counts for the part still running
// when it is waited for. It also counts the operations started on a group of two ranks or more
// (measured.json's *_calls; on one rank an operation is a local copy) and their bytes as the cost
// model's step inventory counts them (costmodel/step_inventory.h, WorkItem::bytes): an all-reduce's
// buffer, an all-gather's gathered result, a reduce-scatter's input, what an all-to-all sends (its
// own rows included), a broadcast's tensor, each send's and each receive's message.
#include <cstdint>
#include <memory>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct CommClock {
  double seconds = 0;      // blocked in this group's operations since the start
  std::int64_t calls = 0;  // operations started (collectives, sends, receives, barriers) among ≥ 2 ranks
  std::int64_t bytes = 0;  // their payloads (the header)
};

// `clock` must outlive the returned communicator.
std::unique_ptr<Communicator> with_timing(std::unique_ptr<Communicator> inner, CommClock& clock);

}  // namespace cpt::exec
