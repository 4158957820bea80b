#pragma once
// What a run writes as it goes, on rank 0: OUT/metrics.jsonl (a row per step), OUT/eval.jsonl (a
// row per evaluated set) and its progress on stdout (a bar on a terminal, else a line every log
// interval). A resumed run first drops the rows at or after the step it resumes at.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "executor/train/expert_load.h"

namespace cpt::exec {

// One step as metrics.jsonl records it (docs/executor.md lists the keys).
struct StepRecord {
  std::int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens_seen = 0;  // after this step
  std::int64_t step_tokens = 0;
  double seconds = 0;
  std::int64_t peak_memory_bytes = 0;
  bool skipped = false;  // not finite: no update
  std::optional<double> kl;
  std::optional<double> ewc_penalty;
  std::optional<ExpertLoad> experts;  // mixtures of experts only
  nlohmann::ordered_json samples_by_source;
};

// Appends JSON rows to a file, flushed after each; RuntimeError when a write fails.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& path);
  void write(const nlohmann::ordered_json& row);

 private:
  std::ofstream out_;
  std::filesystem::path path_;
};

// "1h2m", "3m4s", "5s".
std::string duration_text(double seconds);

class RunLog {
 public:
  // `writes`: this rank writes (rank 0). `bar`: draw a progress bar. `log_interval`: steps between
  // progress lines without a bar (0: none). Truncates the files to the rows before `first_step`.
  RunLog(const std::filesystem::path& out_dir, std::int64_t first_step, std::int64_t total_steps, bool writes, bool bar,
         std::int64_t log_interval);
  // The step's row and progress; `eta_s`: the estimated time to the run's last step.
  void step(const StepRecord& record, double eta_s);
  void eval(std::int64_t step, const std::string& set, double loss, std::int64_t tokens);
  // Ends the progress bar's line.
  void end();

 private:
  void progress(const StepRecord& record, double eta_s);

  std::int64_t total_steps_;
  bool bar_;
  std::int64_t log_interval_;
  std::optional<JsonlWriter> metrics_, eval_;
};

}  // namespace cpt::exec
