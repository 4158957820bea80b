#include "cli/cpt/plan_output.h"

#include <charconv>
#include <iostream>
#include <sstream>

#include "cli/output.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "costmodel/error_band.h"
#include "costmodel/estimate_json.h"

namespace cpt::cli {

using core::str_cat;

namespace {

// "tp-cp-dp-pp": the axes fastest-varying first.
std::string axis_order_text(const spec::ParallelConfig& p) {
  return str_cat(spec::to_string(p.axis_order[0]), "-", spec::to_string(p.axis_order[1]), "-",
                 spec::to_string(p.axis_order[2]), "-", spec::to_string(p.axis_order[3]));
}

core::Json config_json(const spec::ParallelConfig& p) {
  return {{"gpus", p.world_size()},
          {"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"cp", p.cp},
          {"vp", p.virtual_stages},
          {"micro_batch", p.micro_batch},
          {"grad_accum", p.grad_accum()},
          {"zero", p.zero_stage},
          {"hsdp", p.hybrid_shard},
          {"recompute", spec::to_string(p.recompute)},
          {"sequence_parallel", p.sequence_parallel},
          {"offload", spec::to_string(p.offload)},
          {"schedule", spec::to_string(p.schedule)},
          {"ep", p.ep},
          {"etp", p.etp},
          {"axis_order", axis_order_text(p)}};
}

core::Json candidates_json(const std::vector<planner::Candidate>& list) {
  core::Json out = core::Json::array();
  for (const auto& c : list) {
    out.push_back({{"config", config_json(c.config)}, {"estimate", cost::evaluation_to_json(c.estimate)}});
  }
  return out;
}

// Appends `value` and a separator: integers exactly, reals as printf's %.6g (an ostream's
// default), so a planner search's hundreds of thousands of rows are written without a stream.
void append_field(std::string& out, std::int64_t value, char separator) {
  char buffer[24];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value).ptr);
  out += separator;
}
void append_field(std::string& out, double value, char separator) {
  char buffer[32];
  out.append(buffer, std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 6).ptr);
  out += separator;
}
void append_field(std::string& out, std::string_view value, char separator) {
  out += value;
  out += separator;
}

}  // namespace

core::Json planner_result_json(const planner::PlannerResult& r, bool with_seconds) {
  core::Json rejected = core::Json::object();
  for (int i = 0; i < planner::kNumRejectReasons; ++i) {
    if (r.rejected[static_cast<std::size_t>(i)] > 0) {
      rejected[planner::to_string(static_cast<planner::RejectReason>(i))] = r.rejected[static_cast<std::size_t>(i)];
    }
  }
  core::Json j = {{"enumerated", r.enumerated}, {"evaluated", r.evaluated}, {"feasible", r.feasible}};
  if (with_seconds) j["seconds"] = r.seconds;
  j["rejected"] = rejected;
  j["threads"] = r.threads;
  j["top"] = candidates_json(r.top);
  j["pareto"] = candidates_json(r.pareto);
  if (!r.best_per_size.empty()) {
    core::Json sizes = core::Json::array();
    for (const auto& [gpus, best] : r.best_per_size) {
      sizes.push_back({{"gpus", gpus}, {"best", best ? candidates_json({*best}).front() : core::Json(nullptr)}});
    }
    j["sizes"] = sizes;
  }
  return j;
}

std::string candidates_csv(const planner::PlannerResult& r) {
  std::string csv =
      "rank,tp,cp,pp,vp,dp,micro_batch,grad_accum,zero,hsdp,recompute,sequence_parallel,offload,axis_order,"
      "schedule,ep,etp,step_time_s,tokens_per_s_per_gpu,mfu,peak_memory_GiB\n";
  csv.reserve(csv.size() + 128 * r.all_feasible.size());
  for (std::size_t i = 0; i < r.all_feasible.size(); ++i) {
    const auto& c = r.all_feasible[i];
    const auto& p = c.config;
    for (const std::int64_t field :
         {static_cast<std::int64_t>(i + 1), std::int64_t{p.tp}, std::int64_t{p.cp}, std::int64_t{p.pp},
          std::int64_t{p.virtual_stages}, std::int64_t{p.dp}, std::int64_t{p.micro_batch}, std::int64_t{p.grad_accum()},
          std::int64_t{p.zero_stage}, std::int64_t{p.hybrid_shard ? 1 : 0}}) {
      append_field(csv, field, ',');
    }
    append_field(csv, spec::to_string(p.recompute), ',');
    append_field(csv, std::int64_t{p.sequence_parallel ? 1 : 0}, ',');
    append_field(csv, spec::to_string(p.offload), ',');
    append_field(csv, axis_order_text(p), ',');
    append_field(csv, spec::to_string(p.schedule), ',');
    append_field(csv, std::int64_t{p.ep}, ',');
    append_field(csv, std::int64_t{p.etp}, ',');
    append_field(csv, c.estimate.time.total().value(), ',');
    append_field(csv, c.estimate.tokens_per_s_per_gpu, ',');
    append_field(csv, c.estimate.mfu, ',');
    append_field(csv, core::to_gibibytes(c.estimate.peak_memory.total()), '\n');
  }
  return csv;
}

