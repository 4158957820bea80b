#pragma once
// `cpt doctor`'s checks of a run's record rather than its training (run_doctor.h): every line of
// metrics.jsonl a step, in order; how far the run got against the schedule run.json records, and
// whether a process is still writing it.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "executor/diagnose/metrics_log.h"
#include "executor/diagnose/run_doctor.h"

namespace cpt::exec {

// run.json as cpt train writes it: the TRAIN.json it was started with and the schedule's length.
// `problem` says what is wrong with a run.json that is there but not cpt train's.
struct RunRecord {
  std::optional<std::filesystem::path> config;
  std::optional<std::int64_t> total_steps;
  std::string problem;
};
RunRecord read_run_record(const std::filesystem::path& run_dir);

// The "metrics" finding: the steps logged, the lines that are not a step record, rows that repeat
// or go back in steps.
Finding check_metrics_lines(const MetricsLog& log);

// The "progress" finding, when run.json records a schedule (or is not cpt train's): ran to its
// end, still training (the pid holding RUN_DIR's lock), or ended early with its newest checkpoint.
std::optional<Finding> check_progress(const std::filesystem::path& run_dir, const MetricsLog& log,
                                      const RunRecord& record);

}  // namespace cpt::exec
