// find_schedule_error (declared in spec/pipeline_schedule.h): the proof that a schedule runs.
#include <array>

#include "core/str_cat.h"
#include "spec/pipeline_schedule.h"

namespace cpt::spec {

using core::str_cat;

namespace {

constexpr int kKinds = 8;

// Position of each (kind, stage, microbatch) in its rank's list, or -1 when absent.
class Positions {
 public:
  Positions(int stages, int microbatches)
      : m_(microbatches), pos_(static_cast<std::size_t>(kKinds * stages * microbatches), -1) {}
  int& at(ActionKind k, int stage, int mb) {
    return pos_[static_cast<std::size_t>((static_cast<int>(k) * stages() + stage) * m_ + mb)];
  }
  [[nodiscard]] int stages() const { return static_cast<int>(pos_.size()) / (kKinds * m_); }

 private:
  int m_;
  std::vector<int> pos_;
};

std::string at_rank(int rank, const Action& a) {
  return str_cat(to_string(a), " on pp rank ", rank);
}

using K = ActionKind;

// 1. Every action is in range, on the rank that owns its stage, and appears at most once; fills
// `pos` with each action's place in its rank's list.
std::optional<std::string> placement_error(const PipelineSchedule& s, Positions& pos) {
  const int pp = s.pp, stages = s.num_stages(), m = s.num_microbatches;
  for (int r = 0; r < pp; ++r) {
    const auto& list = s.per_rank[static_cast<std::size_t>(r)];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<std::size_t>(i)];
      if (a.stage < 0 || a.stage >= stages || a.microbatch < 0 || a.microbatch >= m) {
        return str_cat(at_rank(r, a), ": stage or microbatch out of range (", stages, " stages, ", m, " microbatches)");
      }
      if (a.stage % pp != r) return str_cat(at_rank(r, a), ": stage ", a.stage, " belongs to pp rank ", a.stage % pp);
      int& p = pos.at(a.kind, a.stage, a.microbatch);
      if (p != -1) return str_cat(at_rank(r, a), ": appears twice");
      p = i;
    }
  }
  return std::nullopt;
}

// 2. Completeness and 3. local dependency order of stage `st`'s work on microbatch `mb`: a
// forward, one backward (whole, or its input and weight parts in that order) after it, and the
// transfers a neighbouring stage needs, each on the right side of the compute it feeds or follows.
std::optional<std::string> dependency_error(Positions& pos, int st, int mb, int pp, int stages) {
  const int r = st % pp;
  auto p = [&](K k) { return pos.at(k, st, mb); };
  auto name = [&](K k) { return at_rank(r, Action{k, st, mb}); };
  if (p(K::kForward) < 0) return str_cat("missing ", name(K::kForward));
  const bool full = p(K::kBackward) >= 0;
  const bool split = p(K::kBackwardInput) >= 0 || p(K::kBackwardWeight) >= 0;
  if (full == split) {
    return str_cat(full ? "both full and split backward for " : "missing backward for ", "stage ", st, " microbatch ",
                   mb);
  }
  if (split && (p(K::kBackwardInput) < 0 || p(K::kBackwardWeight) < 0)) {
    return str_cat("split backward of stage ", st, " microbatch ", mb, " needs both I and W");
  }
  const K grad_in = full ? K::kBackward : K::kBackwardInput;  // produces the input gradient
  if (p(grad_in) < p(K::kForward)) return str_cat(name(grad_in), " runs before ", name(K::kForward));
  if (split && p(K::kBackwardWeight) < p(K::kBackwardInput)) {
    return str_cat(name(K::kBackwardWeight), " runs before ", name(K::kBackwardInput));
  }
  const bool first = st == 0;
  const bool last = st == stages - 1;
  // (kind, must exist, the compute it is ordered against, whether it runs before that compute)
  struct Rule {
    K kind;
    bool needed;
    K anchor;
    bool before_anchor;
  };
  const std::array<Rule, 4> rules = {{{K::kRecvActivation, !first, K::kForward, true},
                                      {K::kSendActivation, !last, K::kForward, false},
                                      {K::kRecvGrad, !last, grad_in, true},
                                      {K::kSendGrad, !first, grad_in, false}}};
  for (const Rule& rule : rules) {
    const int at = p(rule.kind);
    if (!rule.needed) {
      if (at >= 0) return str_cat(name(rule.kind), ": no neighbouring stage to talk to");
      continue;
    }
    if (at < 0) return str_cat("missing ", name(rule.kind));
    if (rule.before_anchor ? at > p(rule.anchor) : at < p(rule.anchor)) {
      return str_cat(name(rule.kind), " must run ", rule.before_anchor ? "before " : "after ", name(rule.anchor));
    }
  }
  return std::nullopt;
}

// 4. Deadlock freedom: run every rank; sends never block, a receive waits for its send.
std::optional<std::string> deadlock_error(const PipelineSchedule& s) {
  const int pp = s.pp;
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  Positions posted(s.num_stages(), s.num_microbatches);  // 1 once the send is posted
  std::size_t remaining = 0;
  for (const auto& list : s.per_rank) remaining += list.size();
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto& list = s.per_rank[static_cast<std::size_t>(r)];
      auto& i = next[static_cast<std::size_t>(r)];
      while (i < list.size()) {
        const Action& a = list[i];
        if (a.kind == K::kRecvActivation && posted.at(K::kSendActivation, a.stage - 1, a.microbatch) != 1) break;
        if (a.kind == K::kRecvGrad && posted.at(K::kSendGrad, a.stage + 1, a.microbatch) != 1) break;
        if (a.kind == K::kSendActivation || a.kind == K::kSendGrad) posted.at(a.kind, a.stage, a.microbatch) = 1;
        ++i;
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::vector<std::string> stuck;
      for (int r = 0; r < pp; ++r) {
        const auto& list = s.per_rank[static_cast<std::size_t>(r)];
        const auto i = next[static_cast<std::size_t>(r)];
        if (i < list.size()) stuck.push_back(at_rank(r, list[i]));
      }
      return str_cat("deadlock: every unfinished rank waits on a receive whose send never comes: ",
                     core::join(stuck, ", "));
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_schedule_error(const PipelineSchedule& s) {
  const int pp = s.pp;
  const int stages = s.num_stages();
  const int m = s.num_microbatches;
  if (pp < 1 || s.virtual_stages < 1 || m < 1) {
    return str_cat("degenerate schedule: pp ", pp, ", virtual_stages ", s.virtual_stages, ", microbatches ", m);
  }
  if (static_cast<int>(s.per_rank.size()) != pp) {
    return str_cat("expected ", pp, " per-rank action lists, got ", s.per_rank.size());
  }
  Positions pos(stages, m);
  if (auto error = placement_error(s, pos)) return error;
  for (int st = 0; st < stages; ++st) {
    for (int mb = 0; mb < m; ++mb) {
      if (auto error = dependency_error(pos, st, mb, pp, stages)) return error;
    }
  }
  return deadlock_error(s);
}

}  // namespace cpt::spec
