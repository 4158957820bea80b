#pragma once
// The launcher's view into its ranks (local_launcher.h): a shared-memory board (a memfd the ranks
// inherit) with one slot per local rank, in which the rank records its step, the collectives it
// posts, whether it is blocked waiting for one, and, when it fails, its error and whether that
// error was its own or a collective that failed under it. When a rank fails the launcher reads
// the board to print the root cause first (a rank's own error before the "connection reset" its
// peers get because of it) and, when the ranks only time out, to name the rank that stopped
// making progress (failure_report.h). LibTorch-free; the rank side costs an atomic increment and
// a short copy per collective.
//
// Ranks that torchrun or Slurm started have no board: every rank-side call is then a no-op and
// the rank prints its own error, as a single process does.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace cpt::exec {

enum class RankFailure : std::int32_t {
  kNone = 0,
  kCollective = 1,  // a collective failed or timed out under it (a peer's fault, or a hang)
  kOwn = 2,         // any other error: I/O, data, memory, a bug
};

// One rank's slot. Written by the rank, read by the launcher; the text fields are read only after
// the rank has ended or failed, or as a hint (a copy bounded by its size, NUL added).
struct RankSlot {
  std::atomic<std::int64_t> step{-1};
  std::atomic<std::uint64_t> collectives_posted{0};
  std::atomic<std::int32_t> waiting{0};           // 1 while blocked in a collective's wait()
  std::atomic<std::int64_t> last_activity_ns{0};  // CLOCK_MONOTONIC of the last post or wait's end
  std::atomic<std::int32_t> failure{0};           // RankFailure
  std::atomic<std::int64_t> failed_at_ns{0};
  std::atomic<std::int32_t> exit_code{0};     // the exit code its failure means (core/error.h)
  std::atomic<std::int64_t> heartbeat_ns{0};  // written every kHeartbeatPeriodNs by a thread of the rank
  char last_collective[120] = {};
  char message[2048] = {};
};

// Shared between processes: only lock-free atomics work across address spaces.
static_assert(std::atomic<std::int64_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free);

// What the launcher reads of a slot.
struct RankView {
  std::int64_t step = -1;
  std::uint64_t collectives_posted = 0;
  bool waiting = false;
  std::int64_t last_activity_ns = 0;
  RankFailure failure = RankFailure::kNone;
  std::int64_t failed_at_ns = 0;
  int exit_code = 0;  // what the recorded failure means, whatever ended the process after it
  std::int64_t heartbeat_ns = 0;
  std::string last_collective, message;
};

// Launcher side: owns the memfd and its mapping.
class RankBoard {
 public:
  // A board for `ranks` local ranks. RuntimeError when the kernel refuses the memfd or mapping.
  explicit RankBoard(int ranks);
  ~RankBoard();
  RankBoard(const RankBoard&) = delete;
  RankBoard& operator=(const RankBoard&) = delete;

  // The value of kRankBoardEnv for the ranks (the descriptor, inherited across exec).
  [[nodiscard]] std::string env_value() const;
  [[nodiscard]] RankView read(int local_rank) const;

 private:
  int fd_ = -1;
  int ranks_ = 0;
  RankSlot* slots_ = nullptr;
};

// A rank's heartbeat thread writes its slot this often: a rank whose heartbeat is many periods old
// is not running (stopped, frozen), whatever its other threads were doing.
inline constexpr std::int64_t kHeartbeatPeriodNs = 100'000'000;

// Names the inherited descriptor in a rank's environment.
inline constexpr const char* kRankBoardEnv = "CPT_RANK_BOARD_FD";

// The current CLOCK_MONOTONIC time in nanoseconds (the board's clock).
[[nodiscard]] std::int64_t monotonic_ns();

// Rank side: writes one slot. Records nothing when the process has no board.
class RankReporter {
 public:
  // The slot named by kRankBoardEnv and LOCAL_RANK (mapped; the descriptor is closed).
  static RankReporter from_environment();
  // from_environment(), once per process, with a detached thread beating its heartbeat: what the
  // communicator, trainer and main use.
  static RankReporter& of_this_process();

  void beat_heartbeat() const;

  void note_step(std::int64_t step) const;
  void note_posted(std::string_view collective) const;
  void note_waiting(bool waiting) const;
  void note_collective_failure() const;
  // Records `message` as this rank's failure (its own unless a collective failure was noted) and
  // the exit code it means: the launcher's signal may end the process before it exits with it.
  // Returns true when a board holds it (the launcher prints it), false when there is none.
  bool record_failure(std::string_view message, int exit_code) const;

 private:
  RankSlot* slot_ = nullptr;
};

}  // namespace cpt::exec
