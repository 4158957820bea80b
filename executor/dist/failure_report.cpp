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

// The failed rank of kind `kind` that failed first, if any.
const RankEnd* first_failure_of(const std::vector<RankEnd>& ends, RankFailure kind) {
  const RankEnd* first = nullptr;
  for (const auto& e : ends) {
    if (!failed_with_error(e) || e.at_end.failure != kind) continue;
    if (first == nullptr || e.at_end.failed_at_ns < first->at_end.failed_at_ns) first = &e;
  }
  return first;
}

std::string seconds_text(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(ns) * 1e-9);
  return text;
}

// "rank R", "ranks R, S".
std::string rank_list(const std::vector<const RankEnd*>& ranks) {
  std::string text = ranks.size() == 1 ? "rank" : "ranks";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += str_cat(i == 0 ? " " : ", ", ranks[i]->rank);
  return text;
}

std::string step_of(const RankEnd& e) {
  return e.at_first_failure.step >= 0 ? str_cat(" at step ", e.at_first_failure.step) : std::string();
}

// The ranks alive and not failed when the first rank failed that pass `test` (their board then).
template <class Test>
std::vector<const RankEnd*> alive_ranks_where(const std::vector<RankEnd>& ends, Test test) {
  std::vector<const RankEnd*> found;
  for (const auto& e : ends) {
    if (e.alive_at_first_failure && e.at_first_failure.failure == RankFailure::kNone && test(e.at_first_failure)) {
      found.push_back(&e);
    }
  }
  return found;
}

// Rule 2: the ranks whose heartbeat had stopped `at_ns`, as one line; nullopt when none.
std::optional<std::string> not_running(const std::vector<RankEnd>& ends, std::int64_t at_ns, const std::string& when,
                                       std::vector<const RankEnd*>& named) {
  // A process whose heartbeat is this old is not running (rank_board.h).
  constexpr std::int64_t kStaleHeartbeatNs = 10 * kHeartbeatPeriodNs;
  named = alive_ranks_where(
      ends, [&](const RankView& v) { return v.heartbeat_ns != 0 && at_ns - v.heartbeat_ns > kStaleHeartbeatNs; });
  if (named.empty()) return std::nullopt;
  const RankEnd& s = *named.front();
  const RankView& v = s.at_first_failure;
  const std::string where_it_was = v.collectives_posted == 0 ? std::string()
                                   : v.waiting               ? str_cat(" while waiting in ", v.last_collective)
                                               : str_cat(" after its last collective, ", v.last_collective);
  return str_cat(rank_list(named), " stopped running", step_of(s), where_it_was, ": no heartbeat for ",
                 seconds_text(at_ns - v.heartbeat_ns), " s", when, " (the process was stopped or frozen)");
}

// Rule 4's first half: after a timeout, the ranks outside every collective; nullopt when none.
std::optional<std::string> outside_collectives(const std::vector<RankEnd>& ends, std::int64_t at_ns,
                                               const std::string& when, std::vector<const RankEnd*>& named) {
  named = alive_ranks_where(ends, [](const RankView& v) { return !v.waiting; });
  if (named.empty()) return std::nullopt;
  std::sort(named.begin(), named.end(), [](const RankEnd* a, const RankEnd* b) {
    return a->at_first_failure.last_activity_ns < b->at_first_failure.last_activity_ns;
  });
  const RankEnd& s = *named.front();
  const RankView& v = s.at_first_failure;
  const std::string last = v.collectives_posted == 0 ? std::string(": it had posted no collective")
                                                     : str_cat(": its last collective (", v.last_collective, ") was ",
                                                               seconds_text(at_ns - v.last_activity_ns), " s", when);
  return str_cat(rank_list(named), " stopped making progress outside any collective", step_of(s), last);
}

std::string signal_text(int signal) {
  const char* name = ::strsignal(signal);
  return str_cat("signal ", signal, name != nullptr ? str_cat(" (", name, ")") : std::string());
}

bool is_timeout(const std::string& message) {
  return message.find("imed out") != std::string::npos;
}

}  // namespace

bool failed_with_error(const RankEnd& e) {
  return e.at_end.failure != RankFailure::kNone && !e.at_end.message.empty();
}

FailureReport explain_failure(const std::vector<RankEnd>& ends, std::int64_t first_failure_ns) {
  FailureReport report;
  report.exit_code = core::kExitRuntime;
  const RankEnd* root = first_failure_of(ends, RankFailure::kOwn);
  const RankEnd* collective = first_failure_of(ends, RankFailure::kCollective);
  const std::int64_t at_ns = collective != nullptr && collective->at_end.failed_at_ns != 0
                                 ? collective->at_end.failed_at_ns
                                 : first_failure_ns;
  const std::string when =
      collective != nullptr ? str_cat(" before rank ", collective->rank, "'s collective failed") : std::string();
  std::vector<const RankEnd*> named;  // the ranks rules 2 and 4 name
  const RankEnd* killed = nullptr;
  for (const auto& e : ends) {
    if (e.signal != 0 && !e.signalled_by_launcher && (killed == nullptr || e.ended_ns < killed->ended_ns)) killed = &e;
  }
  if (root != nullptr) {
    report.root = str_cat("rank ", root->rank, ": ", root->at_end.message);
    // What the error means, not how the process ended: the launcher's SIGTERM, sent when a peer
    // failed, can end a rank between recording its error and exiting with its code.
    report.exit_code = root->at_end.exit_code != 0 ? root->at_end.exit_code : root->exit_code;
  } else if (const auto stopped = not_running(ends, at_ns, when, named)) {
    report.root = *stopped;
  } else if (killed != nullptr) {
    root = killed;
    report.root = str_cat("rank ", root->rank, " was killed by ", signal_text(root->signal));
  } else if (collective != nullptr) {
    const auto stuck =
        is_timeout(collective->at_end.message) ? outside_collectives(ends, at_ns, when, named) : std::nullopt;
    if (stuck) {
      report.root = *stuck;
    } else {
      root = collective;
      report.root = str_cat("rank ", root->rank, ": ", root->at_end.message,
                            " (no rank of this node failed or stopped first: the cause is on another node, or the "
                            "ranks called different collectives)");
    }
  } else {
    const auto first = std::find_if(ends.begin(), ends.end(), [](const RankEnd& e) { return e.exit_code != 0; });
    CPT_CHECK(first != ends.end(), "explain_failure: no rank failed");
    root = &*first;
    report.root = str_cat("rank ", root->rank, " exited with code ", root->exit_code);
    report.exit_code = root->exit_code;
  }
  for (const auto& e : ends) {
    if (&e == root || !failed_with_error(e) || std::find(named.begin(), named.end(), &e) != named.end()) continue;
    report.others.push_back(str_cat("rank ", e.rank, ": ", e.at_end.message));
  }
  return report;
}

}  // namespace cpt::exec
