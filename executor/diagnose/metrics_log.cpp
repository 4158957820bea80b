#include "executor/diagnose/metrics_log.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

namespace cpt::exec {

namespace {

// JSON has no NaN: nlohmann writes a non-finite number as null.
double number_or_nan(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : kAbsent;
}

// The row of one line, or nullopt when the line is not a step record.
std::optional<MetricsRow> parse_row(const std::string& line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || j["step"].get<std::int64_t>() < 0 ||
      j["step"].get<std::int64_t>() > kMaxLoggedStep) {
    return std::nullopt;
  }
  MetricsRow r;
  r.step = j["step"].get<std::int64_t>();
  r.loss = number_or_nan(j, "loss");
  r.lr = number_or_nan(j, "lr");
  r.grad_norm = number_or_nan(j, "grad_norm");
  r.skipped = j.contains("skipped") && j["skipped"].is_boolean() && j["skipped"].get<bool>();
  r.expert_load = number_or_nan(j, "expert_load");
  r.dropped_pairs = number_or_nan(j, "dropped_pairs");
  if (j.contains("samples_by_source") && j["samples_by_source"].is_object()) {
    for (const auto& [source, samples] : j["samples_by_source"].items()) {
      if (!samples.is_number()) return std::nullopt;
      r.samples[source] = samples.get<double>();
    }
  }
  return r;
}

}  // namespace

MetricsLog read_metrics_log(const std::filesystem::path& file) {
  MetricsLog log;
  std::ifstream in(file);
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    if (auto row = parse_row(line)) {
      if (row->step <= log.highest_step) ++log.out_of_order;
      log.highest_step = std::max(log.highest_step, row->step);
      log.rows.push_back(std::move(*row));
      log.last_line_unreadable = false;
      continue;
    }
    if (log.unreadable_lines++ == 0) log.first_unreadable = number;
    log.last_line_unreadable = true;
  }
  return log;
}

}  // namespace cpt::exec
