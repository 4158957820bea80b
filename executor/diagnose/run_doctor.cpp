#include "executor/diagnose/run_doctor.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/directory_lock.h"
#include "core/error.h"
#include "core/order_statistics.h"
#include "core/str_cat.h"
#include "executor/diagnose/metrics_log.h"
#include "executor/diagnose/run_progress.h"
#include "executor/train/run_inputs.h"
#include "executor/train/train_config.h"
#include "spec/plan.h"

namespace cpt::exec {

using core::median;
using core::str_cat;
namespace fs = std::filesystem;

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

namespace {

using Row = MetricsRow;

double mean_of(const std::vector<Row>& rows, std::size_t begin, std::size_t end) {
  double s = 0;
  std::size_t n = 0;
  for (std::size_t i = begin; i < end; ++i) {
    if (std::isfinite(rows[i].loss)) {
      s += rows[i].loss;
      ++n;
    }
  }
  return n ? s / static_cast<double>(n) : std::nan("");
}

using core::fixed;
std::string fixed(double v) {
  return fixed(v, 3);
}
std::string sci(double v) {
  return core::significant(v, 3);
}

Finding finding(std::string check, Verdict v, std::string detail, std::string suggestion = "") {
  return Finding{std::move(check), v, std::move(detail), v == Verdict::kOk ? "" : std::move(suggestion)};
}

void check_losses(const std::vector<Row>& rows, std::vector<Finding>& out) {
  const auto n = rows.size();
  std::int64_t skipped = 0;
  for (const auto& r : rows) skipped += r.skipped || !std::isfinite(r.loss) ? 1 : 0;
  const double skipped_share = static_cast<double>(skipped) / static_cast<double>(n);
  out.push_back(finding("non-finite steps",
                        skipped == 0           ? Verdict::kOk
                        : skipped_share < 0.01 ? Verdict::kWarn
                                               : Verdict::kFail,
                        str_cat(skipped, " of ", n, " steps skipped (loss or gradient norm not finite)"),
                        "lower the learning rate or raise warmup; check the data for empty or corrupt windows; in "
                        "bf16/fp16 look for overflowing activations"));

  const std::size_t tenth = std::max<std::size_t>(1, n / 10);
  if (n >= 10) {
    const double first = mean_of(rows, 0, tenth), last = mean_of(rows, n - tenth, n);
    if (!std::isfinite(first) || !std::isfinite(last) || first <= 0) {
      out.push_back(finding("loss trend", Verdict::kFail,
                            str_cat("no finite, positive mean loss over the first or the last tenth of the steps (",
                                    fixed(first), ", ", fixed(last), ")"),
                            "the loss is not finite or not a loss: see the non-finite steps above"));
      return;
    }
    const double change = (last - first) / first;
    const Verdict v = change < -0.01 ? Verdict::kOk : change < 0.01 ? Verdict::kWarn : Verdict::kFail;
    out.push_back(finding("loss trend", v,
                          str_cat("mean loss ", fixed(first), " over the first tenth of the steps, ", fixed(last),
                                  " over the last (", fixed(100 * change, 1), "%)"),
                          v == Verdict::kWarn ? "the loss is flat: the learning rate may be too low (or far too high), "
                                                "the data may repeat, or the model may have converged on this data"
                                              : "the loss rises: lower the learning rate, check the data mixture and "
                                                "that training resumed from the right checkpoint"));
  } else {
    out.push_back(finding("loss trend", Verdict::kWarn, str_cat("only ", n, " steps logged"),
                          "train at least 10 steps for a trend"));
  }

  // Spikes: a loss more than 4 robust deviations (1.4826·MAD) and 10% above the median of the 20
  // steps before it.
  std::vector<std::int64_t> spikes;
  for (std::size_t i = 20; i < n; ++i) {
    std::vector<double> window;
    for (std::size_t k = i - 20; k < i; ++k) {
      if (std::isfinite(rows[k].loss)) window.push_back(rows[k].loss);
    }
    if (window.size() < 10 || !std::isfinite(rows[i].loss)) continue;
    const double m = median(window);
    std::vector<double> dev;
    for (const double x : window) dev.push_back(std::abs(x - m));
    const double mad = 1.4826 * median(dev);
    if (rows[i].loss > m + 4 * std::max(mad, 1e-3 * m) && rows[i].loss > 1.1 * m) spikes.push_back(rows[i].step);
  }
  std::string at;
  for (std::size_t i = 0; i < std::min<std::size_t>(spikes.size(), 5); ++i) at += str_cat(i ? ", " : "", spikes[i]);
  const double spike_share = static_cast<double>(spikes.size()) / static_cast<double>(n);
  out.push_back(finding("loss spikes",
                        spikes.empty()       ? Verdict::kOk
                        : spike_share < 0.02 ? Verdict::kWarn
                                             : Verdict::kFail,
                        spikes.empty()
                            ? "none (no step 4 robust deviations above its last 20)"
                            : str_cat(spikes.size(), " spikes, at steps ", at, spikes.size() > 5 ? ", ..." : ""),
                        "lower the peak learning rate or lengthen warmup; look at the batches of those steps (a "
                        "corrupt or very repetitive document); tighten gradient clipping"));

  // Oscillation over the second half: alternating signs of consecutive differences, with an
  // amplitude that is large relative to the loss.
  if (n >= 20) {
    int flips = 0, pairs = 0;
    double amplitude = 0;
    for (std::size_t i = n / 2 + 2; i < n; ++i) {
      const double d1 = rows[i].loss - rows[i - 1].loss, d0 = rows[i - 1].loss - rows[i - 2].loss;
      if (!std::isfinite(d1) || !std::isfinite(d0)) continue;
      ++pairs;
      flips += (d1 > 0) != (d0 > 0) ? 1 : 0;
      amplitude += std::abs(d1);
    }
    const double flip_share = pairs ? static_cast<double>(flips) / pairs : 0;
    const double late_mean = mean_of(rows, n / 2, n);
    const double rel = pairs && std::isfinite(amplitude) && late_mean > 0 ? amplitude / pairs / late_mean : 0;
    const bool oscillates = flip_share > 0.7 && rel > 0.05;
    out.push_back(
        finding("loss oscillation", oscillates ? Verdict::kWarn : Verdict::kOk,
                str_cat(fixed(100 * flip_share, 0), "% of late steps reverse direction, mean step-to-step change ",
                        fixed(100 * rel, 1), "% of the loss"),
                "the optimizer overshoots: lower the learning rate or raise the batch size"));
  }
}

void check_learning_rate(const std::vector<Row>& rows, const TrainConfig& config, std::int64_t total_steps,
                         std::vector<Finding>& out) {
  LrSchedule schedule = config.lr;
  schedule.total_steps = total_steps;
  double worst = 0;
  std::int64_t worst_step = 0;
  for (const auto& r : rows) {
    const double expected = schedule.at(r.step);
    const double rel = expected > 0 ? std::abs(r.lr - expected) / expected : std::abs(r.lr);
    if (rel > worst) {
      worst = rel;
      worst_step = r.step;
    }
  }
  const bool agrees = worst < 1e-6;
  const bool continual = config.init_from.has_value();
  std::string detail =
      str_cat(to_string(schedule.kind), " schedule, peak ", sci(schedule.peak), ", warmup ", schedule.warmup_steps,
              " of ", total_steps, " steps, floor ", sci(schedule.peak * schedule.min_ratio));
  if (!agrees) {
    detail += str_cat("; logged rate differs from it by up to ", fixed(100 * worst, 1), "% (step ", worst_step, ")");
  }
  Verdict v = agrees ? Verdict::kOk : Verdict::kWarn;
  std::string suggestion =
      agrees ? "" : "the rate was changed during the run (KL guard, or a resume with another schedule)";
  if (continual && schedule.warmup_steps == 0) {
    v = Verdict::kWarn;
    suggestion =
        "a continual run from trained weights should re-warm (about 1% of the steps): an immediate jump to "
        "the peak rate destabilises the trained model (Gupta et al. 2023)";
  }
  if (continual && schedule.peak > 1e-3) {
    v = Verdict::kWarn;
    suggestion = str_cat("peak ", sci(schedule.peak), " is high for continual pre-training: start near a tenth of ",
                         "the original pre-training peak (docs/continual.md)");
  }
  out.push_back(finding("learning rate", v, detail, suggestion));
}

void check_grad_norm(const std::vector<Row>& rows, double clip, std::vector<Finding>& out) {
  std::vector<double> norms;
  int clipped = 0;
  for (const auto& r : rows) {
    if (!std::isfinite(r.grad_norm)) continue;
    norms.push_back(r.grad_norm);
    clipped += clip > 0 && r.grad_norm > clip ? 1 : 0;
  }
  if (norms.size() < 10) return;
  const auto tenth = std::max<std::size_t>(1, norms.size() / 10);
  const double early = median(std::vector<double>(norms.begin() + static_cast<std::ptrdiff_t>(tenth),
                                                  norms.begin() + static_cast<std::ptrdiff_t>(2 * tenth)));
  const double late = median(std::vector<double>(norms.end() - static_cast<std::ptrdiff_t>(tenth), norms.end()));
  const double clipped_share = static_cast<double>(clipped) / static_cast<double>(norms.size());
  Verdict v = Verdict::kOk;
  std::string suggestion;
  if (late > 10 * early) {
    v = Verdict::kWarn;
    suggestion = "the gradient norm keeps growing: a sign of divergence; lower the learning rate";
  }
  if (clipped_share > 0.5) {
    v = Verdict::kWarn;
    suggestion =
        "clipping acts on most steps: the effective learning rate is lower than configured; lower the rate "
        "or raise the clip threshold";
  }
  out.push_back(finding("gradient norm", v,
                        str_cat("median ", sci(early), " early, ", sci(late), " late; clipped (> ", sci(clip), ") on ",
                                fixed(100 * clipped_share, 1), "% of steps"),
                        suggestion));
}

void check_mixture(const std::vector<Row>& rows, const TrainConfig& config, std::vector<Finding>& out) {
  if (rows.empty() || rows.back().samples.empty() || config.data.size() < 2) {
    out.push_back(finding(
        "data mixture", Verdict::kOk,
        str_cat(config.data.size(), " training source", config.data.size() == 1 ? "" : "s", ": nothing to mix")));
    return;
  }
  double configured_total = 0, seen_total = 0;
  for (const auto& d : config.data) configured_total += d.weight;
  for (const auto& [k, v] : rows.back().samples) seen_total += v;
  double worst = 0;
  std::string detail;
  for (const auto& d : config.data) {
    const auto it = rows.back().samples.find(d.name);
    const double seen = it == rows.back().samples.end() ? 0 : it->second / seen_total;
    const double want = d.weight / configured_total;
    worst = std::max(worst, std::abs(seen - want));
    detail += str_cat(detail.empty() ? "" : "; ", d.name, " ", fixed(100 * seen, 1), "% seen vs ", fixed(100 * want, 1),
                      "% configured");
  }
  out.push_back(finding("data mixture", worst <= 0.02 ? Verdict::kOk : Verdict::kWarn, detail,
                        "the mixture seen differs from the weights: a source may be exhausted and repeating, or the "
                        "run resumed with other weights"));
}

// A mixture of experts' routing over the run: how far the busiest expert's load is from balanced
// (1) toward collapse (E/k: every token chooses it), early and late, and the pairs dropped.
void check_expert_load(const std::vector<Row>& rows, const spec::ExpertSpec& moe, std::vector<Finding>& out) {
  std::vector<double> loads, dropped;
  for (const auto& r : rows) {
    if (std::isfinite(r.expert_load)) loads.push_back(r.expert_load);
    if (std::isfinite(r.dropped_pairs)) dropped.push_back(r.dropped_pairs);
  }
  if (loads.empty()) return;
  const double collapse = static_cast<double>(moe.experts) / moe.experts_per_token;
  // The busiest expert takes at least the balanced share and at most every token once; the
  // dropped pairs are a share. Round-off aside, anything else was not written by cpt train.
  const auto outside = [](const std::vector<double>& values, double low, double high) {
    return std::count_if(values.begin(), values.end(),
                         [&](double value) { return value < low * (1 - 1e-9) || value > high * (1 + 1e-9); });
  };
  const auto impossible = outside(loads, 1, collapse) + outside(dropped, 0, 1);
  if (impossible > 0) {
    out.push_back(finding("expert load", Verdict::kFail,
                          str_cat(impossible, impossible == 1 ? " logged value" : " logged values",
                                  " outside what routing allows (busiest expert 1 to ", fixed(collapse, 2),
                                  "x its balanced share, dropped pairs 0 to 100%)"),
                          "metrics.jsonl was edited or written by another tool: its expert load cannot be read"));
    return;
  }
  const auto tenth = std::max<std::size_t>(1, loads.size() / 10);
  const double early = median(std::vector<double>(loads.begin(), loads.begin() + static_cast<std::ptrdiff_t>(tenth)));
  const double late = median(std::vector<double>(loads.end() - static_cast<std::ptrdiff_t>(tenth), loads.end()));
  const double late_dropped =
      dropped.empty()
          ? 0
          : median(std::vector<double>(dropped.end() - static_cast<std::ptrdiff_t>(std::min(tenth, dropped.size())),
                                       dropped.end()));
  Verdict v = Verdict::kOk;
  std::string suggestion;
  if (late - 1 > 0.5 * (collapse - 1)) {
    v = Verdict::kWarn;
    suggestion =
        "the router sends most tokens to few experts: raise router_aux_loss, lower the learning rate, or "
        "replay more of the original data (docs/continual.md, \"Mixtures of experts\")";
  } else if (late_dropped > 0.05) {
    v = Verdict::kWarn;
    suggestion = "over 5% of the routed pairs are dropped at capacity: raise the capacity factor or run dropless";
  }
  out.push_back(finding("expert load", v,
                        str_cat("busiest expert at ", fixed(early, 2), "x its balanced share early, ", fixed(late, 2),
                                "x late (", fixed(collapse, 2), "x: every token chooses it); ",
                                fixed(100 * late_dropped, 1), "% of pairs dropped late"),
                        suggestion));
}

// Decodes windows of each training source and measures how much of it is unknown, byte-level or
// not text.
void check_data_sample(const RunInputs& inputs, int seq_len, std::vector<Finding>& out) {
  if (!inputs.tokenizer) {
    out.push_back(finding("data sample", Verdict::kWarn, "no tokenizer in the run's configuration: nothing decoded",
                          "name the tokenizer in TRAIN.json so that samples can be checked"));
    return;
  }
  const auto& tok = *inputs.tokenizer;
  for (const auto& source : inputs.train) {
    const auto& data = *source.dataset;
    const std::int64_t windows = std::min<std::int64_t>(8, std::max<std::int64_t>(1, data.tokens() / seq_len));
    std::int64_t tokens = 0, unknown = 0, bytes = 0;
    std::int64_t chars = 0, bad_chars = 0;
    std::string excerpt;
    for (std::int64_t w = 0; w < windows; ++w) {
      const auto first =
          data.tokens() <= seq_len ? 0 : (data.tokens() - seq_len) * w / std::max<std::int64_t>(1, windows - 1);
      const auto len = std::min<std::int64_t>(seq_len, data.tokens() - first);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(len));
      data.read(first, ids);
      std::vector<std::int32_t> ids32(ids.begin(), ids.end());
      for (const auto id : ids32) {
        ++tokens;
        unknown += id == tok.unk_id() ? 1 : 0;
        const auto piece = tok.piece(id);
        bytes += piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' ? 1 : 0;
      }
      const auto text = tok.decode(ids32);
      if (excerpt.empty()) {
        std::size_t cut = std::min<std::size_t>(80, text.size());
        while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
        excerpt = text.substr(0, cut);  // whole UTF-8 characters
      }
      for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c & 0xC0) == 0x80) continue;  // a UTF-8 continuation byte
        ++chars;
        const bool control = c < 0x20 && c != '\n' && c != '\t' && c != '\r';
        const bool replacement = c == 0xEF && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0xBF &&
                                 static_cast<unsigned char>(text[i + 2]) == 0xBD;
        bad_chars += control || replacement ? 1 : 0;
      }
    }
    const double unk = tokens ? static_cast<double>(unknown) / static_cast<double>(tokens) : 0;
    const double byte_share = tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0;
    const double bad = chars ? static_cast<double>(bad_chars) / static_cast<double>(chars) : 0;
    Verdict v = Verdict::kOk;
    std::string suggestion;
    if (unk > 0.01 || byte_share > 0.10 || bad > 0.01) {
      v = unk > 0.05 || bad > 0.05 ? Verdict::kFail : Verdict::kWarn;
      suggestion = unk > 0.01   ? "many unknown tokens: the tokenizer does not cover this text (extend it: cpt data "
                                  "extend-tokenizer) or the data was tokenized with another tokenizer"
                   : bad > 0.01 ? "control or replacement characters: binary or mis-encoded files in the corpus"
                                : "many byte-level pieces: the tokenizer fits this domain poorly (extend its "
                                  "vocabulary)";
    }
    for (auto& c : excerpt) {
      if (c == '\n' || c == '\t') c = ' ';
    }
    out.push_back(finding(
        str_cat("data sample: ", source.name), v,
        str_cat(tokens, " tokens decoded: unknown ", fixed(100 * unk, 2), "%, byte pieces ", fixed(100 * byte_share, 2),
                "%, control/replacement characters ", fixed(100 * bad, 2), "%; \"", excerpt, "\""),
        suggestion));
  }
}