void print_sizes(const planner::PlannerResult& r, std::int64_t tokens, double price_per_gpu_hour,
                 const planner::FinishInputs& finish) {
  using core::Align;
  core::TextTable sz(
      {"GPUs", "best configuration", "tokens/s/GPU", "MFU", "job tokens/s", "expected h", "cost USD"},
      {Align::kRight, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  for (const auto& [gpus, best] : r.best_per_size) {
    if (!best) {
      sz.add_row({std::to_string(gpus), "nothing fits", "-", "-", "-", "-", "-"});
      continue;
    }
    const double job = best->estimate.tokens_per_s_per_gpu * gpus;
    const double hours =
        tokens > 0
            ? planner::time_to_finish(best->estimate.time.total().value(), gpus, best->config.dp, finish).wall_s / 3600
            : 0;
    sz.add_row({std::to_string(gpus), config_summary(best->config), fixed(best->estimate.tokens_per_s_per_gpu, 0),
                fixed(100 * best->estimate.mfu, 1) + "%", fixed(job, 0), tokens > 0 ? fixed(hours, 1) : "-",
                tokens > 0 && price_per_gpu_hour > 0 ? fixed(hours * gpus * price_per_gpu_hour, 0) : "-"});
  }
  std::cout << "Best plan at each size:\n" << sz.render() << "\nOverall, by the objective:\n";
}

void print_top(const planner::PlannerResult& r, const std::vector<double>& simulated, const spec::ClusterSpec& cluster,
               spec::Runtime runtime, const std::string& finish, const std::string& export_note) {
  using core::Align;
  core::TextTable t({"#", "GPUs", "configuration", "step s", "simulated s", "tokens/s/GPU", "MFU", "peak GiB"},
                    {Align::kRight, Align::kRight, Align::kLeft, Align::kRight, Align::kRight, Align::kRight,
                     Align::kRight, Align::kRight});
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& c = r.top[i];
    t.add_row({std::to_string(i + 1), std::to_string(c.config.world_size()), config_summary(c.config),
               fixed(c.estimate.time.total().value(), 3), i < simulated.size() ? fixed(simulated[i], 3) : "-",
               fixed(c.estimate.tokens_per_s_per_gpu, 0), fixed(100 * c.estimate.mfu, 1) + "%",
               fixed(core::to_gibibytes(c.estimate.peak_memory().total()), 1)});
  }
  std::cout << (r.top.empty() ? std::string("no feasible configuration\n") : t.render()) << "\n";
  if (!r.top.empty()) {
    const auto& best = r.top.front().estimate;
    std::cout << "step time of #1: " << cost::describe_band(best.time.total(), runtime, cluster.gpu()) << "\n\n";
    if (!export_note.empty()) std::cout << export_note << "\n\n";
    if (!finish.empty()) std::cout << finish << "\n\n";
  }
  core::TextTable rej({"rejected because", "candidates"}, {Align::kLeft, Align::kRight});
  for (int i = 0; i < planner::kNumRejectReasons; ++i) {
    if (r.rejected[static_cast<std::size_t>(i)] > 0) {
      rej.add_row({planner::to_string(static_cast<planner::RejectReason>(i)),
                   std::to_string(r.rejected[static_cast<std::size_t>(i)])});
    }
  }
  std::cout << rej.render() << "\n";
}

}  // namespace cpt::cli
