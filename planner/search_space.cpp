#include "planner/search_space.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"

namespace cpt::planner {

using core::ConfigError;
using core::str_cat;

namespace {

const std::vector<std::string> kKeys = {"tp",          "cp",       "pp",   "dp",        "vp",
                                        "micro_batch", "zero",     "hsdp", "recompute", "sequence_parallel",
                                        "offload",     "schedule", "ep",   "etp"};

int to_int(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used == v.size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(str_cat("--fix: ", key, ": expected a whole number, got \"", v, "\""));
}

bool to_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") return true;
  if (v == "false" || v == "0" || v == "off") return false;
  throw ConfigError(str_cat("--fix: ", key, ": expected true or false, got \"", v, "\""));
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

template <class T>
void pin(std::vector<T>& values, T v) {
  values = {v};
}

// (ep, etp) pairs: (1, 1) for a dense model; for a mixture of experts ep over the divisors of the
// experts up to the GPUs and etp over 1, 2, 4, 8 inside a node (the pairs that do not fold into a
// candidate's tp·cp·dp are rejected with the reason by the evaluation).
std::vector<std::pair<int, int>> expert_degrees(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                                std::optional<int> fixed_ep, std::optional<int> fixed_etp) {
  if (!m.moe.present()) {
    if (fixed_ep.value_or(1) != 1 || fixed_etp.value_or(1) != 1) {
      throw ConfigError(str_cat("--fix: ep and etp need a mixture-of-experts model; ", m.name, " is dense"));
    }
    return {{1, 1}};
  }
  if (fixed_ep && (*fixed_ep < 1 || m.moe.experts % *fixed_ep != 0)) {
    throw ConfigError(
        str_cat("--fix: ep=", *fixed_ep, ": expected a divisor of the model's ", m.moe.experts, " routed experts"));
  }
  if (fixed_etp && (*fixed_etp < 1 || m.moe.expert_ffn_hidden % *fixed_etp != 0)) {
    throw ConfigError(
        str_cat("--fix: etp=", *fixed_etp, ": expected a divisor of the experts' width ", m.moe.expert_ffn_hidden));
  }
  std::vector<int> eps, etps;
  for (int ep : divisors(m.moe.experts)) {
    if (ep <= c.num_gpus) eps.push_back(ep);
  }
  for (int etp : {1, 2, 4, 8}) {
    if (etp <= c.node.gpus_per_node && m.moe.expert_ffn_hidden % etp == 0) etps.push_back(etp);
  }
  if (fixed_ep) eps = {*fixed_ep};
  if (fixed_etp) etps = {*fixed_etp};
  std::vector<std::pair<int, int>> out;
  for (int ep : eps) {
    for (int etp : etps) out.emplace_back(ep, etp);
  }
  return out;
}

// "tp=3 pp=2": the layout degrees --fix pins, for a message.
std::string fixed_degrees(const std::map<std::string, std::string>& fixed) {
  std::string out;
  for (const char* key : {"tp", "cp", "pp", "dp"}) {
    if (auto it = fixed.find(key); it != fixed.end()) out += str_cat(out.empty() ? "" : " ", key, "=", it->second);
  }
  return out;
}

// --fix's recompute, offload and schedule values; a one-line ConfigError for anything else.
spec::Recompute recompute_named(const std::string& v) {
  if (v == "none") return spec::Recompute::kNone;
  if (v == "selective") return spec::Recompute::kSelective;
  if (v == "full") return spec::Recompute::kFull;
  throw ConfigError(str_cat("--fix: recompute: expected none|selective|full, got \"", v, "\""));
}

spec::Offload offload_named(const std::string& v) {
  if (v == "none") return spec::Offload::kNone;
  if (v == "optimizer") return spec::Offload::kOptimizer;
  if (v == "params") return spec::Offload::kOptimizerAndParams;
  throw ConfigError(str_cat("--fix: offload: expected none|optimizer|params, got \"", v, "\""));
}

spec::ScheduleKind schedule_named(const std::string& v) {
  if (v == "1f1b") return spec::ScheduleKind::k1F1B;
  if (v == "interleaved_1f1b") return spec::ScheduleKind::kInterleaved1F1B;
  if (v == "zb_h1") return spec::ScheduleKind::kZeroBubbleH1;
  throw ConfigError(str_cat("--fix: schedule: expected 1f1b|interleaved_1f1b|zb_h1, got \"", v, "\""));
}

}  // namespace

Fixed parse_fixed(const std::string& text) {
  Fixed f;
  std::stringstream ss(text);
  std::string item;
  const auto malformed = [&] {
    return ConfigError(str_cat("--fix: expected key=value items separated by commas, got \"", text, "\""));
  };
  // getline drops a trailing empty item ("ep=8,"): refused as the inner ones are.
  if (!text.empty() && text.back() == ',') throw malformed();
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw malformed();
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw ConfigError(str_cat("--fix: expected key=value, got \"", item, "\""));
    const auto key = item.substr(0, eq);
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      const auto hint = core::closest_match(key, kKeys);
      throw ConfigError(str_cat("--fix: unknown key \"", key, "\"",
                                hint.empty() ? std::string() : str_cat(" (did you mean \"", hint, "\"?)"),
                                "; expected one of ", core::join(kKeys, " ")));
    }
    const auto value = item.substr(eq + 1);
    if (const auto given = f.values.find(key); given != f.values.end()) {
      throw ConfigError(str_cat("--fix: ", key, " given twice (", key, "=", given->second, " and ", item, ")"));
    }
    // Check the value now, so that a typo is reported before any search.
    if (key == "hsdp" || key == "sequence_parallel") {
      (void)to_bool(key, value);
    } else if (key == "recompute") {
      (void)recompute_named(value);
    } else if (key == "offload") {
      (void)offload_named(value);
    } else if (key == "schedule") {
      (void)schedule_named(value);
    } else if (const int v = to_int(key, value); key == "zero" ? v > 3 : v < 1) {
      throw ConfigError(
          str_cat("--fix: ", key, ": expected ", key == "zero" ? "0, 1, 2 or 3" : "a whole number >= 1", ", got ", v));
    }
    f.values[key] = value;
  }
  return f;
}

