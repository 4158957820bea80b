#include "spec/plan.h"

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/str_cat.h"
#include "core/version.h"
#include "spec/hardware_catalog.h"
#include "spec/hardware_io.h"
#include "spec/model_io.h"
#include "spec/rank_layout.h"

namespace cpt::spec {

using core::ConfigError;
using core::Json;
using core::JsonObjectReader;
using core::str_cat;

namespace {

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

template <class Enum>
Enum enum_from(JsonObjectReader& r, std::string_view key, std::initializer_list<Enum> values) {
  std::vector<std::string> names;
  for (Enum v : values) names.push_back(to_string(v));
  const auto s = r.one_of(key, names);
  for (Enum v : values) {
    if (to_string(v) == s) return v;
  }
  CPT_UNREACHABLE();
}

void fail_if(const std::vector<std::string>& errors, const JsonObjectReader& r, std::string_view key) {
  if (!errors.empty()) throw ConfigError(str_cat(r.origin(), ": ", r.path_of(key), ": ", errors.front()));
}

Json prediction_to_json(const Prediction& p) {
  Json j;
  j["step_time_s"] = p.step_time_s;
  j["tokens_per_s_per_gpu"] = p.tokens_per_s_per_gpu;
  j["mfu"] = p.mfu;
  j["step_time_breakdown_s"] = Json::object();
  for (const auto& [k, v] : p.step_time_breakdown_s) j["step_time_breakdown_s"][k] = v;
  j["peak_memory_GiB_per_rank"] = Json::object();
  for (const auto& [k, v] : p.peak_memory_GiB_per_rank) j["peak_memory_GiB_per_rank"][k] = v;
  if (p.step_time_band) {
    j["step_time_band_s"] = {{"shortest", p.step_time_band->shortest_s},
                             {"longest", p.step_time_band->longest_s},
                             {"validation_rows", p.step_time_band->validation_rows},
                             {"source", p.step_time_band->source}};
  }
  j["priced_as"] = {{"precision", to_string(p.precision)},          {"flash_attention", p.flash_attention},
                    {"fused_cross_entropy", p.fused_cross_entropy}, {"runtime", to_string(p.runtime)},
                    {"distill_teacher", p.distill_teacher},         {"ewc", p.ewc},
                    {"moe_dispatcher", to_string(p.moe_dispatcher)}};
  return j;
}

std::map<std::string, double> number_map(JsonObjectReader& r, std::string_view key) {
  auto sub = r.object(key);
  std::map<std::string, double> out;
  for (const auto& [k, v] : r.raw(key).items()) out[k] = sub.number(k, 0.0);
  sub.finish();
  return out;
}

Prediction prediction_from_json(JsonObjectReader& r) {
  Prediction p;
  p.step_time_s = r.number("step_time_s", 0.0);
  p.tokens_per_s_per_gpu = r.number("tokens_per_s_per_gpu", 0.0);
  p.mfu = r.number("mfu", 0.0, 1.0);
  p.step_time_breakdown_s = number_map(r, "step_time_breakdown_s");
  p.peak_memory_GiB_per_rank = number_map(r, "peak_memory_GiB_per_rank");
  if (r.has("step_time_band_s")) {
    auto band = r.object("step_time_band_s");
    StepTimeBand b;
    b.shortest_s = band.number("shortest", 0.0);
    b.longest_s = band.number("longest", b.shortest_s);
    b.validation_rows = static_cast<int>(band.number("validation_rows", 1.0, 1e9));
    b.source = band.string("source");
    band.finish();
    p.step_time_band = b;
  }
  if (r.has("priced_as")) {
    auto how = r.object("priced_as");
    std::vector<std::string> names;
    for (const auto q : kAllPrecisions) names.push_back(to_string(q));
    const auto precision = how.one_of("precision", names);
    for (const auto q : kAllPrecisions) {
      if (to_string(q) == precision) p.precision = q;
    }
    p.flash_attention = how.boolean("flash_attention");
    p.fused_cross_entropy = how.optional_boolean("fused_cross_entropy").value_or(false);
    // "runtime" since it exists; before, a flag for cpt's executor against Megatron-LM.
    if (how.has("runtime")) {
      const std::string name = how.one_of("runtime", runtime_names());
      p.runtime = *runtime_from_string(name);
    } else if (how.optional_boolean("as_run_by_cpt_executor").value_or(false)) {
      p.runtime = Runtime::kCpt;
    }
    p.distill_teacher = how.optional_boolean("distill_teacher").value_or(false);
    p.ewc = how.optional_boolean("ewc").value_or(false);
    if (how.has("moe_dispatcher")) {
      p.moe_dispatcher = *token_dispatcher_from_string(how.one_of("moe_dispatcher", token_dispatcher_names()));
    }
    how.finish();
  }
  r.finish();
  return p;
}

}  // namespace

std::string model_spec_hash(const ModelSpec& model) {
  return core::stable_hash_hex(model_to_json(model).dump());
}

std::string cluster_spec_hash(const ClusterSpec& cluster) {
  return core::stable_hash_hex(cluster_to_json(cluster).dump());
}

std::vector<std::string> find_plan_errors(const ModelSpec& model, const ClusterSpec& cluster, const Workload& workload,
                                          const ParallelConfig& parallel) {
  auto errors = find_parallel_config_errors(parallel, model, workload.seq_len, cluster.num_gpus);
  if (errors.empty() && parallel.hybrid_shard) {
    if (auto e = RankLayout(parallel, cluster.node.gpus_per_node).find_hybrid_shard_error()) errors.push_back(*e);
  }
  return errors;
}

Plan make_plan(const ModelSpec& model, const ClusterSpec& cluster, const Workload& workload,
               const ParallelConfig& parallel) {
  const auto errors = find_plan_errors(model, cluster, workload, parallel);
  if (!errors.empty()) throw ConfigError(str_cat("parallel configuration: ", errors.front()));
  Plan p;
  p.provenance = Provenance{str_cat(core::kVersion, "+g", core::kGitSha), utc_now_iso8601(), model_spec_hash(model),
                            cluster_spec_hash(cluster)};
  p.model = model;
  p.cluster = cluster;
  p.workload = workload;
  p.parallel = parallel;
  p.stages = StagePartition::balanced(model.layers, parallel.pp, parallel.virtual_stages);
  return p;
}

Json parallel_config_to_json(const ParallelConfig& c) {
  Json j;
  j["tp"] = c.tp;
  j["cp"] = c.cp;
  j["dp"] = c.dp;
  j["pp"] = c.pp;
  j["virtual_stages"] = c.virtual_stages;
  j["micro_batch"] = c.micro_batch;
  j["global_batch"] = c.global_batch;
  j["grad_accum"] = c.grad_accum();  // derived; checked on read
  j["zero_stage"] = c.zero_stage;
  j["hybrid_shard"] = c.hybrid_shard;
  j["recompute"] = to_string(c.recompute);
  j["sequence_parallel"] = c.sequence_parallel;
  j["offload"] = to_string(c.offload);
  j["schedule"] = to_string(c.schedule);
  j["axis_order"] = Json::array();
  for (Axis a : c.axis_order) j["axis_order"].push_back(to_string(a));
  if (c.ep > 1 || c.etp > 1) {  // dense plans stay as they were
    j["ep"] = c.ep;
    j["etp"] = c.etp;
  }
  return j;
}

ParallelConfig parallel_config_from_json(JsonObjectReader& r) {
  ParallelConfig c;
  constexpr std::int64_t kMax = 1 << 24;
  c.tp = static_cast<int>(r.integer("tp", 1, kMax));
  c.cp = static_cast<int>(r.integer("cp", 1, kMax));
  c.dp = static_cast<int>(r.integer("dp", 1, kMax));
  c.pp = static_cast<int>(r.integer("pp", 1, kMax));
  c.ep = static_cast<int>(r.optional_integer("ep", 1, kMax).value_or(1));
  c.etp = static_cast<int>(r.optional_integer("etp", 1, kMax).value_or(1));
  c.virtual_stages = static_cast<int>(r.integer("virtual_stages", 1, kMax));
  c.micro_batch = static_cast<int>(r.integer("micro_batch", 1, kMax));
  c.global_batch = static_cast<int>(r.integer("global_batch", 1, kMaxGlobalBatch));
  c.zero_stage = static_cast<int>(r.integer("zero_stage", 0, 3));
  c.hybrid_shard = r.boolean("hybrid_shard");
  c.recompute = enum_from(r, "recompute", {Recompute::kNone, Recompute::kSelective, Recompute::kFull});
  c.sequence_parallel = r.boolean("sequence_parallel");
  c.offload = enum_from(r, "offload", {Offload::kNone, Offload::kOptimizer, Offload::kOptimizerAndParams});
  c.schedule = enum_from(
      r, "schedule",
      {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1});
  const auto order = r.string_array("axis_order");
  const std::vector<std::string> axes = {"tp", "cp", "dp", "pp"};
  if (order.size() != axes.size())
    r.fail("axis_order", "a permutation of [tp, cp, dp, pp]", str_cat(order.size(), " entries"));
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto it = std::find(axes.begin(), axes.end(), order[i]);
    if (it == axes.end()) r.fail(str_cat("axis_order[", i, "]"), "one of tp|cp|dp|pp", str_cat("\"", order[i], "\""));
    c.axis_order[i] = static_cast<Axis>(it - axes.begin());
  }
  if (c.global_batch % c.sequences_per_microbatch() == 0) {
    if (auto ga = r.optional_integer("grad_accum", 1, 1LL << 30); ga && *ga != c.grad_accum()) {
      r.fail("grad_accum", str_cat(c.grad_accum(), " (global_batch / (micro_batch * dp), derived)"), str_cat(*ga));
    }
  } else {
    r.accept("grad_accum");
  }
  r.finish();
  return c;
}

