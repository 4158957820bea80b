#include "spec/hardware_io.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::Json;
using core::JsonObjectReader;
using core::str_cat;

namespace {

std::string dense_key(Precision p) {
  return str_cat("dense_", to_string(p), "_TFLOPs_per_s");
}

// A device's memory: up to a petabyte (a byte count beyond int64 does not convert).
constexpr double kMaxCapacity = 1e6;

core::Bytes read_capacity(JsonObjectReader& r, std::string_view stem) {
  const auto [unit, v] = r.positive_number_with_unit(stem, {"GiB", "GB"});
  if (v > kMaxCapacity) r.fail(str_cat(stem, "_", unit), str_cat("a capacity of at most ", kMaxCapacity), str_cat(v));
  return unit == "GiB" ? core::gibibytes(v) : core::gigabytes(v);
}

core::Seconds read_latency(JsonObjectReader& r, std::string_view key) {
  return core::microseconds(r.number(key, 0.0, 1e6));
}

std::string read_name(JsonObjectReader& r) {
  auto name = r.string("name");
  if (name.empty()) r.fail("name", "a non-empty string", "\"\"");
  return name;
}

// A reference by name, or an inline object.
template <class Spec, class Parse, class Lookup>
Spec ref_or_inline(JsonObjectReader& r, std::string_view key, Parse parse, Lookup lookup) {
  const Json& v = r.raw(key);
  if (v.is_string()) return lookup(v.get<std::string>(), r, key);
  if (v.is_object()) {
    JsonObjectReader sub(v, r.origin(), r.path_of(key));
    return parse(sub);
  }
  r.fail(key, "a profile name or an object", core::describe_json(v));
}

void check_cluster(const ClusterSpec& c, const JsonObjectReader& r) {
  const auto errors = find_cluster_errors(c);
  if (!errors.empty()) throw core::ConfigError(str_cat(r.origin(), ": ", r.path_of("num_nodes"), ": ", errors.front()));
}

// `r[key]`: [[GFLOP, efficiency], ...] with increasing GFLOP.
std::vector<EfficiencyPoint> read_efficiency_points(JsonObjectReader& r, const std::string& key) {
  const Json& arr = r.raw(key);
  const auto expected = "an array of [GFLOP > 0, efficiency in (0, 1]] pairs with increasing GFLOP";
  if (!arr.is_array() || arr.empty()) r.fail(key, expected, core::describe_json(arr));
  std::vector<EfficiencyPoint> curve;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Json& pt = arr[i];
    const bool ok = pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number() &&
                    pt[0].get<double>() > 0 && pt[1].get<double>() > 0 && pt[1].get<double>() <= 1 &&
                    (curve.empty() || pt[0].get<double>() > curve.back().gflops);
    if (!ok) r.fail(str_cat(key, "[", i, "]"), expected, core::describe_json(pt));
    curve.push_back({pt[0].get<double>(), pt[1].get<double>()});
  }
  return curve;
}

Json efficiency_points_to_json(const std::vector<EfficiencyPoint>& curve) {
  Json arr = Json::array();
  for (const auto& pt : curve) arr.push_back({pt.gflops, pt.efficiency});
  return arr;
}

// `key`: {"bf16": [[GFLOP, efficiency], ...], ...}, each curve with increasing GFLOP.
void read_efficiency_curves(JsonObjectReader& r, const std::string& key,
                            std::array<std::vector<EfficiencyPoint>, 5>& out) {
  if (!r.has(key)) return;
  auto curves = r.object(key);
  for (auto p : kAllPrecisions) {
    const auto name = to_string(p);
    if (curves.has(name)) out[static_cast<std::size_t>(p)] = read_efficiency_points(curves, name);
  }
  curves.finish();
}

