#include "spec/train_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::JsonObjectReader;
using core::str_cat;
namespace fs = std::filesystem;

namespace {

fs::path resolve(const fs::path& base, const std::string& p) {
  const fs::path path(p);
  return path.is_absolute() ? path : base / path;
}

std::vector<fs::path> paths(JsonObjectReader& r, std::string_view key, const fs::path& base) {
  std::vector<fs::path> out;
  for (const auto& s : r.string_array(key)) out.push_back(resolve(base, s));
  return out;
}

DataSetConfig data_set(JsonObjectReader r, const fs::path& base, bool eval) {
  DataSetConfig d;
  d.name = r.string("name");
  if (d.name.empty() || d.name.find_first_of("/\\ ") != std::string::npos) {
    r.fail("name", "a non-empty name without '/', '\\' or spaces", str_cat("\"", d.name, "\""));
  }
  const bool has_path = r.has("path");
  const bool has_sources = r.has("sources");
  if (has_path == has_sources)
    r.fail("path", "exactly one of \"path\" (prepared shards) or \"sources\" (raw text)",
           has_path ? "both" : "neither");
  if (has_path) d.path = resolve(base, r.string("path"));
  if (has_sources) {
    d.sources = paths(r, "sources", base);
    if (d.sources.empty()) r.fail("sources", "at least one file or directory", "[]");
    if (r.has("extensions")) d.extensions = r.string_array("extensions");
  }
  if (eval) {
    d.eval_sequences = r.optional_integer("sequences", 1, 100'000'000).value_or(64);
  } else if (r.has("weight")) {
    d.weight = r.positive_number("weight");
  }
  r.finish();
  return d;
}

std::vector<DataSetConfig> data_sets(JsonObjectReader& r, std::string_view key, const fs::path& base, bool eval) {
  const auto& arr = r.raw(key);
  if (!arr.is_array()) r.fail(key, "an array of data sets", core::describe_json(arr));
  std::vector<DataSetConfig> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    out.push_back(data_set(JsonObjectReader(arr[i], r.origin(), str_cat(r.path_of(key), "[", i, "]")), base, eval));
    for (std::size_t j = 0; j + 1 < out.size(); ++j) {
      if (out[j].name == out.back().name)
        r.fail(key, "data sets with distinct names", str_cat("\"", out[j].name, "\" twice"));
    }
  }
  return out;
}

// "tokenizer": exactly one of a SentencePiece model or the training of one.
TokenizerConfig tokenizer_of(JsonObjectReader t, const fs::path& base) {
  TokenizerConfig tc;
  if (t.has("model") == t.has("train")) {
    t.fail("model", "exactly one of \"model\" (a SentencePiece .model) or \"train\"",
           t.has("model") ? "both" : "neither");
  }
  if (t.has("model")) tc.model = resolve(base, t.string("model"));
  if (t.has("train")) {
    auto tr = t.object("train");
    tc.train_vocab_size = tr.integer("vocab_size", 260, 1'000'000);
    tc.train_sources = paths(tr, "sources", base);
    if (tr.has("extensions")) tc.train_extensions = tr.string_array("extensions");
    if (auto mb = tr.optional_integer("max_bytes", 1)) tc.train_max_bytes = static_cast<std::uint64_t>(*mb);
    tr.finish();
  }
  t.finish();
  return tc;
}

// Raw-text sets need a tokenizer; and they are prepared into OUT/data/<name>: one name, one data set.
void check_data_sets(JsonObjectReader& r, const TrainConfig& c) {
  for (const auto& d : c.data) {
    if (!d.sources.empty() && !c.tokenizer)
      r.fail("tokenizer", str_cat("a tokenizer (data set \"", d.name, "\" is raw text)"), "none");
  }
  for (const auto& e : c.eval) {
    if (!e.sources.empty() && !c.tokenizer)
      r.fail("tokenizer", str_cat("a tokenizer (eval set \"", e.name, "\" is raw text)"), "none");
    for (const auto& d : c.data) {
      if (d.name == e.name && (d.path != e.path || d.sources != e.sources)) {
        r.fail("eval", str_cat("names distinct from the training sets' unless they are the same data"),
               str_cat("\"", e.name, "\" for other data"));
      }
    }
  }
}

