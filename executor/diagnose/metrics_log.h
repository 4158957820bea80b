#pragma once
// metrics.jsonl as `cpt doctor` reads it: one row per logged step (run_log.h writes them), and
// the lines that are not one — a line cut short when the run was killed while writing it, or
// lines edited or written by another tool — counted, not dropped in silence.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace cpt::exec {

inline constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();

struct MetricsRow {
  std::int64_t step = 0;
  // NaN where the line has no number (nlohmann writes a non-finite number as null).
  double loss = kAbsent, lr = kAbsent, grad_norm = kAbsent;
  bool skipped = false;
  std::map<std::string, double> samples;                  // cumulative per source
  double expert_load = kAbsent, dropped_pairs = kAbsent;  // mixtures of experts
};

// The largest step a row may name (beyond it the line is not read: `step + 1` must not overflow).
inline constexpr std::int64_t kMaxLoggedStep = 1'000'000'000'000'000;

struct MetricsLog {
  std::vector<MetricsRow> rows;
  std::int64_t highest_step = -1;     // the largest step of the rows
  std::int64_t out_of_order = 0;      // rows whose step is not above every step before them
  std::int64_t unreadable_lines = 0;  // not a JSON object with an integer "step" in 0..kMaxLoggedStep
  std::int64_t first_unreadable = 0;  // its line number (1-based), when there is one
  bool last_line_unreadable = false;  // the file's last line is one of them (cut by a kill)
};

// Reads `file`; a file that cannot be opened reads as empty.
MetricsLog read_metrics_log(const std::filesystem::path& file);

}  // namespace cpt::exec