Json efficiency_curves_to_json(const std::array<std::vector<EfficiencyPoint>, 5>& curves) {
  Json j = Json::object();
  for (auto p : kAllPrecisions) {
    const auto& curve = curves[static_cast<std::size_t>(p)];
    if (!curve.empty()) j[to_string(p)] = efficiency_points_to_json(curve);
  }
  return j;
}

// `key`: {"fp32": [{"min_dim": N, "efficiency": [[GFLOP, efficiency], ...]}, ...], ...}, each
// precision's curves with increasing min_dim.
void read_shape_curves(JsonObjectReader& r, const std::string& key, std::array<std::vector<GemmShapeCurve>, 5>& out) {
  if (!r.has(key)) return;
  auto curves = r.object(key);
  for (auto p : kAllPrecisions) {
    const auto name = to_string(p);
    if (!curves.has(name)) continue;
    const Json& arr = curves.raw(name);
    const auto expected = "a non-empty array of {min_dim, efficiency} with increasing min_dim";
    if (!arr.is_array() || arr.empty()) curves.fail(name, expected, core::describe_json(arr));
    auto& list = out[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_object()) curves.fail(str_cat(name, "[", i, "]"), expected, core::describe_json(arr[i]));
      JsonObjectReader c(arr[i], curves.origin(), str_cat(curves.path_of(name), "[", i, "]"));
      GemmShapeCurve curve;
      curve.min_dim = c.positive_number("min_dim");
      curve.points = read_efficiency_points(c, "efficiency");
      c.finish();
      if (!list.empty() && curve.min_dim <= list.back().min_dim) {
        curves.fail(str_cat(name, "[", i, "].min_dim"), "min_dim increasing", core::describe_json(arr[i]["min_dim"]));
      }
      list.push_back(std::move(curve));
    }
  }
  curves.finish();
}

Json shape_curves_to_json(const std::array<std::vector<GemmShapeCurve>, 5>& curves) {
  Json j = Json::object();
  for (auto p : kAllPrecisions) {
    const auto& list = curves[static_cast<std::size_t>(p)];
    if (list.empty()) continue;
    Json arr = Json::array();
    for (const auto& c : list)
      arr.push_back({{"min_dim", c.min_dim}, {"efficiency", efficiency_points_to_json(c.points)}});
    j[to_string(p)] = arr;
  }
  return j;
}

