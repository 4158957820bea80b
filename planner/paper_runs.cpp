#include "planner/paper_runs.h"

#include <array>
#include <cstdint>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "core/str_cat.h"
#include "core/units.h"
#include "costmodel/runtime_profile.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::planner {

using core::str_cat;

namespace {

// Korthikanti et al. 2022, Table 3 (configurations) and Table 5 (seconds per iteration).
constexpr std::array<KorthikantiRun, 4> kTable5{{
    {"megatron-22b", 8, 1, 1, 4, 4, 1.10, 1.42},
    {"megatron-175b", 64, 8, 3, 64, 1, 13.75, 18.13},
    {"megatron-530b", 280, 35, 3, 280, 1, 37.83, 49.05},
    {"megatron-1t", 512, 64, 1, 512, 1, 71.49, 94.42},
}};

// What every vTrain row is priced with (its README; anything else is unknown).
constexpr std::array<const char*, 3> kVtrainAssumptions{
    "GPT: GeLU MLP of 4h, LayerNorm, learned positions, tied embeddings, vocabulary 51,200",
    "Megatron-DeepSpeed in fp16, full recomputation, no sequence parallelism or FlashAttention, 1F1B",
    "A100-SXM4-80GB nodes of 8 (NVLink 3 from the profile), 8 NICs of 100 Gb/s per node"};

// A check of a step time: the error is predicted / measured − 1, as for the published runs.
RunCheck step_time_check(std::string id, std::string group, spec::Runtime runtime, double measured_s,
                         const cost::Evaluation& evaluation) {
  RunCheck check;
  check.id = std::move(id);
  check.group = std::move(group);
  check.runtime = runtime;
  check.metric = "step_time_s";
  check.measured = measured_s;
  if (const cost::Estimate* estimate = record_evaluation(evaluation, check)) {
    check.predicted = estimate->time.total().value();
    check.error = check.predicted / measured_s - 1;
  }
  return check;
}

spec::ModelSpec vtrain_model(const VtrainRow& row) {
  spec::ModelSpec m;
  m.name = "vtrain";
  m.layers = row.layers;
  m.hidden = row.hidden;
  m.heads = m.kv_heads = row.heads;
  m.ffn_hidden = 4 * row.hidden;
  m.vocab = 51200;
  m.mlp = spec::MlpKind::kGelu;
  m.norm = spec::NormKind::kLayerNorm;
  m.position = spec::PositionKind::kLearned;
  m.tied_embeddings = true;
  m.max_seq_len = row.seq;
  return m;
}

cost::Evaluation evaluate_vtrain(const VtrainRow& row, cost::CostModelOptions o,
                                 std::optional<core::BytesPerSecond> intra_node) {
  spec::ParallelConfig p;
  p.tp = row.tp;
  p.dp = row.dp;
  p.pp = row.pp;
  p.micro_batch = row.micro_batch;
  p.global_batch = row.global_batch;
  p.recompute = spec::Recompute::kFull;
  o.precision = spec::Precision::kFp16;
  o.flash_attention = false;
  o.overlap_dp_with_backward = false;
  return cost::evaluate(vtrain_model(row), vtrain_cluster(row.gpus, intra_node), p, row.seq, o);
}

// A cell that must be a number as a whole ("12abc" is not 12).
std::optional<double> number_of(const std::string& cell) {
  try {
    std::size_t used = 0;
    const double value = std::stod(cell, &used);
    if (used == cell.size() && std::isfinite(value)) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The consistency a measured row has: it ran, so its degrees fill its GPUs and its batch divides.
void check_vtrain_row(const VtrainRow& row, const std::string& where) {
  if (row.hidden % row.heads != 0) {
    throw core::ConfigError(str_cat(where, ": ", row.heads, " heads do not divide the hidden size ", row.hidden));
  }
  // In 64 bits: each degree is at most 1e9, so their product exceeds int.
  const auto degree = [](int value) { return static_cast<std::int64_t>(value); };
  if (degree(row.tp) * degree(row.dp) * degree(row.pp) != row.gpus) {
    throw core::ConfigError(
        str_cat(where, ": tp ", row.tp, " x dp ", row.dp, " x pp ", row.pp, " is not the ", row.gpus, " GPUs"));
  }
  if (degree(row.global_batch) % (degree(row.micro_batch) * degree(row.dp)) != 0) {
    throw core::ConfigError(str_cat(where, ": the global batch ", row.global_batch,
                                    " is not a multiple of micro-batch ", row.micro_batch, " x dp ", row.dp));
  }
}

// One line of a vTrain CSV file: its cells as whole numbers and the last as milliseconds.
VtrainRow parse_vtrain_line(const std::string& line, bool multi_node, const std::string& where) {
  std::vector<std::string> cells;
  std::stringstream stream(line);
  for (std::string cell; std::getline(stream, cell, ',');) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();  // getline drops a trailing empty cell
  const std::size_t expected = multi_node ? 12 : 11;
  if (cells.size() != expected) {
    throw core::ConfigError(str_cat(where, ": expected ", expected, " comma-separated values, found ", cells.size()));
  }
  std::size_t i = 0;
  auto whole = [&]() {
    const std::string& cell = cells[i++];
    const auto value = number_of(cell);
    if (!value || *value < 1 || *value > 1e9 || *value != std::trunc(*value)) {
      throw core::ConfigError(str_cat(where, ": value ", i, " must be a positive whole number, found \"", cell, "\""));
    }
    return static_cast<int>(*value);
  };
  VtrainRow row;
  if (multi_node) {
    const auto size = number_of(cells[i]);
    if (!size || *size <= 0) {
      throw core::ConfigError(
          str_cat(where, ": value 1 must be the model's size in billions, found \"", cells[i], "\""));
    }
    row.group = cells[i++] + "B";
  }
  for (int* field : {&row.gpus, &row.global_batch, &row.micro_batch, &row.hidden, &row.heads, &row.layers, &row.seq,
                     &row.tp, &row.dp, &row.pp}) {
    *field = whole();
  }
  const auto milliseconds = number_of(cells[i]);
  if (!milliseconds || *milliseconds <= 0) {
    throw core::ConfigError(
        str_cat(where, ": the iteration time must be positive milliseconds, found \"", cells[i], "\""));
  }
  row.measured_s = *milliseconds / 1e3;
  if (!multi_node) row.group = str_cat("h", row.hidden, "-L", row.layers);
  check_vtrain_row(row, where);
  return row;
}

}  // namespace

std::span<const KorthikantiRun> korthikanti_table5() {
  return kTable5;
}

spec::ParallelConfig korthikanti_config(const KorthikantiRun& run, bool selective) {
  spec::ParallelConfig p;
  p.tp = 8;
  p.pp = run.pp;
  p.virtual_stages = run.virtual_stages;
  p.micro_batch = run.micro_batch;
  p.global_batch = run.global_batch;
  p.recompute = selective ? spec::Recompute::kSelective : spec::Recompute::kFull;
  p.sequence_parallel = selective;
  p.schedule = p.virtual_stages > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
  return p;
}

std::vector<RunCheck> check_korthikanti_runs(const cost::CostModelOptions& options,
                                             std::optional<spec::Runtime> runtime) {
  const spec::Runtime priced_as = runtime.value_or(spec::Runtime::kMegatron);
  cost::CostModelOptions o = cost::for_runtime(options, priced_as);
  o.flash_attention = false;  // 2022 Megatron-LM materialised the attention scores
  std::vector<RunCheck> checks;
  for (const KorthikantiRun& run : kTable5) {
    const auto model = spec::find_catalog_model(run.model)->spec;
    const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("a100-80g", run.gpus, "--gpu");
    for (const bool selective : {true, false}) {
      const auto evaluation = cost::evaluate(model, cluster, korthikanti_config(run, selective), 2048, o);
      checks.push_back(step_time_check(str_cat("korthikanti_", run.model, selective ? "_selective" : "_full"),
                                       "Korthikanti Table 5 A100-80GB bf16", priced_as,
                                       selective ? run.selective_s : run.full_s, evaluation));
      checks.back().assumptions.emplace_back("no FlashAttention (the paper's Megatron-LM materialised the scores)");
      if (run.virtual_stages == 1 && run.pp > 1)
        checks.back().assumptions.emplace_back("virtual stages not stated: one");
    }
  }
  return checks;
}

std::vector<VtrainRow> read_vtrain_csv(const std::filesystem::path& path, bool multi_node) {
  std::ifstream in(path);
  if (!in) throw core::ConfigError(str_cat(path.string(), ": cannot read vTrain's measurements"));
  return read_vtrain_csv(in, path.string(), multi_node);
}

std::vector<VtrainRow> read_vtrain_csv(std::istream& lines, const std::string& origin, bool multi_node) {
  std::string line;
  std::getline(lines, line);  // the header
  std::vector<VtrainRow> rows;
  for (int number = 2; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    rows.push_back(parse_vtrain_line(line, multi_node, str_cat(origin, ":", number)));
    rows.back().line = number;
  }
  if (rows.empty()) throw core::ConfigError(str_cat(origin, ": no measured rows"));
  return rows;
}

spec::ClusterSpec vtrain_cluster(int gpus, std::optional<core::BytesPerSecond> intra_node) {
  auto c = spec::HardwareCatalog::builtin().cluster_for_gpu("a100-80g", gpus <= 8 ? gpus : (gpus + 7) / 8 * 8, "--gpu");
  if (intra_node) c.node.intra_bandwidth = *intra_node;
  c.node.nics_per_node = 8;
  c.node.nic_bandwidth = core::gigabits_per_second(100);
  c.fabric.link_bandwidth = core::gigabits_per_second(100);
  return c;
}

void predict_vtrain(VtrainRow& row, cost::CostModelOptions options, std::optional<core::BytesPerSecond> intra_node) {
  const auto evaluation = evaluate_vtrain(row, options, intra_node);
  if (const auto* infeasible = std::get_if<cost::Infeasible>(&evaluation)) {
    row.feasible = false;
    row.why = cost::to_string(infeasible->reason) + ": " + infeasible->detail;
    return;
  }
  row.feasible = true;
  row.predicted_s = std::get<cost::Estimate>(evaluation).time.total().value();
}

double vtrain_mape(std::vector<VtrainRow>& rows, const cost::CostModelOptions& options,
                   std::optional<core::BytesPerSecond> intra_node) {
  double sum = 0;
  for (auto& row : rows) {
    predict_vtrain(row, options, intra_node);
    sum += row.feasible ? std::fabs(row.predicted_s - row.measured_s) / row.measured_s : 1.0;
  }
  return sum / static_cast<double>(rows.size());
}

std::vector<RunCheck> check_vtrain_runs(const std::filesystem::path& dir, const cost::CostModelOptions& options,
                                        std::optional<spec::Runtime> runtime) {
  if (!std::filesystem::is_directory(dir)) {
    throw core::ConfigError(str_cat(dir.string(), ": expected vTrain's directory (ground_truth_multi.csv and ",
                                    "ground_truth_single.csv)", std::filesystem::exists(dir) ? ", found a file" : ""));
  }
  const spec::Runtime priced_as = runtime.value_or(spec::Runtime::kMegatron);
  const cost::CostModelOptions o = cost::for_runtime(options, priced_as);
  std::vector<RunCheck> checks;
  for (const bool multi_node : {true, false}) {
    const auto rows =
        read_vtrain_csv(dir / (multi_node ? "ground_truth_multi.csv" : "ground_truth_single.csv"), multi_node);
    const std::string group = str_cat("vTrain ", multi_node ? "multi" : "single", "-node A100-80GB fp16");
    for (const VtrainRow& row : rows) {
      // The file's line in the id: the data set measures some configurations twice.
      const std::string id =
          str_cat("vtrain_", multi_node ? "multi" : "single", row.line, "_", row.group, "_n", row.gpus, "_gb",
                  row.global_batch, "_mb", row.micro_batch, "_tp", row.tp, "_dp", row.dp, "_pp", row.pp);
      checks.push_back(step_time_check(id, group, priced_as, row.measured_s, evaluate_vtrain(row, o, std::nullopt)));
      checks.back().assumptions = {kVtrainAssumptions.begin(), kVtrainAssumptions.end()};
    }
  }
  return checks;
}

}  // namespace cpt::planner
