#include "planner/advise.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "core/str_cat.h"

namespace cpt::planner {

using core::str_cat;

namespace {

struct Family {
  const char* name;
  const char* fix;
  spec::Runtime runtime;  // the framework that runs it
};

// Each family pins the fields that define it; the rest (micro-batch, recompute, ...) is searched.
constexpr Family kFamilies[] = {
    {"ZeRO-2", "tp=1,pp=1,cp=1,zero=2", spec::Runtime::kDeepSpeed},
    {"ZeRO-3 / FSDP full", "tp=1,pp=1,cp=1,zero=3,hsdp=false", spec::Runtime::kFsdp},
    {"FSDP hybrid", "tp=1,pp=1,cp=1,zero=3,hsdp=true", spec::Runtime::kFsdp},
    {"3D (Megatron)", "", spec::Runtime::kMegatron},  // tp/pp/cp free, ZeRO 0-1, no offload: filtered below
};

std::string pct(double x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * x);
  return buf;
}

// The best 3D plan among a search's feasible candidates: model parallelism (tp, pp or cp > 1)
// with at most a sharded optimizer and no offload, evaluated exactly like the planner's top.
std::optional<Candidate> best_three_d(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                      const PlannerResult& r, const SearchOptions& o) {
  for (const auto& c : r.all_feasible) {
    if (c.config.zero_stage > 1 || c.config.offload != spec::Offload::kNone ||
        c.config.tp * c.config.pp * c.config.cp == 1) {
      continue;
    }
    const auto ev = cost::evaluate(model, cluster, c.config, o.seq_len, pricing_options(o));
    if (const auto* e = std::get_if<cost::Estimate>(&ev); e && e->peak_memory().total() <= cluster.gpu().hbm_capacity) {
      return Candidate{c.index, c.config, *e, e->tokens_per_s_per_gpu};
    }
  }
  return std::nullopt;
}

// Why a family has no plan: memory when anything ran out of it, else the most frequent rejection
// among those that reject a whole family (not the batch or stage shapes of some variants).
std::string why_nothing_fits(const PlannerResult& r) {
  const auto model_state = r.rejected[static_cast<std::size_t>(RejectReason::kModelStateMemory)];
  const auto oom = r.rejected[static_cast<std::size_t>(RejectReason::kOutOfMemory)];
  std::size_t most = static_cast<std::size_t>(RejectReason::kRedundant);
  for (std::size_t i = 0; i < r.rejected.size(); ++i) {
    const auto reason = static_cast<RejectReason>(i);
    if (reason == RejectReason::kInterleaveShape || reason == RejectReason::kBatchNotDivisible ||
        reason == RejectReason::kStagesExceedLayers) {
      continue;
    }
    if (r.rejected[i] > r.rejected[most]) most = i;
  }
  return oom > 0           ? to_string(RejectReason::kOutOfMemory)
         : model_state > 0 ? to_string(RejectReason::kModelStateMemory)
                           : to_string(static_cast<RejectReason>(most));
}

// One family's best plan under its own runtime (or the caller's), or why it has none.
FamilyResult best_of_family(const Family& f, const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                            const SearchOptions& options) {
  SearchOptions o = options;
  o.top_k = 50;
  o.fixed = parse_fixed(f.fix);
  if (!o.executor_only) o.runtime = options.runtime.value_or(f.runtime);
  FamilyResult fr{f.name, o.executor_only ? spec::Runtime::kCpt : *o.runtime, std::nullopt, ""};
  if (model.moe.present() && o.fixed.values.count("hsdp") > 0 && o.fixed.values.at("hsdp") == "true") {
    fr.why_not = "hybrid sharding of a mixture of experts is not modelled";
    return fr;
  }
  const auto r = search(model, cluster, o);
  const bool three_d = std::string(f.fix).empty();
  if (three_d) {
    fr.best = best_three_d(model, cluster, r, o);
  } else if (!r.top.empty()) {
    fr.best = r.top.front();
  }
  if (!fr.best) fr.why_not = why_nothing_fits(r);
  return fr;
}

// The family with the highest score other than `except`; -1 when none has a plan.
int best_family(const Advice& a, int except) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(a.families.size()); ++i) {
    const auto& b = a.families[static_cast<std::size_t>(i)].best;
    if (i != except && b && (best < 0 || b->score > a.families[static_cast<std::size_t>(best)].best->score)) best = i;
  }
  return best;
}

// "A is 12% faster than B; most of the difference is <the step component A gains most on>".
std::string why_it_wins(const FamilyResult& winner, const FamilyResult& second) {
  const auto& tw = winner.best->estimate.time;
  const auto& ts = second.best->estimate.time;
  const std::pair<const char*, double> diffs[] = {
      {"compute", (ts.compute - tw.compute).value()},
      {"recomputation", (ts.recompute - tw.recompute).value()},
      {"tensor-parallel communication", (ts.tp_comm - tw.tp_comm).value()},
      {"context-parallel communication", (ts.cp_comm - tw.cp_comm).value()},
      {"expert-parallel all-to-all", (ts.ep_comm - tw.ep_comm).value()},
      {"pipeline bubble", (ts.pp_bubble - tw.pp_bubble).value()},
      {"data-parallel / ZeRO communication", (ts.dp_comm + ts.other - tw.dp_comm - tw.other).value()},
      {"optimizer step", (ts.optimizer - tw.optimizer).value()}};
  const auto* biggest = &diffs[0];
  for (const auto& d : diffs) {
    if (d.second > biggest->second) biggest = &d;
  }
  const double gain = winner.best->estimate.tokens_per_s_per_gpu / second.best->estimate.tokens_per_s_per_gpu - 1;
  return str_cat(winner.family, " is ", pct(gain), " faster than ", second.family, "; most of the difference is ",
                 biggest->first);
}

}  // namespace

Advice advise(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& options) {
  Advice a;
  for (const auto& f : kFamilies) a.families.push_back(best_of_family(f, model, cluster, options));
  a.winner = best_family(a, -1);
  if (a.winner < 0) {
    a.reason = "no family fits: " + a.families.back().why_not;
    return a;
  }
  const int second = best_family(a, a.winner);
  if (second < 0) {
    std::string others;
    for (const auto& f : a.families) {
      if (!f.best) others += str_cat(others.empty() ? "" : "; ", f.family, ": ", f.why_not);
    }
    a.reason = str_cat("the only family that fits (", others, ")");
    return a;
  }
  a.reason = why_it_wins(a.families[static_cast<std::size_t>(a.winner)], a.families[static_cast<std::size_t>(second)]);
  return a;
}

}  // namespace cpt::planner