SearchSpace::SearchSpace(const spec::ModelSpec& m, const spec::ClusterSpec& c, int global_batch, const Fixed& fixed)
    : gpus_(c.num_gpus), global_batch_(global_batch) {
  const auto& fx = fixed.values;
  auto fixed_int = [&](const char* key) -> std::optional<int> {
    if (auto it = fx.find(key); it != fx.end()) return to_int(key, it->second);
    return std::nullopt;
  };
  std::vector<int> tps = divisors(std::min(c.node.gpus_per_node, c.num_gpus));
  std::vector<int> cps = {1, 2, 4, 8};
  if (auto v = fixed_int("tp")) tps = {*v};
  if (auto v = fixed_int("cp")) cps = {*v};
  const auto fixed_pp = fixed_int("pp");
  const auto fixed_dp = fixed_int("dp");
  for (int tp : tps) {
    for (int cp : cps) {
      if (tp < 1 || cp < 1 || c.num_gpus % (tp * cp) != 0) continue;
      for (int pp : divisors(c.num_gpus / (tp * cp))) {
        if (pp > m.layers) continue;
        if (fixed_pp && pp != *fixed_pp) continue;
        if (fixed_dp && c.num_gpus / (tp * cp * pp) != *fixed_dp) continue;
        triples_.push_back({tp, cp, pp});
      }
    }
  }
  if (triples_.empty() && (fixed_int("tp") || fixed_int("cp") || fixed_pp || fixed_dp)) {
    throw ConfigError(str_cat("--fix: no layout of the ", c.num_gpus, " GPUs has ", fixed_degrees(fx),
                              " (tp x cp x pp x dp is the GPUs; pp is at most the model's ", m.layers, " layers)"));
  }
  using spec::ScheduleKind;
  pipelines_ = {{1, ScheduleKind::k1F1B}, {1, ScheduleKind::kZeroBubbleH1}};
  for (int v : {2, 3, 4, 6, 8}) pipelines_.push_back({v, ScheduleKind::kInterleaved1F1B});
  if (auto v = fixed_int("vp")) {
    std::erase_if(pipelines_, [&](const Pipeline& x) { return x.vp != *v; });
    if (pipelines_.empty()) pipelines_ = {{*v, ScheduleKind::kInterleaved1F1B}};  // rejected with a reason later
  }
  for (int mb = 1; mb <= std::min(64, global_batch); mb *= 2) micro_batch_.push_back(mb);
  if (auto v = fixed_int("micro_batch")) micro_batch_ = {*v};
  zero_ = {{0, false}, {1, false}, {2, false}, {3, false}, {3, true}};
  if (auto v = fixed_int("zero")) {
    std::erase_if(zero_, [&](const auto& z) { return z.first != *v; });
  }
  if (auto it = fx.find("hsdp"); it != fx.end()) {
    const bool h = to_bool("hsdp", it->second);
    std::erase_if(zero_, [&](const auto& z) { return z.second != h; });
  }
  recompute_ = {spec::Recompute::kNone, spec::Recompute::kSelective, spec::Recompute::kFull};
  if (auto it = fx.find("recompute"); it != fx.end()) pin(recompute_, recompute_named(it->second));
  sequence_parallel_ = {false, true};
  if (auto it = fx.find("sequence_parallel"); it != fx.end())
    sequence_parallel_ = {to_bool("sequence_parallel", it->second)};
  offload_ = {spec::Offload::kNone, spec::Offload::kOptimizer};
  if (auto it = fx.find("offload"); it != fx.end()) pin(offload_, offload_named(it->second));
  if (auto it = fx.find("schedule"); it != fx.end()) {
    const auto& v = it->second;
    const ScheduleKind kind = schedule_named(v);
    std::erase_if(pipelines_, [&](const Pipeline& x) { return x.schedule != kind; });
    if (pipelines_.empty()) throw ConfigError(str_cat("--fix: schedule=", v, " contradicts the fixed vp"));
  }
  using spec::Axis;
  orders_ = {{Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}, {Axis::kTp, Axis::kCp, Axis::kPp, Axis::kDp}};
  experts_ = expert_degrees(m, c, fixed_int("ep"), fixed_int("etp"));
  if (m.moe.present()) orders_.resize(1);  // expert parallelism folds inside a stage: pp outermost
  size_ = static_cast<std::uint64_t>(triples_.size()) * pipelines_.size() * micro_batch_.size() * zero_.size() *
          recompute_.size() * sequence_parallel_.size() * offload_.size() * orders_.size() * experts_.size();
}