Json plan_to_json(const Plan& p) {
  Json j;
  j["schema_version"] = p.schema_version;
  j["provenance"] = {{"tool_version", p.provenance.tool_version},
                     {"created_utc", p.provenance.created_utc},
                     {"model_spec_hash", p.provenance.model_spec_hash},
                     {"cluster_spec_hash", p.provenance.cluster_spec_hash}};
  j["model"] = model_to_json(p.model);
  j["cluster"] = cluster_to_json(p.cluster);
  j["workload"] = {{"seq_len", p.workload.seq_len}, {"train_tokens", p.workload.train_tokens}};
  j["parallel"] = parallel_config_to_json(p.parallel);
  j["pipeline"] = {{"layers_per_stage", p.stages.layers_per_stage()}};
  if (p.predicted) j["predicted"] = prediction_to_json(*p.predicted);
  return j;
}

Plan plan_from_json(JsonObjectReader& r) {
  Plan p;
  p.schema_version = static_cast<int>(r.integer("schema_version", 1, 1'000'000));
  if (p.schema_version > kPlanSchemaVersion) {
    r.fail("schema_version", str_cat("<= ", kPlanSchemaVersion, " (this cpt is ", core::kVersion, "; upgrade cpt)"),
           str_cat(p.schema_version));
  }
  auto prov = r.object("provenance");
  p.provenance.tool_version = prov.string("tool_version");
  p.provenance.created_utc = prov.string("created_utc");
  p.provenance.model_spec_hash = prov.string("model_spec_hash");
  p.provenance.cluster_spec_hash = prov.string("cluster_spec_hash");
  prov.finish();
  auto model = r.object("model");
  p.model = model_from_json(model);
  auto cluster = r.object("cluster");
  p.cluster = cluster_from_json(cluster, HardwareCatalog::builtin().resolver());
  auto work = r.object("workload");
  p.workload.seq_len = static_cast<int>(work.integer("seq_len", 1, 1 << 30));
  p.workload.train_tokens = work.integer("train_tokens", 0);
  work.finish();
  auto par = r.object("parallel");
  p.parallel = parallel_config_from_json(par);
  fail_if(find_plan_errors(p.model, p.cluster, p.workload, p.parallel), r, "parallel");
  auto pipe = r.object("pipeline");
  const auto list64 = pipe.integer_array("layers_per_stage", 1);
  std::vector<int> list(list64.begin(), list64.end());
  if (auto e = StagePartition::find_error(list, p.model.layers, p.parallel.pp, p.parallel.virtual_stages)) {
    pipe.fail("layers_per_stage",
              str_cat(p.parallel.num_stages(), " entries (pp ", p.parallel.pp, " x virtual_stages ",
                      p.parallel.virtual_stages, "), each >= 1, summing to the model's ", p.model.layers, " layers"),
              str_cat(nlohmann::json(list).dump(), " (", *e, ")"));
  }
  pipe.finish();
  p.stages = StagePartition::from_list(std::move(list), p.parallel.pp, p.parallel.virtual_stages);
  if (r.has("predicted")) {
    auto pred = r.object("predicted");
    p.predicted = prediction_from_json(pred);
  }
  r.finish();
  return p;
}

Plan load_plan(const std::filesystem::path& path) {
  const auto doc = core::parse_json_file(path);
  auto r = JsonObjectReader::root_of(doc);
  return plan_from_json(r);
}

void save_plan(const Plan& plan, const std::filesystem::path& path) {
  core::write_file_atomic(path, plan_to_json(plan).dump(2) + "\n");
}

}  // namespace cpt::spec
