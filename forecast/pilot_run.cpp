#include "forecast/pilot_run.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/order_statistics.h"
#include "core/str_cat.h"
#include "spec/plan.h"
#include "spec/train_config.h"

namespace cpt::forecast {
namespace {

namespace fs = std::filesystem;
using core::str_cat;
using Json = core::Json;

// Calls `row` with each line of a JSON-lines file, parsed; errors name the file and line.
template <typename Row>
void read_json_lines(const fs::path& path, Row row) {
  std::ifstream in(path);
  if (!in)
    throw core::ConfigError(str_cat(path.string(), ": cannot read it (is this a `cpt train` output directory?)"));
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    const std::string where = str_cat(path.string(), ":", line_number);
    try {
      const Json parsed = Json::parse(line);
      row(parsed, where);
    } catch (const Json::exception& e) {
      throw core::ConfigError(str_cat(where, ": expected a JSON object with the run's keys, got ", e.what()));
    }
  }
}

std::vector<double> read_learning_rates(const fs::path& path) {
  std::vector<double> lr;
  read_json_lines(path, [&](const Json& row, const std::string& where) {
    core::JsonObjectReader reader(row, where);
    const auto step = reader.integer("step", 0);
    if (step != static_cast<std::int64_t>(lr.size())) {
      throw core::ConfigError(str_cat(where, ": step ", step, " where step ", lr.size(), " was expected"));
    }
    lr.push_back(reader.number("lr", 0.0, 1e6));
  });
  return lr;
}

std::map<std::string, std::vector<EvalPoint>> read_evaluations(const fs::path& path, std::size_t steps_logged) {
  std::map<std::string, std::vector<EvalPoint>> by_set;
  read_json_lines(path, [&](const Json& row, const std::string& where) {
    core::JsonObjectReader reader(row, where);
    const EvalPoint point{reader.integer("step", 0, static_cast<std::int64_t>(steps_logged)),
                          reader.number("loss", 0.0, 1e6)};
    auto& points = by_set[reader.string("set")];
    if (!points.empty() && point.step <= points.back().step) {
      throw core::ConfigError(str_cat(where, ": step ", point.step, " after step ", points.back().step,
                                      " of the same set; expected each set's evaluations in step order, once each"));
    }
    points.push_back(point);
  });
  return by_set;
}

// The peak the run's steps ran at: each step's rate over the schedule's shape at that step (the
// median, which a KL guard's reductions late in a run do not move).
double peak_of(const spec::LrSchedule& shape, const std::vector<double>& lr) {
  std::vector<double> ratios;
  for (std::size_t step = 0; step < lr.size(); ++step) {
    const double unit = shape.at(static_cast<std::int64_t>(step));
    if (unit > 0 && lr[step] > 0) ratios.push_back(lr[step] / unit);
  }
  return ratios.empty() ? 0.0 : core::median(ratios);
}

}  // namespace

PilotRun read_pilot_run(const fs::path& dir) {
  PilotRun run;
  run.dir = dir;
  if (!fs::is_directory(dir)) {
    throw core::ConfigError(str_cat(dir.string(), ": not a directory; expected a `cpt train` output directory"));
  }
  for (const char* file : {"train_config.json", "run.json", "plan.json", "metrics.jsonl", "eval.jsonl"}) {
    if (!fs::exists(dir / file)) {
      throw core::ConfigError(str_cat(dir.string(), ": no ", file, "; expected a `cpt train` output directory"));
    }
  }
  const auto config = spec::load_train_config(dir / "train_config.json");
  if (config.packing == spec::Packing::kPadded) {
    // A padded step's tokens are its documents' (docs/train_config.md): steps and tokens do not convert.
    throw core::ConfigError(str_cat((dir / "train_config.json").string(), ": $.packing: expected \"packed\" (a ",
                                    "pilot's steps of global_batch x seq_len tokens), got \"padded\""));
  }
  const auto plan = spec::load_plan(dir / "plan.json");
  run.tokens_per_step = std::int64_t{plan.parallel.global_batch} * plan.workload.seq_len;
  const auto run_document = core::parse_json_file(dir / "run.json");
  auto run_record = core::JsonObjectReader::root_of(run_document);
  run.schedule = config.lr;
  run.schedule.total_steps = run_record.integer("total_steps", 1);
  if (config.lr_warmup_fraction) {
    run.warmup_fraction = *config.lr_warmup_fraction;
    run.schedule.warmup_steps =
        std::llround(*config.lr_warmup_fraction * static_cast<double>(run.schedule.total_steps));
  }
  run.lr = read_learning_rates(dir / "metrics.jsonl");
  run.evaluations = read_evaluations(dir / "eval.jsonl", run.lr.size());
  if (config.lr_peak_fraction) {
    spec::LrSchedule shape = run.schedule;
    shape.peak = 1;
    run.schedule.peak = peak_of(shape, run.lr);
    if (run.schedule.peak <= 0) {
      throw core::ConfigError(str_cat(dir.string(), ": metrics.jsonl has no step with a learning rate, so the ",
                                      "peak that lr.peak_fraction gave is unknown; give --peak-lr"));
    }
  }
  double total_weight = 0;
  for (const auto& set : config.data) total_weight += set.weight;
  for (const auto& set : config.data) run.data_weights[set.name] = set.weight / total_weight;
  return run;
}

double replay_share(const PilotRun& run, const std::vector<std::string>& new_data) {
  double new_share = 0;
  for (const auto& name : new_data) {
    const auto found = run.data_weights.find(name);
    if (found == run.data_weights.end()) {
      std::vector<std::string> names;
      for (const auto& [set, weight] : run.data_weights) names.push_back(set);
      throw core::ConfigError(str_cat("--new-data: ", run.dir.string(), " trains on ", core::join(names, ", "),
                                      "; it has no data set \"", name, "\""));
    }
    new_share += found->second;
  }
  if (new_share <= 0) {
    throw core::ConfigError(str_cat("--new-data: none of ", run.dir.string(), "'s data sets is the new data"));
  }
  return std::max(0.0, 1 - new_share);
}

std::vector<std::string> common_data_sets(const std::vector<PilotRun>& runs) {
  return keys_in_every(runs, &PilotRun::data_weights);
}

spec::LrSchedule schedule_for(const PilotRun& run, std::int64_t total_steps, double peak) {
  spec::LrSchedule schedule = run.schedule;
  schedule.total_steps = total_steps;
  schedule.peak = peak;
  if (run.warmup_fraction >= 0) {
    schedule.warmup_steps = std::llround(run.warmup_fraction * static_cast<double>(total_steps));
  }
  return schedule;
}

}  // namespace cpt::forecast