void check_start(const std::vector<Row>& rows, const TrainConfig& config, const spec::ModelSpec& model,
                 std::vector<Finding>& out) {
  if (rows.empty() || rows.front().step != 0) {
    out.push_back(finding("starting weights", Verdict::kOk, "the log does not start at step 0 (a resumed run)"));
    return;
  }
  const double chance = std::log(static_cast<double>(model.vocab));
  const double first = rows.front().loss;
  if (!std::isfinite(first)) {
    out.push_back(finding("starting weights", Verdict::kWarn, "the first step's loss is not finite",
                          "a first loss that is not finite: the starting weights or the first batch are broken"));
    return;
  }
  const auto detail =
      str_cat("first loss ", fixed(first), " vs ln(vocabulary) = ", fixed(chance),
              config.init_from ? str_cat(", init_from ", config.init_from->string()) : ", from scratch");
  if (config.init_from && first > 0.9 * chance) {
    out.push_back(finding("starting weights", Verdict::kFail, detail,
                          "the run was meant to start from trained weights but starts at chance: check init_from, and "
                          "that the tokenizer is the base model's (a new tokenizer scrambles every id)"));
  } else if (!config.init_from && first < 0.5 * chance) {
    out.push_back(finding("starting weights", Verdict::kWarn, detail,
                          "a run from scratch starts far below chance: is the data trivially repetitive?"));
  } else {
    out.push_back(finding("starting weights", Verdict::kOk, detail));
  }
}

}  // namespace

