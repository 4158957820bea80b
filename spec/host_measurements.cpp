#include "spec/host_measurements.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::JsonObjectReader;
using core::str_cat;

core::Json to_json(const HostMeasurements& host) {
  core::Json gemm = core::Json::array();
  for (const auto& g : host.gemm) gemm.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", g.seconds}});
  core::Json attention = core::Json::array();
  for (const auto& a : host.attention) {
    attention.push_back({{"batch", a.batch},
                         {"heads", a.heads},
                         {"kv_heads", a.kv_heads},
                         {"seq", a.seq},
                         {"head_dim", a.head_dim},
                         {"forward_seconds", a.forward_seconds},
                         {"backward_seconds", a.backward_seconds}});
  }
  core::Json cross_entropy = core::Json::array();
  for (const auto& c : host.cross_entropy) {
    cross_entropy.push_back({{"tokens", c.tokens},
                             {"vocab", c.vocab},
                             {"forward_seconds", c.forward_seconds},
                             {"backward_seconds", c.backward_seconds}});
  }
  return {{"device", host.device},
          {"device_name", host.device_name},
          {"dtype", host.dtype},
          {"cuda_devices", host.cuda_devices},
          {"cores", host.cores},
          {"threads", host.threads},
          {"memory_bytes", host.memory_bytes},
          {"copy_bytes_per_s", host.copy_bytes_per_s},
          {"adamw_params_per_s", host.adamw_params_per_s},
          {"cross_entropy", cross_entropy},
          {"seconds_per_dispatched_op", host.seconds_per_dispatched_op},
          {"gemm", gemm},
          {"attention", attention}};
}

namespace {

// Each object of the array at `key`, read by `read` (which finishes its reader).
template <typename T, typename Read>
std::vector<T> objects(JsonObjectReader& r, std::string_view key, Read read) {
  const core::Json& array = r.raw(key);
  if (!array.is_array()) r.fail(key, "an array of objects", core::describe_json(array));
  std::vector<T> out;
  for (std::size_t i = 0; i < array.size(); ++i) {
    JsonObjectReader item(array[i], r.origin(), str_cat(r.path_of(key), "[", i, "]"));
    out.push_back(read(item));
    item.finish();
  }
  return out;
}

GemmMeasurement gemm_of(JsonObjectReader& r) {
  return {r.integer("m", 1), r.integer("n", 1), r.integer("k", 1), r.positive_number("seconds")};
}

AttentionMeasurement attention_of(JsonObjectReader& r) {
  AttentionMeasurement a;
  a.batch = r.integer("batch", 1);
  a.heads = r.integer("heads", 1);
  a.kv_heads = r.integer("kv_heads", 1);
  a.seq = r.integer("seq", 1);
  a.head_dim = r.integer("head_dim", 1);
  a.forward_seconds = r.positive_number("forward_seconds");
  a.backward_seconds = r.positive_number("backward_seconds");
  return a;
}

CrossEntropyMeasurement cross_entropy_of(JsonObjectReader& r) {
  return {r.integer("tokens", 1), r.integer("vocab", 1), r.positive_number("forward_seconds"),
          r.positive_number("backward_seconds")};
}

}  // namespace

HostMeasurements host_measurements_from_json(const core::Json& value, const std::string& origin,
                                             const std::string& path) {
  JsonObjectReader r(value, origin, path);
  HostMeasurements h;
  h.device = r.string("device");
  h.device_name = r.string("device_name");
  h.dtype = r.one_of("dtype", {"fp32", "bf16"});
  h.cuda_devices = static_cast<int>(r.integer("cuda_devices", 0, 1 << 16));
  h.cores = static_cast<int>(r.integer("cores", 1, 1 << 20));
  h.threads = static_cast<int>(r.integer("threads", 1, 1 << 20));
  h.memory_bytes = r.positive_number("memory_bytes");
  h.copy_bytes_per_s = r.positive_number("copy_bytes_per_s");
  h.adamw_params_per_s = r.positive_number("adamw_params_per_s");
  h.seconds_per_dispatched_op = r.positive_number("seconds_per_dispatched_op");
  h.gemm = objects<GemmMeasurement>(r, "gemm", gemm_of);
  h.attention = objects<AttentionMeasurement>(r, "attention", attention_of);
  h.cross_entropy = objects<CrossEntropyMeasurement>(r, "cross_entropy", cross_entropy_of);
  if (h.gemm.empty()) r.fail("gemm", "at least one measurement", "an empty array");
  r.finish();
  return h;
}

namespace {

// The same grid: shapes and counts equal (what `average` needs to pair the measurements).
bool same_grid(const HostMeasurements& a, const HostMeasurements& b) {
  if (a.gemm.size() != b.gemm.size() || a.attention.size() != b.attention.size() ||
      a.cross_entropy.size() != b.cross_entropy.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.gemm.size(); ++i) {
    if (a.gemm[i].m != b.gemm[i].m || a.gemm[i].n != b.gemm[i].n || a.gemm[i].k != b.gemm[i].k) return false;
  }
  for (std::size_t i = 0; i < a.attention.size(); ++i) {
    if (a.attention[i].seq != b.attention[i].seq || a.attention[i].head_dim != b.attention[i].head_dim) return false;
  }
  for (std::size_t i = 0; i < a.cross_entropy.size(); ++i) {
    if (a.cross_entropy[i].vocab != b.cross_entropy[i].vocab) return false;
  }
  return true;
}

}  // namespace

HostMeasurements average(const std::vector<HostMeasurements>& hosts) {
  if (hosts.empty()) throw core::InternalError("average: no measurements");
  HostMeasurements mean = hosts.front();
  for (std::size_t p = 1; p < hosts.size(); ++p) {
    const HostMeasurements& h = hosts[p];
    if (!same_grid(mean, h)) throw core::ConfigError(str_cat("calibrate: process ", p, " measured another grid"));
    mean.memory_bytes += h.memory_bytes;
    mean.copy_bytes_per_s += h.copy_bytes_per_s;
    mean.adamw_params_per_s += h.adamw_params_per_s;
    mean.seconds_per_dispatched_op += h.seconds_per_dispatched_op;
    for (std::size_t i = 0; i < h.gemm.size(); ++i) mean.gemm[i].seconds += h.gemm[i].seconds;
    for (std::size_t i = 0; i < h.attention.size(); ++i) {
      mean.attention[i].forward_seconds += h.attention[i].forward_seconds;
      mean.attention[i].backward_seconds += h.attention[i].backward_seconds;
    }
    for (std::size_t i = 0; i < h.cross_entropy.size(); ++i) {
      mean.cross_entropy[i].forward_seconds += h.cross_entropy[i].forward_seconds;
      mean.cross_entropy[i].backward_seconds += h.cross_entropy[i].backward_seconds;
    }
  }
  const double n = static_cast<double>(hosts.size());
  mean.memory_bytes /= n;
  mean.copy_bytes_per_s /= n;
  mean.adamw_params_per_s /= n;
  mean.seconds_per_dispatched_op /= n;
  for (auto& g : mean.gemm) g.seconds /= n;
  for (auto& a : mean.attention) {
    a.forward_seconds /= n;
    a.backward_seconds /= n;
  }
  for (auto& c : mean.cross_entropy) {
    c.forward_seconds /= n;
    c.backward_seconds /= n;
  }
  return mean;
}

}  // namespace cpt::spec