std::vector<CrossEntropyPoint> read_cross_entropy_rates(JsonObjectReader& r, const std::string& key) {
  const Json& arr = r.raw(key);
  const auto expected =
      "a non-empty array of {logits, forward_logits_per_s, backward_logits_per_s} (numbers > 0, logits increasing)";
  if (!arr.is_array() || arr.empty()) r.fail(key, expected, core::describe_json(arr));
  std::vector<CrossEntropyPoint> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) r.fail(str_cat(key, "[", i, "]"), expected, core::describe_json(arr[i]));
    JsonObjectReader pt(arr[i], r.origin(), str_cat(r.path_of(key), "[", i, "]"));
    CrossEntropyPoint p;
    p.logits = pt.positive_number("logits");
    p.forward_logits_per_s = pt.positive_number("forward_logits_per_s");
    p.backward_logits_per_s = pt.positive_number("backward_logits_per_s");
    pt.finish();
    if (!out.empty() && p.logits <= out.back().logits) {
      r.fail(str_cat(key, "[", i, "].logits"), "logits increasing", core::describe_json(arr[i]["logits"]));
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace

GpuSpec gpu_from_json(JsonObjectReader& r) {
  GpuSpec g;
  g.name = read_name(r);
  g.display_name = r.string("display_name");
  if (r.has("aliases")) g.aliases = r.string_array("aliases");
  g.hbm_capacity = read_capacity(r, "hbm_capacity");
  g.hbm_bandwidth = core::gigabytes_per_second(r.positive_number("hbm_bandwidth_GB_per_s"));
  for (auto p : kAllPrecisions) {
    const auto key = dense_key(p);
    // bf16 is required of every GPU cpt models; the others are optional (A100 has no fp8 engine).
    if (p == Precision::kBf16 || r.has(key)) {
      g.dense_peak[static_cast<std::size_t>(p)] = core::teraflops_per_second(r.positive_number(key));
    }
  }
  g.nvlink_bandwidth = core::gigabytes_per_second(r.number("nvlink_bandwidth_GB_per_s_per_direction", 0.0));
  g.default_node = r.optional_string("default_node").value_or("");
  if (r.has("kernel_overhead_us")) g.kernel_overhead = core::microseconds(r.number("kernel_overhead_us", 0.0));
  if (r.has("collective_overhead_us")) {
    g.collective_overhead = core::microseconds(r.number("collective_overhead_us", 0.0));
  }
  if (r.has("compute_jitter_sqrt_s")) g.compute_jitter_sqrt_s = r.number("compute_jitter_sqrt_s", 0.0);
  read_efficiency_curves(r, "gemm_efficiency", g.gemm_efficiency);
  read_shape_curves(r, "gemm_efficiency_by_min_dim", g.gemm_efficiency_by_min_dim);
  read_efficiency_curves(r, "attention_efficiency", g.attention_efficiency);
  if (r.has("cross_entropy_rates")) g.cross_entropy_rates = read_cross_entropy_rates(r, "cross_entropy_rates");
  // The one-size form of the same rates (profiles calibrated before the curve): one point.
  const auto forward = r.optional_positive_number("cross_entropy_forward_logits_per_s");
  const auto backward = r.optional_positive_number("cross_entropy_backward_logits_per_s");
  if (forward || backward) {
    const char* key = forward ? "cross_entropy_backward_logits_per_s" : "cross_entropy_forward_logits_per_s";
    if (!forward || !backward) r.fail(key, "a number > 0 beside its forward/backward partner", "nothing");
    if (!g.cross_entropy_rates.empty()) {
      r.fail("cross_entropy_forward_logits_per_s", "no one-size rates beside cross_entropy_rates", "both");
    }
    g.cross_entropy_rates = {{1.0, *forward, *backward}};
  }
  r.finish();
  return g;
}

NodeSpec node_from_json(JsonObjectReader& r, const HardwareResolver& resolve) {
  NodeSpec n;
  n.name = read_name(r);
  n.display_name = r.string("display_name");
  n.gpu = ref_or_inline<GpuSpec>(
      r, "gpu", [](JsonObjectReader& s) { return gpu_from_json(s); }, resolve.gpu);
  n.gpus_per_node = static_cast<int>(r.integer("gpus_per_node", 1, 1024));
  auto intra = r.object("intra_node");
  n.intra_kind =
      intra.one_of("kind", {"nvswitch", "pcie"}) == "nvswitch" ? IntraNodeKind::kNvSwitch : IntraNodeKind::kPcie;
  n.intra_bandwidth = core::gigabytes_per_second(intra.positive_number("bandwidth_GB_per_s_per_direction"));
  n.intra_latency = read_latency(intra, "latency_us");
  if (intra.has("measured")) {
    auto measured = intra.object("measured");
    for (const auto call : kAllLinkCalls) {
      const auto name = to_string(call);
      if (!measured.has(name)) continue;
      auto one = measured.object(name);
      n.intra_measured[static_cast<std::size_t>(call)] =
          MeasuredLink{core::microseconds(one.positive_number("latency_us")),
                       core::gigabytes_per_second(one.positive_number("bandwidth_GB_per_s_per_direction"))};
      one.finish();
    }
    measured.finish();
  }
  if (intra.has("scalar_all_reduce_step_latency_us")) {
    n.scalar_all_reduce_step_latency = core::microseconds(intra.positive_number("scalar_all_reduce_step_latency_us"));
  }
  if (intra.has("overlap_compute_slowdown")) {
    n.overlap_compute_slowdown = intra.number("overlap_compute_slowdown", 0.0, 4.0);
  }
  if (intra.has("compute_lost_resuming_from_call_us")) {
    n.compute_lost_resuming_from_call =
        core::microseconds(intra.number("compute_lost_resuming_from_call_us", 0.0, 100'000.0));
  }
  intra.finish();
  n.nics_per_node = static_cast<int>(r.integer("nics_per_node", 0, 1024));
  n.nic_bandwidth = core::gigabits_per_second(r.number("nic_bandwidth_Gbit_per_s", 0.0));
  n.default_fabric = r.optional_string("default_fabric").value_or("");
  if (r.has("shared_cores")) {
    auto shared = r.object("shared_cores");
    SharedCores c;
    c.cores = static_cast<int>(shared.integer("cores", 1, 1 << 16));
    c.threads_per_device = static_cast<int>(shared.integer("threads_per_device", 1, 1 << 16));
    shared.finish();
    n.shared_cores = c;
  }
  r.finish();
  return n;
}

FabricSpec fabric_from_json(JsonObjectReader& r) {
  FabricSpec f;
  f.name = read_name(r);
  f.display_name = r.string("display_name");
  r.one_of("topology", {"fat_tree"});
  f.topology = FabricTopology::kFatTree;
  f.link_bandwidth = core::gigabits_per_second(r.positive_number("link_bandwidth_Gbit_per_s"));
  f.latency = read_latency(r, "latency_us");
  f.rail_optimized = r.boolean("rail_optimized");
  f.oversubscription = r.number("oversubscription", 1.0, 64.0);
  f.switch_radix = static_cast<int>(r.integer("switch_radix", 2, 4096));
  r.finish();
  return f;
}

ClusterSpec cluster_from_json(JsonObjectReader& r, const HardwareResolver& resolve) {
  ClusterSpec c;
  c.name = read_name(r);
  c.node = ref_or_inline<NodeSpec>(
      r, "node", [&](JsonObjectReader& s) { return node_from_json(s, resolve); }, resolve.node);
  c.num_nodes = static_cast<int>(r.integer("num_nodes", 1, 1'000'000));
  c.num_gpus = static_cast<int>(
      r.optional_integer("num_gpus", 1, 1'000'000'000).value_or(std::int64_t{c.num_nodes} * c.node.gpus_per_node));
  c.fabric = ref_or_inline<FabricSpec>(
      r, "fabric", [](JsonObjectReader& s) { return fabric_from_json(s); }, resolve.fabric);
  r.finish();
  check_cluster(c, r);
  return c;
}

Json gpu_to_json(const GpuSpec& g) {
  Json j;
  j["name"] = g.name;
  j["display_name"] = g.display_name;
  j["aliases"] = g.aliases;
  // The unit the number is whole in (80 GiB, 141 GB), so written profiles read like datasheets.
  if (g.hbm_capacity.value() % core::kGiB != 0 && g.hbm_capacity.value() % 1'000'000'000 == 0) {
    j["hbm_capacity_GB"] = g.hbm_capacity.value() / 1'000'000'000;
  } else {
    j["hbm_capacity_GiB"] = core::to_gibibytes(g.hbm_capacity);
  }
  j["hbm_bandwidth_GB_per_s"] = core::to_gigabytes_per_second(g.hbm_bandwidth);
  for (auto p : kAllPrecisions) {
    if (auto peak = g.peak(p)) j[dense_key(p)] = core::to_teraflops_per_second(*peak);
  }
  j["nvlink_bandwidth_GB_per_s_per_direction"] = core::to_gigabytes_per_second(g.nvlink_bandwidth);
  if (!g.default_node.empty()) j["default_node"] = g.default_node;
  if (auto c = efficiency_curves_to_json(g.gemm_efficiency); !c.empty()) j["gemm_efficiency"] = c;
  if (auto c = shape_curves_to_json(g.gemm_efficiency_by_min_dim); !c.empty()) j["gemm_efficiency_by_min_dim"] = c;
  if (auto c = efficiency_curves_to_json(g.attention_efficiency); !c.empty()) j["attention_efficiency"] = c;
  if (!g.cross_entropy_rates.empty()) {
    Json rates = Json::array();
    for (const auto& p : g.cross_entropy_rates) {
      rates.push_back({{"logits", p.logits},
                       {"forward_logits_per_s", p.forward_logits_per_s},
                       {"backward_logits_per_s", p.backward_logits_per_s}});
    }
    j["cross_entropy_rates"] = rates;
  }
  if (g.kernel_overhead) j["kernel_overhead_us"] = g.kernel_overhead->value() * 1e6;
  if (g.collective_overhead) j["collective_overhead_us"] = g.collective_overhead->value() * 1e6;
  if (g.compute_jitter_sqrt_s) j["compute_jitter_sqrt_s"] = *g.compute_jitter_sqrt_s;
  return j;
}

Json node_to_json(const NodeSpec& n) {
  Json j;
  j["name"] = n.name;
  j["display_name"] = n.display_name;
  j["gpu"] = gpu_to_json(n.gpu);
  j["gpus_per_node"] = n.gpus_per_node;
  j["intra_node"] = {{"kind", n.intra_kind == IntraNodeKind::kNvSwitch ? "nvswitch" : "pcie"},
                     {"bandwidth_GB_per_s_per_direction", core::to_gigabytes_per_second(n.intra_bandwidth)},
                     {"latency_us", core::to_microseconds(n.intra_latency)}};
  Json measured = Json::object();
  for (const auto call : kAllLinkCalls) {
    if (const auto& m = n.intra_measured[static_cast<std::size_t>(call)]) {
      measured[to_string(call)] = {{"latency_us", core::to_microseconds(m->latency)},
                                   {"bandwidth_GB_per_s_per_direction", core::to_gigabytes_per_second(m->bandwidth)}};
    }
  }
  if (!measured.empty()) j["intra_node"]["measured"] = measured;
  if (n.scalar_all_reduce_step_latency) {
    j["intra_node"]["scalar_all_reduce_step_latency_us"] = core::to_microseconds(*n.scalar_all_reduce_step_latency);
  }
  if (n.overlap_compute_slowdown) j["intra_node"]["overlap_compute_slowdown"] = *n.overlap_compute_slowdown;
  if (n.compute_lost_resuming_from_call) {
    j["intra_node"]["compute_lost_resuming_from_call_us"] = core::to_microseconds(*n.compute_lost_resuming_from_call);
  }
  j["nics_per_node"] = n.nics_per_node;
  j["nic_bandwidth_Gbit_per_s"] = core::to_gigabits_per_second(n.nic_bandwidth);
  if (!n.default_fabric.empty()) j["default_fabric"] = n.default_fabric;
  if (n.shared_cores) {
    j["shared_cores"] = {{"cores", n.shared_cores->cores}, {"threads_per_device", n.shared_cores->threads_per_device}};
  }
  return j;
}

Json fabric_to_json(const FabricSpec& f) {
  Json j;
  j["name"] = f.name;
  j["display_name"] = f.display_name;
  j["topology"] = "fat_tree";
  j["link_bandwidth_Gbit_per_s"] = core::to_gigabits_per_second(f.link_bandwidth);
  j["latency_us"] = core::to_microseconds(f.latency);
  j["rail_optimized"] = f.rail_optimized;
  j["oversubscription"] = f.oversubscription;
  j["switch_radix"] = f.switch_radix;
  return j;
}

Json cluster_to_json(const ClusterSpec& c) {
  Json j;
  j["name"] = c.name;
  j["node"] = node_to_json(c.node);
  j["num_nodes"] = c.num_nodes;
  j["num_gpus"] = c.num_gpus;
  j["fabric"] = fabric_to_json(c.fabric);
  return j;
}

}  // namespace cpt::spec
