#include "costmodel/estimate_json.h"

#include <nlohmann/json.hpp>

#include "costmodel/error_band.h"
#include "costmodel/runtime_profile.h"
#include "spec/work_kinds.h"

namespace cpt::cost {

using core::Json;

namespace {

Json per_group_to_json(const PerCommGroup& g) {
  return {{"tp", g.tp}, {"cp", g.cp}, {"dp", g.dp}, {"pp", g.pp}, {"ep", g.ep}};
}

}  // namespace

Json memory_to_json(const MemoryBreakdown& m) {
  return {{"weights", core::to_gibibytes(m.weights)},
          {"grads", core::to_gibibytes(m.grads)},
          {"optimizer", core::to_gibibytes(m.optimizer)},
          {"activations", core::to_gibibytes(m.activations)},
          {"other", core::to_gibibytes(m.other)},
          {"teacher", core::to_gibibytes(m.teacher)},
          {"ewc", core::to_gibibytes(m.ewc)},
          {"total", core::to_gibibytes(m.total())}};
}

Json time_to_json(const StepTimeBreakdown& t) {
  return {{"compute", t.compute.value()},     {"recompute", t.recompute.value()}, {"tp_comm", t.tp_comm.value()},
          {"cp_comm", t.cp_comm.value()},     {"ep_comm", t.ep_comm.value()},     {"pp_comm", t.pp_comm.value()},
          {"pp_bubble", t.pp_bubble.value()}, {"dp_comm", t.dp_comm.value()},     {"optimizer", t.optimizer.value()},
          {"continual", t.continual.value()}, {"other", t.other.value()}};
}

Json time_by_kind_to_json(const StepTimeByKind& k) {
  Json j = Json::object();
  j[std::string(spec::kKindGemm)] = k.gemm.value();
  j[std::string(spec::kKindAttention)] = k.attention.value();
  j[std::string(spec::kKindLoss)] = k.loss.value();
  j[std::string(spec::kKindOptimizer)] = k.optimizer.value();
  j[std::string(spec::kKindCommunication)] = k.communication.value();
  j[std::string(spec::kKindOther)] = k.other.value();
  return j;
}

Json evaluation_to_json(const Evaluation& ev) {
  if (const auto* inf = std::get_if<Infeasible>(&ev)) {
    return {{"feasible", false}, {"infeasible_reason", to_string(inf->reason)}, {"infeasible_detail", inf->detail}};
  }
  const auto& e = std::get<Estimate>(ev);
  Json per_rank = Json::array();
  for (const auto& m : e.memory_per_pp_rank) per_rank.push_back(memory_to_json(m));
  return {{"feasible", true},
          {"infeasible_reason", nullptr},
          {"step_time_s", e.time.total().value()},
          {"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu},
          {"model_tflops_per_gpu", e.model_tflops_per_gpu},
          {"mfu", e.mfu},
          {"hfu", e.hfu},
          {"flop_convention",
           "MFU: Korthikanti et al. 2022 eq. (7), non-causal attention, backward = 2x forward; HFU: the same plus "
           "the recomputed forward work"},
          {"peak_memory_GiB", core::to_gibibytes(e.peak_memory().total())},
          {"worst_pp_rank", e.worst_pp_rank},
          {"critical_pp_rank", e.critical_pp_rank},
          {"kernels_per_step", e.kernels_per_step},
          {"calls_per_step", per_group_to_json(e.calls_per_step)},
          {"bytes_per_step", per_group_to_json(e.bytes_per_step)},
          {"memory_GiB", memory_to_json(e.peak_memory())},
          {"memory_GiB_per_pp_rank", per_rank},
          {"time_s", time_to_json(e.time)},
          {"time_by_kind_s", time_by_kind_to_json(e.by_kind)}};
}

core::Json step_time_band_to_json(core::Seconds predicted, spec::Runtime runtime, const spec::GpuSpec& gpu) {
  const auto band = error_band(runtime, gpu);
  if (!band) return nullptr;
  const StepTimeRange range = step_time_range(predicted, *band);
  return {{"shortest", range.shortest.value()},
          {"longest", range.longest.value()},
          {"validation_rows", band->rows},
          {"source", band->source}};
}

spec::Prediction prediction_of(const Estimate& e, const CostModelOptions& options, const spec::GpuSpec& gpu) {
  spec::Prediction p;
  if (const auto band = error_band(options.runtime, gpu)) {
    const StepTimeRange range = step_time_range(e.time.total(), *band);
    p.step_time_band = spec::StepTimeBand{range.shortest.value(), range.longest.value(), band->rows, band->source};
  }
  p.precision = options.precision;
  p.flash_attention = options.flash_attention;
  p.fused_cross_entropy = options.fused_cross_entropy;
  p.moe_dispatcher = options.moe_dispatcher;
  p.runtime = options.runtime;
  p.distill_teacher = options.distill_teacher;
  p.ewc = options.ewc;
  p.step_time_s = e.time.total().value();
  p.tokens_per_s_per_gpu = e.tokens_per_s_per_gpu;
  p.mfu = e.mfu;
  const auto t = time_to_json(e.time);
  for (const auto& [k, v] : t.items()) p.step_time_breakdown_s[k] = v.get<double>();
  const auto m = memory_to_json(e.peak_memory());
  for (const auto& [k, v] : m.items()) p.peak_memory_GiB_per_rank[k] = v.get<double>();
  return p;
}

CostModelOptions options_of(const spec::Prediction& p) {
  CostModelOptions o;
  o.precision = p.precision;
  o.flash_attention = p.flash_attention;
  o.fused_cross_entropy = p.fused_cross_entropy;
  o.moe_dispatcher = p.moe_dispatcher;
  o.distill_teacher = p.distill_teacher;
  o.ewc = p.ewc;
  return for_runtime(o, p.runtime);
}

}  // namespace cpt::cost
