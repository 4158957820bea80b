#pragma once
// The discrete-event core: callbacks ordered by (time, insertion sequence). Ties at equal times run
// in the order they were scheduled (FIFO), which makes every simulation deterministic.

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace cpt::cost::sim {

class EventQueue {
 public:
  using Callback = std::function<void()>;

  // REQUIRES: time >= now().
  void schedule(double time_s, Callback callback);
  [[nodiscard]] double now() const { return now_; }
  // Runs events until none is left; returns how many ran.
  std::uint64_t run();

 private:
  struct Event {
    double time;
    std::uint64_t seq;
    Callback callback;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::uint64_t next_seq_ = 0;
  double now_ = 0;
};

}  // namespace cpt::cost::sim
