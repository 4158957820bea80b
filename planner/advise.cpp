#include "planner/advise.h"

#include <algorithm>
#include <cstdio>

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

}  // namespace

Advice advise(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const SearchOptions& options) {
  Advice a;
  for (const auto& f : kFamilies) {
    SearchOptions o = options;
    o.top_k = 50;
    o.fixed = parse_fixed(f.fix);
    if (!o.executor_only) o.runtime = options.runtime.value_or(f.runtime);
    const bool three_d = std::string(f.fix).empty();
    FamilyResult fr{f.name, o.executor_only ? spec::Runtime::kCpt : *o.runtime, std::nullopt, ""};
    if (model.moe.present() && o.fixed.values.count("hsdp") > 0 && o.fixed.values.at("hsdp") == "true") {
      fr.why_not = "hybrid sharding of a mixture of experts is not modelled";
      a.families.push_back(fr);
      continue;
    }
    const auto r = search(model, cluster, o);
    // 3D means model parallelism (tp, pp or cp > 1) with at most a sharded optimizer; it is picked
    // from every feasible candidate and then evaluated exactly, like the planner's top.
    if (!three_d && !r.top.empty()) fr.best = r.top.front();
    for (std::size_t j = 0; three_d && j < r.all_feasible.size(); ++j) {
      const auto& c = r.all_feasible[j];
      if (c.config.zero_stage > 1 || c.config.offload != spec::Offload::kNone ||
          c.config.tp * c.config.pp * c.config.cp == 1) {
        continue;
      }
      const auto ev = cost::evaluate(model, cluster, c.config, o.seq_len, pricing_options(o));
      if (const auto* e = std::get_if<cost::Estimate>(&ev);
          e && e->peak_memory().total() <= cluster.gpu().hbm_capacity) {
        fr.best = Candidate{c.index, c.config, *e, e->tokens_per_s_per_gpu};
        break;
      }
    }
    if (!fr.best) {
      // The deciding reason: memory when anything ran out of it, else the most frequent rejection
      // among those that reject a whole family (not the batch or stage shapes of some variants).
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
      fr.why_not = oom > 0           ? to_string(RejectReason::kOutOfMemory)
                   : model_state > 0 ? to_string(RejectReason::kModelStateMemory)
                                     : to_string(static_cast<RejectReason>(most));
    }
    a.families.push_back(fr);
  }
  for (int i = 0; i < static_cast<int>(a.families.size()); ++i) {
    const auto& b = a.families[static_cast<std::size_t>(i)].best;
    if (b && (a.winner < 0 || b->score > a.families[static_cast<std::size_t>(a.winner)].best->score)) a.winner = i;
  }
  if (a.winner < 0) {
    a.reason = "no family fits: " + a.families.back().why_not;
    return a;
  }
  const auto& w = *a.families[static_cast<std::size_t>(a.winner)].best;
  // The runner-up and the component where the winner gains most.
  int second = -1;
  for (int i = 0; i < static_cast<int>(a.families.size()); ++i) {
    const auto& b = a.families[static_cast<std::size_t>(i)].best;
    if (i != a.winner && b && (second < 0 || b->score > a.families[static_cast<std::size_t>(second)].best->score))
      second = i;
  }
  if (second < 0) {
    std::string others;
    for (const auto& f : a.families) {
      if (!f.best) others += str_cat(others.empty() ? "" : "; ", f.family, ": ", f.why_not);
    }
    a.reason = str_cat("the only family that fits (", others, ")");
    return a;
  }
  const auto& s = *a.families[static_cast<std::size_t>(second)].best;
  const auto& tw = w.estimate.time;
  const auto& ts = s.estimate.time;
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
  const double gain = w.estimate.tokens_per_s_per_gpu / s.estimate.tokens_per_s_per_gpu - 1;
  a.reason =
      str_cat(a.families[static_cast<std::size_t>(a.winner)].family, " is ", pct(gain), " faster than ",
              a.families[static_cast<std::size_t>(second)].family, "; most of the difference is ", biggest->first);
  return a;
}

}  // namespace cpt::planner