spec::ParallelConfig SearchSpace::at(std::uint64_t i) const {
  auto digit = [&i](std::size_t radix) {
    const auto d = static_cast<std::size_t>(i % radix);
    i /= radix;
    return d;
  };
  spec::ParallelConfig p;
  const auto [ep, etp] = experts_[digit(experts_.size())];
  p.ep = ep;
  p.etp = etp;
  p.axis_order = orders_[digit(orders_.size())];
  p.offload = offload_[digit(offload_.size())];
  p.sequence_parallel = sequence_parallel_[digit(sequence_parallel_.size())];
  p.recompute = recompute_[digit(recompute_.size())];
  const auto z = zero_[digit(zero_.size())];
  p.zero_stage = z.first;
  p.hybrid_shard = z.second;
  p.micro_batch = micro_batch_[digit(micro_batch_.size())];
  const auto& pipe = pipelines_[digit(pipelines_.size())];
  p.virtual_stages = pipe.vp;
  p.schedule = pipe.schedule;
  const auto t = triples_[digit(triples_.size())];
  p.tp = t.tp;
  p.cp = t.cp;
  p.pp = t.pp;
  p.dp = gpus_ / (t.tp * t.cp * t.pp);
  p.global_batch = global_batch_;
  return p;
}

}  // namespace cpt::planner
