#include "executor/diagnose/run_progress.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/directory_lock.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

// "1 line is" / "2 lines are".
std::string count_of(std::int64_t count, const char* one, const char* many) {
  return str_cat(count, " ", count == 1 ? one : many);
}

// The newest step directory under RUN_DIR/checkpoints ("step_" and digits; not verified), or empty.
std::string newest_checkpoint(const fs::path& run_dir) {
  std::string newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints", ec)) {
    const auto name = entry.path().filename().string();
    const bool step = name.size() > 5 && name.starts_with("step_") &&
                      std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (step && (name.size() > newest.size() || (name.size() == newest.size() && name > newest))) newest = name;
  }
  return newest;
}

Finding make(std::string check, Verdict verdict, std::string detail, std::string suggestion = "") {
  return Finding{std::move(check), verdict, std::move(detail), verdict == Verdict::kOk ? "" : std::move(suggestion)};
}

}  // namespace

RunRecord read_run_record(const fs::path& run_dir) {
  RunRecord record;
  const auto file = run_dir / "run.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) return record;
  if (!fs::is_regular_file(file, ec)) {
    record.problem = "not a file";
    return record;
  }
  std::ifstream in(file);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) {
    record.problem = "not a JSON object";
    return record;
  }
  if (j.contains("config")) {
    if (j["config"].is_string()) {
      record.config = j["config"].get<std::string>();
    } else {
      record.problem = str_cat("config is ", j["config"].dump(), ", not a path");
    }
  }
  if (j.contains("total_steps")) {
    const auto& total = j["total_steps"];
    if (total.is_number_integer() && total.get<std::int64_t>() >= 1 && total.get<std::int64_t>() <= kMaxLoggedStep) {
      record.total_steps = total.get<std::int64_t>();
    } else {
      record.problem = str_cat("total_steps is ", total.dump(), ", not a step count");
    }
  }
  return record;
}

Finding check_metrics_lines(const MetricsLog& log) {
  const auto& rows = log.rows;
  const auto unreadable = str_cat(count_of(log.unreadable_lines, "line is", "lines are"), " not a step record (line ",
                                  log.first_unreadable);
  if (rows.empty()) {
    return make("metrics", Verdict::kFail,
                log.unreadable_lines == 0 ? "no step logged" : str_cat("no step logged; ", unreadable, " first)"),
                "the run logged no step: look at its output for the error");
  }
  std::string detail = str_cat(count_of(static_cast<std::int64_t>(rows.size()), "step", "steps"), " logged (",
                               rows.front().step, " to ", log.highest_step, ")");
  if (log.unreadable_lines == 0 && log.out_of_order == 0) return make("metrics", Verdict::kOk, detail);
  const bool only_last = log.unreadable_lines == 1 && log.last_line_unreadable && log.out_of_order == 0;
  if (log.unreadable_lines > 0) detail += str_cat("; ", unreadable, only_last ? ", the last)" : " first)");
  if (log.out_of_order > 0) {
    detail += str_cat("; ", count_of(log.out_of_order, "row repeats", "rows repeat"), " or go back in steps");
  }
  return make("metrics", Verdict::kWarn, detail,
              only_last ? "the run was killed while writing its last line: --resume continues from its newest "
                          "checkpoint (and rewrites metrics.jsonl from there)"
                        : "metrics.jsonl was edited, concatenated or written by another tool (a resumed run "
                          "rewrites it from its checkpoint): the checks below read its step records as they come");
}

std::optional<Finding> check_progress(const fs::path& run_dir, const MetricsLog& log, const RunRecord& record) {
  if (!record.problem.empty()) {
    return make("progress", Verdict::kWarn, str_cat("run.json: ", record.problem, ": progress not checked"),
                "run.json is written by cpt train: it was edited or written by another tool");
  }
  if (!record.total_steps || log.rows.empty()) return std::nullopt;
  const std::int64_t total = *record.total_steps;
  const std::int64_t done = log.highest_step + 1;
  const auto of = str_cat(done, " of ", total, " steps");
  if (done > total) {
    return make("progress", Verdict::kWarn, str_cat(of, ": steps logged beyond the schedule run.json records"),
                "metrics.jsonl and run.json are of different runs, or were edited");
  }
  if (done == total) return make("progress", Verdict::kOk, str_cat(of, ": the schedule ran to its end"));
  if (const auto writer = core::DirectoryLock::holder_of(run_dir)) {
    return make("progress", Verdict::kOk, str_cat(of, ", still training (pid ", *writer, ")"));
  }
  const auto checkpoint = newest_checkpoint(run_dir);
  return make("progress", Verdict::kWarn,
              str_cat(of, " (", core::fixed(100.0 * static_cast<double>(done) / static_cast<double>(total), 1),
                      "%), and no process is writing the run: it was stopped (--stop-at, SIGTERM) or killed; newest "
                      "checkpoint ",
                      checkpoint.empty() ? "none" : checkpoint),
              checkpoint.empty() ? "the run ended before its first checkpoint: its output (or the job's log) says "
                                   "why; cpt train --resume starts it again from step 0"
                                 : "cpt train --resume continues from the newest checkpoint; the run's output (or "
                                   "the job's log) says why it ended");
}

}  // namespace cpt::exec
