#include "spec/host_measurements.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cpt::spec {
namespace {

HostMeasurements sample(double scale) {
  HostMeasurements h;
  h.device = "cpu";
  h.device_name = "a CPU";
  h.dtype = "fp32";
  h.cores = 2;
  h.threads = 1;
  h.memory_bytes = 24e9;
  h.gemm = {{128, 512, 512, 1e-3 * scale}, {2048, 2048, 2048, 0.5 * scale}};
  h.copy_bytes_per_s = 1e10 * scale;
  h.adamw_params_per_s = 1e8 * scale;
  h.attention = {{4, 4, 2, 256, 64, 2e-3 * scale, 5e-3 * scale}};
  h.cross_entropy = {{1024, 4096, 3e-3 * scale, 4e-3 * scale}};
  h.seconds_per_dispatched_op = 5e-6 * scale;
  return h;
}

// What cpt-exec writes, cpt reads back unchanged.
TEST(HostMeasurements, RoundTrip) {
  const HostMeasurements h = sample(1);
  EXPECT_EQ(host_measurements_from_json(to_json(h), "probe"), h);
}

// A misspelt, missing or out-of-range key is a one-line error naming it, not a zero.
TEST(HostMeasurements, StrictKeys) {
  auto json = to_json(sample(1));
  json["gemm"][1].erase("seconds");
  json["gemm"][1]["secnds"] = 0.5;
  try {
    (void)host_measurements_from_json(json, "probe");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("probe: $.gemm[1].seconds"), std::string::npos) << e.what();
  }
  json = to_json(sample(1));
  json["copy_bytes_per_s"] = -1;
  EXPECT_THROW((void)host_measurements_from_json(json, "probe"), core::ConfigError);
  json = to_json(sample(1));
  json["gemm"] = nlohmann::ordered_json::array();
  EXPECT_THROW((void)host_measurements_from_json(json, "probe"), core::ConfigError);
  json = to_json(sample(1));
  json["extra"] = 1;
  EXPECT_THROW((void)host_measurements_from_json(json, "probe"), core::ConfigError);
}

// Several processes' probes of one grid: each time and rate is the mean, the shapes stay; another
// grid is refused.
TEST(HostMeasurements, AverageOfTheSameGrid) {
  const HostMeasurements mean = average({sample(1), sample(3)});
  const HostMeasurements two = sample(2);
  EXPECT_DOUBLE_EQ(mean.gemm[1].seconds, two.gemm[1].seconds);
  EXPECT_DOUBLE_EQ(mean.attention[0].backward_seconds, two.attention[0].backward_seconds);
  EXPECT_DOUBLE_EQ(mean.cross_entropy[0].forward_seconds, two.cross_entropy[0].forward_seconds);
  EXPECT_DOUBLE_EQ(mean.copy_bytes_per_s, two.copy_bytes_per_s);
  EXPECT_DOUBLE_EQ(mean.seconds_per_dispatched_op, two.seconds_per_dispatched_op);
  EXPECT_EQ(mean.gemm[0].m, 128);
  HostMeasurements other = sample(1);
  other.gemm[0].k = 256;
  EXPECT_THROW((void)average({sample(1), other}), core::ConfigError);
}

}  // namespace
}  // namespace cpt::spec