// "lr": the schedule, its peak (or a fraction of init_from's) and its warmup.
void read_lr(JsonObjectReader& r, TrainConfig& c) {
  auto l = r.object("lr");
  const auto kind = l.one_of("schedule", {"cosine", "constant", "wsd"});
  c.lr.kind = kind == "cosine"     ? LrScheduleKind::kCosine
              : kind == "constant" ? LrScheduleKind::kConstant
                                   : LrScheduleKind::kWsd;
  if (l.has("peak") == l.has("peak_fraction")) {
    r.fail("lr", "one of \"peak\" or \"peak_fraction\" (of init_from's peak)", l.has("peak") ? "both" : "neither");
  }
  if (l.has("peak")) c.lr.peak = l.positive_number("peak");
  if (l.has("peak_fraction")) c.lr_peak_fraction = l.number("peak_fraction", 1e-6, 10.0);
  if (l.has("warmup_steps") && l.has("warmup_fraction")) {
    r.fail("lr", "at most one of \"warmup_steps\" or \"warmup_fraction\"", "both");
  }
  c.lr.warmup_steps = l.optional_integer("warmup_steps", 0).value_or(0);
  if (l.has("warmup_fraction")) c.lr_warmup_fraction = l.number("warmup_fraction", 0.0, 1.0);
  if (l.has("min_ratio")) c.lr.min_ratio = l.number("min_ratio", 0.0, 1.0);
  if (l.has("decay_fraction")) c.lr.decay_fraction = l.number("decay_fraction", 0.0, 1.0);
  l.finish();
}

void read_optimizer(JsonObjectReader o, TrainConfig& c) {
  if (o.has("beta1")) c.optimizer.beta1 = o.number("beta1", 0.0, 0.999999);
  if (o.has("beta2")) c.optimizer.beta2 = o.number("beta2", 0.0, 0.999999);
  if (o.has("eps")) c.optimizer.eps = o.positive_number("eps");
  if (o.has("weight_decay")) c.optimizer.weight_decay = o.number("weight_decay", 0.0, 10.0);
  if (o.has("grad_clip")) c.grad_clip = o.number("grad_clip", 0.0);
  o.finish();
}

// "distill": KL against a teacher (default: init_from), with its guard.
void read_distill(JsonObjectReader& r, const fs::path& base, TrainConfig& c) {
  auto d = r.object("distill");
  DistillConfig dc;
  if (d.has("lambda")) dc.lambda = d.positive_number("lambda");
  if (d.has("teacher")) dc.teacher = resolve(base, d.string("teacher"));
  if (d.has("guard")) {
    auto g = d.object("guard");
    dc.guard_threshold = g.positive_number("threshold");
    if (g.has("lr_factor")) dc.guard_lr_factor = g.number("lr_factor", 0.0, 1.0);
    dc.guard_patience = g.optional_integer("patience", 1).value_or(20);
    g.finish();
  }
  d.finish();
  if (!dc.teacher && !c.init_from)
    r.fail("distill", "a teacher: \"distill.teacher\" or \"init_from\" (the base model)", "neither");
  c.distill = dc;
}

void read_ewc(JsonObjectReader& r, const fs::path& base, TrainConfig& c) {
  auto e = r.object("ewc");
  EwcConfig ec;
  if (e.has("lambda")) ec.lambda = e.positive_number("lambda");
  ec.data = data_set(e.object("data"), base, /*eval=*/false);
  ec.sequences = e.optional_integer("sequences", 1, 1'000'000).value_or(64);
  e.finish();
  if (!ec.data.sources.empty() && !c.tokenizer)
    r.fail("tokenizer", "a tokenizer (the EWC data set is raw text)", "none");
  c.ewc = ec;
}

