#include "executor/dist/failure_report.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

bool failed(const RankEnd& e) {
  return e.at_end.failure != RankFailure::kNone && !e.at_end.message.empty();
}

// The failed rank of kind `kind` that failed first, if any.
const RankEnd* first_failure_of(const std::vector<RankEnd>& ends, RankFailure kind) {
  const RankEnd* first = nullptr;
  for (const auto& e : ends) {
    if (!failed(e) || e.at_end.failure != kind) continue;
    if (first == nullptr || e.at_end.failed_at_ns < first->at_end.failed_at_ns) first = &e;
  }
  return first;
}

std::string seconds_text(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(ns) * 1e-9);
  return text;
}

// A process whose heartbeat is this old is not running (rank_board.h).
constexpr std::int64_t kStaleHeartbeatNs = 10 * kHeartbeatPeriodNs;

// "rank R", "ranks R, S".
std::string rank_list(const std::vector<const RankEnd*>& ranks) {
  std::string text = ranks.size() == 1 ? "rank" : "ranks";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += str_cat(i == 0 ? " " : ", ", ranks[i]->rank);
  return text;
}

// Rule 3: the ranks the others waited for, as one line, or nothing when every rank was running
// and waiting in a collective. `failed_at_ns`: when `first` failed, on the board clock.
std::optional<std::string> silent_ranks(const std::vector<RankEnd>& ends, const RankEnd& first,
                                        std::int64_t failed_at_ns, std::vector<const RankEnd*>& named) {
  std::vector<const RankEnd*> not_running, not_waiting;
  for (const auto& e : ends) {
    const RankView& v = e.at_first_failure;
    if (&e == &first || v.failure != RankFailure::kNone) continue;
    if (v.heartbeat_ns != 0 && failed_at_ns - v.heartbeat_ns > kStaleHeartbeatNs) {
      not_running.push_back(&e);
    } else if (!v.waiting) {
      not_waiting.push_back(&e);
    }
  }
  const std::string when = str_cat(" before rank ", first.rank, "'s collective failed");
  const auto step_of = [](const RankEnd& e) {
    return e.at_first_failure.step >= 0 ? str_cat(" at step ", e.at_first_failure.step) : std::string();
  };
  if (!not_running.empty()) {
    named = not_running;
    const RankEnd& s = *not_running.front();
    const RankView& v = s.at_first_failure;
    const std::string where_it_was = v.collectives_posted == 0 ? std::string()
                                     : v.waiting               ? str_cat(" while waiting in ", v.last_collective)
                                                 : str_cat(" after its last collective, ", v.last_collective);
    return str_cat(rank_list(not_running), " stopped running", step_of(s), where_it_was, ": no heartbeat for ",
                   seconds_text(failed_at_ns - s.at_first_failure.heartbeat_ns), " s", when,
                   " (the process was stopped or frozen)");
  }
  if (not_waiting.empty()) return std::nullopt;
  std::sort(not_waiting.begin(), not_waiting.end(), [](const RankEnd* a, const RankEnd* b) {
    return a->at_first_failure.last_activity_ns < b->at_first_failure.last_activity_ns;
  });
  named = not_waiting;
  const RankEnd& s = *not_waiting.front();
  const RankView& v = s.at_first_failure;
  const std::string last = v.collectives_posted == 0
                               ? std::string(": it had posted no collective")
                               : str_cat(": its last collective (", v.last_collective, ") was ",
                                         seconds_text(failed_at_ns - v.last_activity_ns), " s", when);
  return str_cat(rank_list(not_waiting), " stopped making progress outside any collective", step_of(s), last);
}

std::string signal_text(int signal) {
  const char* name = ::strsignal(signal);
  return str_cat("signal ", signal, name != nullptr ? str_cat(" (", name, ")") : std::string());
}

}  // namespace

FailureReport explain_failure(const std::vector<RankEnd>& ends, std::int64_t first_failure_ns) {
  FailureReport report;
  report.exit_code = core::kExitRuntime;
  const RankEnd* root = first_failure_of(ends, RankFailure::kOwn);
  std::vector<const RankEnd*> named;  // the ranks rule 3 names
  if (root != nullptr) {
    report.root = str_cat("rank ", root->rank, ": ", root->at_end.message);
    report.exit_code = root->exit_code;
  } else if (const auto killed = std::find_if(
                 ends.begin(), ends.end(), [](const RankEnd& e) { return e.signal != 0 && !e.signalled_by_launcher; });
             killed != ends.end()) {
    root = &*killed;
    report.root = str_cat("rank ", root->rank, " was killed by ", signal_text(root->signal));
  } else if (const RankEnd* collective = first_failure_of(ends, RankFailure::kCollective)) {
    const std::int64_t failed_at =
        collective->at_end.failed_at_ns != 0 ? collective->at_end.failed_at_ns : first_failure_ns;
    if (const auto silent = silent_ranks(ends, *collective, failed_at, named)) {
      report.root = *silent;
    } else {
      root = collective;
      report.root = str_cat("rank ", root->rank, ": ", root->at_end.message,
                            " (every rank of this node was waiting in a collective: the rank that stopped is on "
                            "another node, or the ranks called different collectives)");
    }
  } else {
    const auto first = std::find_if(ends.begin(), ends.end(), [](const RankEnd& e) { return e.exit_code != 0; });
    CPT_CHECK(first != ends.end(), "explain_failure: no rank failed");
    root = &*first;
    report.root = str_cat("rank ", root->rank, " exited with code ", root->exit_code);
    report.exit_code = root->exit_code;
  }
  for (const auto& e : ends) {
    if (&e == root || !failed(e) || std::find(named.begin(), named.end(), &e) != named.end()) continue;
    report.others.push_back(str_cat("rank ", e.rank, ": ", e.at_end.message));
  }
  return report;
}

}  // namespace cpt::exec
