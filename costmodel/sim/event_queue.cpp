#include "costmodel/sim/event_queue.h"

#include "core/check.h"

namespace cpt::cost::sim {

void EventQueue::schedule(double time_s, Callback callback) {
  CPT_CHECK(time_s >= now_, "event at ", time_s, " s scheduled in the past (now ", now_, " s)");
  events_.push(Event{time_s, next_seq_++, std::move(callback)});
}

std::uint64_t EventQueue::run() {
  std::uint64_t n = 0;
  while (!events_.empty()) {
    Event e = events_.top();
    events_.pop();
    now_ = e.time;
    e.callback();
    ++n;
  }
  return n;
}

}  // namespace cpt::cost::sim