// Where training starts: the weights (init_from) and what of their optimizer state is kept.
void read_start(JsonObjectReader& r, const fs::path& base, TrainConfig& c) {
  if (r.has("init_from")) c.init_from = resolve(base, r.string("init_from"));
  if (c.lr_peak_fraction && !c.init_from) r.fail("lr", "\"init_from\" with \"peak_fraction\"", "no init_from");
  if (r.has("init_optimizer")) {
    c.keep_optimizer_state = r.one_of("init_optimizer", {"reset", "keep"}) == "keep";
    if (c.keep_optimizer_state && !c.init_from) r.fail("init_optimizer", "\"init_from\" with \"keep\"", "no init_from");
  }
}

// The run's machinery: packing, seed, checkpoints, device, threads, logging, timeouts, buckets.
void read_run_settings(JsonObjectReader& r, TrainConfig& c) {
  if (r.has("checkpoint")) {
    auto k = r.object("checkpoint");
    c.checkpoint.interval_steps = k.optional_integer("interval_steps", 0).value_or(0);
    c.checkpoint.keep_last = static_cast<int>(k.optional_integer("keep_last", 1, 1000).value_or(2));
    k.finish();
  }
  if (r.has("packing"))
    c.packing = r.one_of("packing", {"packed", "padded"}) == "packed" ? Packing::kPacked : Packing::kPadded;
  if (r.has("seed")) c.seed = static_cast<std::uint64_t>(r.integer("seed", 0));
  if (r.has("device")) c.device = r.one_of("device", {"auto", "cpu", "cuda"});
  c.threads = static_cast<int>(r.optional_integer("threads", 0, 4096).value_or(0));
  c.log_interval_steps = r.optional_integer("log_interval_steps", 0).value_or(1);
  c.collective_timeout_s = static_cast<int>(r.optional_integer("collective_timeout_s", 1, 86400).value_or(300));
  if (auto mib = r.optional_positive_number("dp_bucket_mib")) c.dp_bucket_mib = *mib;
  if (r.has("router_aux_loss")) {
    c.router_aux_loss = r.number("router_aux_loss", 0, 1e3);
  } else {
    r.accept("router_aux_loss");
  }
  if (r.has("router_aux_loss_type")) {
    c.router_aux_loss_per_sequence = r.one_of("router_aux_loss_type", {"aux_loss", "seq_aux_loss"}) == "seq_aux_loss";
  }
  if (r.has("expert_bias_update_rate")) c.expert_bias_update_rate = r.number("expert_bias_update_rate", 0, 1);
}

}  // namespace

TrainConfig load_train_config(const fs::path& path) {
  const auto doc = core::parse_json_file(path);
  auto r = JsonObjectReader::root_of(doc);
  return train_config_from_json(r, fs::absolute(path).parent_path(), path);
}

TrainConfig train_config_from_json(JsonObjectReader& r, const fs::path& base, const fs::path& origin) {
  TrainConfig c;
  c.origin = origin;
  c.data = data_sets(r, "data", base, false);
  if (c.data.empty()) r.fail("data", "at least one training data set", "[]");
  if (r.has("eval")) c.eval = data_sets(r, "eval", base, true);
  c.eval_interval_steps = r.optional_integer("eval_interval_steps", 0).value_or(0);
  c.eval_at_start = r.optional_boolean("eval_at_start").value_or(false);
  if (r.has("tokenizer")) c.tokenizer = tokenizer_of(r.object("tokenizer"), base);
  check_data_sets(r, c);
  c.steps = r.optional_integer("steps", 1);
  c.tokens = r.optional_integer("tokens", 1);
  if (r.has("epochs")) c.epochs = r.number("epochs", 1e-6, 1e6);
  if ((c.steps ? 1 : 0) + (c.tokens ? 1 : 0) + (c.epochs ? 1 : 0) > 1) {
    r.fail(c.epochs ? "epochs" : "tokens", "one of \"steps\", \"tokens\" or \"epochs\"", "more than one");
  }
  if (r.has("lr")) read_lr(r, c);
  if (r.has("optimizer")) read_optimizer(r.object("optimizer"), c);
  read_run_settings(r, c);
  read_start(r, base, c);
  if (r.has("distill")) read_distill(r, base, c);
  if (r.has("ewc")) read_ewc(r, base, c);
  r.finish();
  return c;
}

}  // namespace cpt::spec
