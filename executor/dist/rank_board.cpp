#include "executor/dist/rank_board.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <thread>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

// Copies `text` into `field` (truncated, NUL-terminated). Not atomic: see RankSlot.
template <std::size_t N>
void copy_into(char (&field)[N], std::string_view text) {
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  field[n] = '\0';
}

template <std::size_t N>
std::string copy_out(const char (&field)[N]) {
  return {field, ::strnlen(field, N)};
}

}  // namespace

std::int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

RankBoard::RankBoard(int ranks) : ranks_(ranks) {
  const auto bytes = static_cast<std::size_t>(ranks) * sizeof(RankSlot);
  // Without MFD_CLOEXEC: the ranks inherit it across exec.
  fd_ = ::memfd_create("cpt-rank-board", 0);
  if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    throw core::RuntimeError(str_cat("launcher: cannot make the ranks' status board: ", std::strerror(err)));
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    const int err = errno;
    ::close(fd_);
    throw core::RuntimeError(str_cat("launcher: cannot map the ranks' status board: ", std::strerror(err)));
  }
  slots_ = static_cast<RankSlot*>(map);
  for (int r = 0; r < ranks; ++r) new (slots_ + r) RankSlot{};
}

RankBoard::~RankBoard() {
  ::munmap(slots_, static_cast<std::size_t>(ranks_) * sizeof(RankSlot));
  ::close(fd_);
}

std::string RankBoard::env_value() const {
  return std::to_string(fd_);
}

RankView RankBoard::read(int local_rank) const {
  const RankSlot& s = slots_[local_rank];
  RankView v;
  v.step = s.step.load();
  v.collectives_posted = s.collectives_posted.load();
  v.waiting = s.waiting.load() != 0;
  v.last_activity_ns = s.last_activity_ns.load();
  v.failure = static_cast<RankFailure>(s.failure.load());
  v.failed_at_ns = s.failed_at_ns.load();
  v.exit_code = s.exit_code.load();
  v.heartbeat_ns = s.heartbeat_ns.load();
  v.last_collective = copy_out(s.last_collective);
  v.message = copy_out(s.message);
  return v;
}

RankReporter RankReporter::from_environment() {
  RankReporter reporter;
  const char* fd_text = std::getenv(kRankBoardEnv);
  const char* local_text = std::getenv("LOCAL_RANK");
  if (fd_text == nullptr || local_text == nullptr) return reporter;
  const int fd = std::atoi(fd_text);
  const long local = std::atol(local_text);
  struct stat st {};
  if (fd < 0 || local < 0 || ::fstat(fd, &st) != 0) return reporter;
  const auto needed = static_cast<std::size_t>(local + 1) * sizeof(RankSlot);
  if (static_cast<std::size_t>(st.st_size) < needed) return reporter;
  void* map = ::mmap(nullptr, needed, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  // The mapping stays; the descriptor's number may name another file from now on, so neither a
  // later call nor a process this rank starts may take it for the board.
  ::close(fd);
  ::unsetenv(kRankBoardEnv);
  if (map != MAP_FAILED) reporter.slot_ = static_cast<RankSlot*>(map) + local;
  return reporter;
}

RankReporter& RankReporter::of_this_process() {
  static RankReporter reporter = [] {
    RankReporter r = from_environment();
    if (r.slot_ != nullptr) {
      r.beat_heartbeat();
      std::thread([r] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::nanoseconds(kHeartbeatPeriodNs));
          r.beat_heartbeat();
        }
      }).detach();
    }
    return r;
  }();
  return reporter;
}

void RankReporter::beat_heartbeat() const {
  if (slot_ != nullptr) slot_->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void RankReporter::note_step(std::int64_t step) const {
  if (slot_ != nullptr) slot_->step.store(step, std::memory_order_relaxed);
}

void RankReporter::note_posted(std::string_view collective) const {
  if (slot_ == nullptr) return;
  copy_into(slot_->last_collective, collective);
  slot_->collectives_posted.fetch_add(1, std::memory_order_relaxed);
  slot_->last_activity_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void RankReporter::note_waiting(bool waiting) const {
  if (slot_ == nullptr) return;
  slot_->waiting.store(waiting ? 1 : 0, std::memory_order_relaxed);
  if (!waiting) slot_->last_activity_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void RankReporter::note_collective_failure() const {
  if (slot_ != nullptr) slot_->failure.store(static_cast<std::int32_t>(RankFailure::kCollective));
}

bool RankReporter::record_failure(std::string_view message, int exit_code) const {
  if (slot_ == nullptr) return false;
  copy_into(slot_->message, message);
  slot_->exit_code.store(exit_code);
  slot_->waiting.store(0);
  std::int32_t none = static_cast<std::int32_t>(RankFailure::kNone);
  slot_->failure.compare_exchange_strong(none, static_cast<std::int32_t>(RankFailure::kOwn));
  slot_->failed_at_ns.store(monotonic_ns());  // last: the launcher reads a failure once this is set
  return true;
}

}  // namespace cpt::exec
