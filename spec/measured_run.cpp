#include "spec/measured_run.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"
#include "core/version.h"

namespace cpt::spec {

using core::Json;
using core::JsonObjectReader;
using core::str_cat;

namespace {

constexpr std::array<const char*, 5> kGroups = {"tp", "cp", "dp", "pp", "ep"};

Json parts_to_json(const MeasuredStepParts& p) {
  return {{"tp_comm", p.tp_comm},
          {"cp_comm", p.cp_comm},
          {"dp_comm", p.dp_comm},
          {"ep_comm", p.ep_comm},
          {"pp_comm_and_bubble", p.pp_comm_and_bubble},
          {"compute_and_other", p.compute_and_other}};
}

MeasuredStepParts parts_from_json(JsonObjectReader r) {
  MeasuredStepParts p;
  p.tp_comm = r.number("tp_comm", 0.0);
  p.cp_comm = r.number("cp_comm", 0.0);
  p.dp_comm = r.number("dp_comm", 0.0);
  if (r.has("ep_comm")) p.ep_comm = r.number("ep_comm", 0.0);  // written since expert parallelism ran
  p.pp_comm_and_bubble = r.number("pp_comm_and_bubble", 0.0);
  p.compute_and_other = r.number("compute_and_other", 0.0);
  r.finish();
  return p;
}

Json memory_to_json(const MeasuredMemory& m) {
  Json j = {{"weights", m.weights},
            {"grads", m.grads},
            {"optimizer", m.optimizer},
            {"optimizer_counters", m.optimizer_counters},
            {"peak", m.peak}};
  if (m.teacher > 0) j["teacher"] = m.teacher;
  if (m.ewc > 0) j["ewc"] = m.ewc;
  return j;
}

MeasuredMemory memory_from_json(JsonObjectReader r) {
  MeasuredMemory m;
  m.weights = r.integer("weights", 0);
  m.grads = r.integer("grads", 0);
  m.optimizer = r.integer("optimizer", 0);
  m.optimizer_counters = r.integer("optimizer_counters", 0);
  m.peak = r.integer("peak", 0);
  m.teacher = r.optional_integer("teacher", 0).value_or(0);
  m.ewc = r.optional_integer("ewc", 0).value_or(0);
  r.finish();
  return m;
}

Json dispatch_to_json(const MeasuredDispatch& d) {
  Json calls = Json::object(), bytes = Json::object();
  for (std::size_t g = 0; g < kGroups.size(); ++g) {
    calls[kGroups[g]] = d.calls_per_step[g];
    bytes[kGroups[g]] = d.bytes_per_step[g];
  }
  return {{"forward_ops", d.forward_ops},
          {"backward_nodes", d.backward_nodes},
          {"nested_ops", d.nested_ops},
          {"calls_per_step", calls},
          {"bytes_per_step", bytes}};
}

MeasuredDispatch dispatch_from_json(JsonObjectReader r) {
  MeasuredDispatch d;
  d.forward_ops = r.integer("forward_ops", 0);
  d.backward_nodes = r.integer("backward_nodes", 0);
  d.nested_ops = r.integer("nested_ops", 0);
  auto calls = r.object("calls_per_step");
  for (std::size_t g = 0; g < kGroups.size(); ++g) {
    // "ep" is written since expert parallelism ran; earlier files had no ep group.
    if (g < 4 || calls.has(kGroups[g])) d.calls_per_step[g] = calls.integer(kGroups[g], 0);
  }
  calls.finish();
  if (r.has("bytes_per_step")) {  // written since the executor counts its bytes
    auto bytes = r.object("bytes_per_step");
    for (std::size_t g = 0; g < kGroups.size(); ++g) d.bytes_per_step[g] = bytes.integer(kGroups[g], 0);
    bytes.finish();
  }
  r.finish();
  return d;
}

Json rank_to_json(const MeasuredRank& rank) {
  Json j = {{"rank", rank.rank},
            {"tp", rank.tp},
            {"cp", rank.cp},
            {"dp", rank.dp},
            {"pp", rank.pp},
            {"memory_bytes", memory_to_json(rank.memory_bytes)},
            {"step_time_breakdown_s", parts_to_json(rank.step_time_breakdown_s)}};
  if (rank.dispatch) j["dispatch"] = dispatch_to_json(*rank.dispatch);
  return j;
}

MeasuredRank rank_from_json(JsonObjectReader r, std::int64_t processes) {
  MeasuredRank rank;
  rank.rank = static_cast<int>(r.integer("rank", 0, processes - 1));
  rank.tp = static_cast<int>(r.integer("tp", 0, processes - 1));
  rank.cp = static_cast<int>(r.integer("cp", 0, processes - 1));
  rank.dp = static_cast<int>(r.integer("dp", 0, processes - 1));
  rank.pp = static_cast<int>(r.integer("pp", 0, processes - 1));
  rank.memory_bytes = memory_from_json(r.object("memory_bytes"));
  rank.step_time_breakdown_s = parts_from_json(r.object("step_time_breakdown_s"));
  if (r.has("dispatch")) rank.dispatch = dispatch_from_json(r.object("dispatch"));
  r.finish();
  return rank;
}

}  // namespace

Json measured_run_to_json(const MeasuredRun& run) {
  Json ranks = Json::array();
  for (const auto& rank : run.ranks) ranks.push_back(rank_to_json(rank));
  // Written in this cpt's schema whatever version the run was read in (it writes `packing`).
  return {{"schema_version", kMeasuredRunSchemaVersion},
          {"device", run.device},
          {"processes", run.processes},
          {"steps", run.steps},
          {"skipped_steps", run.skipped_steps},
          {"step_time_s", run.step_time_s},
          {"step_time_median_s", run.step_time_median_s},
          {"step_time_p90_s", run.step_time_p90_s},
          {"tokens_per_s", run.tokens_per_s},
          {"tokens_per_s_per_gpu", run.tokens_per_s_per_gpu},
          {"packing", run.padded ? "padded" : "packed"},
          {"final_loss", std::isfinite(run.final_loss) ? Json(run.final_loss) : Json(nullptr)},
          {"dp_bucket_bytes", run.dp_bucket_bytes},
          {"ranks", ranks}};
}

MeasuredRun measured_run_from_json(const Json& json, const std::string& origin) {
  JsonObjectReader r(json, origin);
  if (!r.has("schema_version")) {
    throw core::ConfigError(str_cat(origin,
                                    ": written by an earlier cpt (no schema_version); train the run again "
                                    "with this cpt to compare or fit it"));
  }
  MeasuredRun run;
  run.schema_version = static_cast<int>(r.integer("schema_version", 1, kMeasuredRunSchemaVersion));
  run.device = r.string("device");
  run.processes = static_cast<int>(r.integer("processes", 1, 1 << 24));
  run.steps = r.integer("steps", 0);
  run.skipped_steps = r.integer("skipped_steps", 0, run.steps);
  run.step_time_s = r.number("step_time_s", 0.0);
  run.step_time_median_s = r.number("step_time_median_s", 0.0);
  run.step_time_p90_s = r.number("step_time_p90_s", 0.0);
  run.tokens_per_s = r.number("tokens_per_s", 0.0);
  run.tokens_per_s_per_gpu = r.number("tokens_per_s_per_gpu", 0.0);
  // Version 1 (no key) ran packed.
  if (run.schema_version >= 2) run.padded = r.one_of("packing", {"packed", "padded"}) == "padded";
  // null where the last step's loss was not finite (JSON has no NaN).
  run.final_loss = r.raw("final_loss").is_null() ? std::nan("") : r.number("final_loss");
  run.dp_bucket_bytes = r.integer("dp_bucket_bytes", 0);
  const auto& ranks = r.raw("ranks");
  if (!ranks.is_array() || ranks.size() != static_cast<std::size_t>(run.processes)) {
    r.fail("ranks", str_cat("an array of one object per process (", run.processes, ")"), core::describe_json(ranks));
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    run.ranks.push_back(rank_from_json(JsonObjectReader(ranks[i], origin, str_cat("$.ranks[", i, "]")), run.processes));
    if (run.ranks.back().rank != static_cast<int>(i)) {
      throw core::ConfigError(
          str_cat(origin, ": $.ranks[", i, "].rank: expected ", i, ", got ", run.ranks.back().rank));
    }
  }
  r.finish();
  return run;
}

MeasuredRun load_measured_run(const std::filesystem::path& path) {
  const auto doc = core::parse_json_file(path);
  return measured_run_from_json(doc.root(), doc.origin());
}

void save_measured_run(const std::filesystem::path& path, const MeasuredRun& run) {
  core::write_file_atomic(path, measured_run_to_json(run).dump(2) + "\n");
}

}  // namespace cpt::spec
