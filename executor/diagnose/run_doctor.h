#pragma once
// `cpt doctor RUN_DIR`: the checks a practitioner runs when the loss does not fall, each with a
// verdict and a suggestion, from what a run leaves behind (metrics.jsonl, eval.jsonl, plan.json,
// the TRAIN.json it ran with, its data and tokenizer):
//   metrics            the run logged steps at all
//   non-finite steps   skipped updates (NaN/Inf loss or gradient norm)
//   loss trend         the last tenth of the steps against the first
//   loss spikes        steps more than 4 robust deviations above the running median
//   loss oscillation   alternating up/down steps with a large amplitude late in the run
//   learning rate      the logged rate against TRAIN.json's schedule; re-warming of continual runs
//   gradient norm      how often clipping acted, and growth of the norm
//   data mixture       the samples seen per source against the configured weights
//   data sample        windows of each training source decoded: unknown-token and byte-fallback
//                      rates, replacement and control characters (binary or mis-encoded text)
//   starting weights   the first loss against ln(vocabulary): a run meant to start from trained
//                      weights that starts at chance did not load them
#include <filesystem>
#include <string>
#include <vector>

namespace cpt::exec {

enum class Verdict { kOk, kWarn, kFail };
std::string to_string(Verdict v);

struct Finding {
  std::string check;
  Verdict verdict = Verdict::kOk;
  std::string detail;      // what was measured, with the numbers
  std::string suggestion;  // empty when the verdict is ok
};

// ConfigError when RUN_DIR has no metrics.jsonl and no plan.json (not a run directory).
std::vector<Finding> diagnose_run(const std::filesystem::path& run_dir);

}  // namespace cpt::exec