std::vector<Finding> diagnose_run(const fs::path& run_dir) {
  const auto metrics_file = run_dir / "metrics.jsonl";
  if (!fs::exists(metrics_file) || !fs::exists(run_dir / "plan.json")) {
    throw core::ConfigError(str_cat(run_dir.string(), ": not a run directory (expected metrics.jsonl and plan.json ",
                                    "written by cpt train)"));
  }
  std::vector<Finding> out;
  const auto log = read_metrics_log(metrics_file);
  const auto& rows = log.rows;
  out.push_back(check_metrics_lines(log));
  if (rows.empty()) return out;
  const auto plan = spec::load_plan(run_dir / "plan.json");
  const auto record = read_run_record(run_dir);
  if (auto progress = check_progress(run_dir, log, record)) out.push_back(std::move(*progress));
  check_losses(rows, out);
  if (plan.model.moe.present()) check_expert_load(rows, plan.model.moe, out);

  // The configuration the run used: the file run.json names (its relative data paths resolve
  // from there), else cpt train's copy of it.
  std::optional<TrainConfig> config;
  std::error_code ec;
  if (record.config && fs::is_regular_file(*record.config, ec)) {
    config = load_train_config(*record.config);
  } else if (fs::is_regular_file(run_dir / "train_config.json", ec)) {
    config = load_train_config(run_dir / "train_config.json");
  }
  if (!config) {
    out.push_back(finding("configuration", Verdict::kWarn, "no TRAIN.json found for this run",
                          "runs written by this cpt keep run.json and train_config.json; older runs lack them"));
    return out;
  }
  const std::int64_t total_steps = record.total_steps.value_or(log.highest_step + 1);
  check_learning_rate(rows, *config, total_steps, out);
  check_grad_norm(rows, config->grad_clip, out);
  check_mixture(rows, *config, out);
  try {
    const auto inputs = prepare_run_inputs(*config, plan.model, run_dir);
    check_data_sample(inputs, plan.workload.seq_len, out);
  } catch (const core::Error& e) {
    out.push_back(finding("data sample", Verdict::kWarn, str_cat("the run's data could not be opened: ", e.what()),
                          "run the doctor where the run's data is"));
  }
  check_start(rows, *config, plan.model, out);
  return out;
}

}  // namespace cpt::exec
