#include "executor/train/run_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

// Keeps only the lines of a JSONL file whose "step" is below `end_step` (after a resume).
void truncate_jsonl(const fs::path& path, std::int64_t end_step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_object() && row.value("step", std::int64_t{0}) < end_step) kept += line + "\n";
  }
  core::write_file_atomic(path, kept);
}

}  // namespace

JsonlWriter::JsonlWriter(const fs::path& path) : out_(path, std::ios::app), path_(path) {
  if (!out_) throw core::RuntimeError(str_cat(path.string(), ": cannot open for writing"));
}

void JsonlWriter::write(const nlohmann::ordered_json& row) {
  out_ << row.dump() << "\n";
  out_.flush();
  if (!out_) throw core::RuntimeError(str_cat(path_.string(), ": write failed"));
}

std::string duration_text(double seconds) {
  const auto t = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (t >= 3600) return str_cat(t / 3600, "h", (t % 3600) / 60, "m");
  if (t >= 60) return str_cat(t / 60, "m", t % 60, "s");
  return str_cat(t, "s");
}

RunLog::RunLog(const fs::path& out_dir, std::int64_t first_step, std::int64_t total_steps, bool writes, bool bar,
               std::int64_t log_interval)
    : total_steps_(total_steps), bar_(writes && bar), log_interval_(writes ? log_interval : 0) {
  if (!writes) return;
  // A metrics row's step counts the steps before it (the resumed run writes first_step's own); an
  // evaluation's, the steps after which it ran: the one at first_step saw the checkpoint's weights,
  // and the resumed run does not repeat it.
  truncate_jsonl(out_dir / "metrics.jsonl", first_step);
  truncate_jsonl(out_dir / "eval.jsonl", first_step + 1);
  metrics_.emplace(out_dir / "metrics.jsonl");
  eval_.emplace(out_dir / "eval.jsonl");
}

void RunLog::step(const StepRecord& r, double eta_s) {
  if (!metrics_) return;
  nlohmann::ordered_json row{{"step", r.step},
                             {"loss", r.loss},
                             {"lr", r.lr},
                             {"grad_norm", r.grad_norm},
                             {"tokens", r.tokens_seen},
                             {"tokens_per_s", static_cast<double>(r.step_tokens) / r.seconds},
                             {"step_time_s", r.seconds},
                             {"peak_memory_bytes", r.peak_memory_bytes},
                             {"skipped", r.skipped}};
  if (r.kl) row["kl"] = *r.kl;
  if (r.ewc_penalty) row["ewc_penalty"] = *r.ewc_penalty;
  if (r.experts) {
    row["expert_load"] = r.experts->busiest;
    row["router_aux_loss"] = r.experts->aux_loss;
    row["dropped_pairs"] = r.experts->dropped;
  }
  row["samples_by_source"] = r.samples_by_source;
  metrics_->write(row);
  progress(r, eta_s);
}

void RunLog::progress(const StepRecord& r, double eta_s) {
  const long long done = r.step + 1, total = total_steps_;
  const double tokens_per_s = static_cast<double>(r.step_tokens) / r.seconds;
  if (bar_) {
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::printf("\rstep %lld/%lld [%s%s] loss %.4f lr %.2e %.0f tok/s ETA %s   ", done, total,
                std::string(static_cast<std::size_t>(filled), '=').c_str(),
                std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), r.loss, r.lr, tokens_per_s,
                duration_text(eta_s).c_str());
    std::fflush(stdout);
  } else if (log_interval_ > 0 && ((done - 1) % log_interval_ == 0 || done == total)) {
    std::printf("step %lld/%lld loss %.4f lr %.3e grad_norm %.3f %.0f tok/s ETA %s\n", done, total, r.loss, r.lr,
                r.grad_norm, tokens_per_s, duration_text(eta_s).c_str());
    std::fflush(stdout);
  }
}

void RunLog::eval(std::int64_t step, const std::string& set, double loss, std::int64_t tokens) {
  if (!eval_) return;
  eval_->write(nlohmann::ordered_json{
      {"step", step}, {"set", set}, {"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", tokens}});
  core::info0("eval step ", step, " ", set, ": loss ", loss, ", perplexity ", std::exp(loss));
}

void RunLog::end() {
  if (bar_) std::printf("\n");
}

}  // namespace cpt::exec
