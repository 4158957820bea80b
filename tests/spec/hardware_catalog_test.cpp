#include "spec/hardware_catalog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "spec/gpu_for_device_name.h"
#include "spec/hardware_io.h"
#include <nlohmann/json.hpp>

namespace cpt::spec {
namespace {

const HardwareCatalog& cat() {
  return HardwareCatalog::builtin();
}

TEST(HardwareCatalog, EveryProfileLoads) {
  EXPECT_EQ(cat().gpus().size(), 7u);
  EXPECT_EQ(cat().nodes().size(), 7u);
  EXPECT_EQ(cat().fabrics().size(), 3u);
  EXPECT_EQ(cat().clusters().size(), 4u);
  EXPECT_EQ(cat().sources().size(), 21u);
  for (const auto& [name, c] : cat().clusters()) EXPECT_TRUE(find_cluster_errors(c).empty()) << name;
}

TEST(HardwareCatalog, DatasheetNumbersConvertOnce) {
  const auto h100 = cat().gpu("h100", "--gpu");
  EXPECT_EQ(h100.name, "h100_sxm5_80gb");
  EXPECT_EQ(h100.hbm_capacity, core::gibibytes(80));
  EXPECT_DOUBLE_EQ(h100.hbm_bandwidth.value(), 3350e9);
  EXPECT_DOUBLE_EQ(h100.peak(Precision::kBf16)->value(), 989.4e12);  // dense, not the 1979 sparse figure
  EXPECT_DOUBLE_EQ(h100.nvlink_bandwidth.value(), 450e9);            // 900 GB/s bidirectional, halved
  const auto h200 = cat().gpu("h200", "--gpu");
  EXPECT_EQ(h200.hbm_capacity, core::gibibytes(140));  // nvidia-smi: 143,771 MiB (hardware_profiles/README.md)
  const auto a100 = cat().gpu("a100-40g", "--gpu");
  EXPECT_FALSE(a100.peak(Precision::kFp8).has_value());  // no fp8 engine on Ampere
}

TEST(HardwareCatalog, CommandLineNamesResolve) {
  for (const char* n : {"a100-40g", "a100-80g", "a100-pcie-80g", "h100", "h100-pcie", "h200", "b200", "H100"}) {
    EXPECT_NO_THROW(cat().gpu(n, "--gpu")) << n;
  }
}

TEST(HardwareCatalog, GpuNameAloneImpliesNodeAndFabric) {
  const auto a100 = cat().cluster_for_gpu("a100-80g", 64, "--gpu");
  EXPECT_EQ(a100.node.name, "dgx_a100_80gb");
  EXPECT_EQ(a100.fabric.name, "ib_hdr_200g");
  EXPECT_EQ(a100.num_nodes, 8);
  EXPECT_DOUBLE_EQ(a100.inter_node_bandwidth_per_gpu().value(), 25e9);  // HDR 200 Gb/s per GPU
  const auto h100 = cat().cluster_for_gpu("h100", 16384, "--gpu");
  EXPECT_EQ(h100.fabric.name, "ib_ndr_400g");
  EXPECT_EQ(h100.num_nodes, 2048);
  EXPECT_DOUBLE_EQ(h100.inter_node_bandwidth_per_gpu().value(), 50e9);  // NDR 400 Gb/s per GPU
  const auto part = cat().cluster_for_gpu("h200", 4, "--gpu");
  EXPECT_EQ(part.num_nodes, 1);
  EXPECT_EQ(part.num_gpus, 4);
  EXPECT_THROW(cat().cluster_for_gpu("h100", 12, "--gpus"), core::ConfigError);
}

TEST(HardwareCatalog, UnknownNamesHint) {
  try {
    (void)cat().gpu("h10", "--gpu");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--gpu: expected a GPU name (see `cpt profiles list`), got \"h10\" (did you mean \"h100\"?)");
  }
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

// `text` written as cluster file `name` and loaded back; the file removed.
ClusterSpec load_cluster_text(const std::string& name, const std::string& text) {
  const auto path = write_temp(name, text);
  auto c = cat().load_cluster(path.string(), "--cluster");
  std::filesystem::remove(path);
  return c;
}

// The ConfigError loading `text` as cluster file `name` gives ("" when it loads).
std::string cluster_text_error(const std::string& name, const std::string& text) {
  const auto path = write_temp(name, text);
  std::string what;
  try {
    (void)cat().load_cluster(path.string(), "--cluster");
  } catch (const core::ConfigError& e) {
    what = e.what();
  }
  std::filesystem::remove(path);
  return what;
}

TEST(HardwareCatalog, ClusterFileWithReferencesAndInlineParts) {
  const auto path = write_temp("cpt_test_cluster.json", R"({
    "name": "mine", "node": "dgx_h100", "num_nodes": 4,
    "fabric": {"name": "slow", "display_name": "slow IB", "topology": "fat_tree",
               "link_bandwidth_Gbit_per_s": 100, "latency_us": 8, "rail_optimized": false,
               "oversubscription": 2, "switch_radix": 32}})");
  const auto c = cat().load_cluster(path.string(), "--cluster");
  EXPECT_EQ(c.num_gpus, 32);
  EXPECT_EQ(c.node.gpu.name, "h100_sxm5_80gb");
  EXPECT_DOUBLE_EQ(c.inter_node_bandwidth_per_gpu().value(), 12.5e9);  // fabric link caps the NIC
  std::filesystem::remove(path);
}

// A calibrated node's calls measured apart, its scalar all-reduce and its overlap slowdown load,
// write and load back the same; an unknown call name, a latency of 0, a negative slowdown and a
// negative resume cost are errors naming their paths.
TEST(HardwareCatalog, MeasuredIntraNodeCallsRoundTrip) {
  auto c = cat().cluster_for_gpu("h100", 8, "--gpu");
  c.node.intra_measured[static_cast<std::size_t>(LinkCall::kReduceScatter)] =
      MeasuredLink{core::microseconds(1500), core::gigabytes_per_second(0.5)};
  c.node.intra_measured[static_cast<std::size_t>(LinkCall::kSendRecv)] =
      MeasuredLink{core::microseconds(40), core::gigabytes_per_second(4)};
  c.node.scalar_all_reduce_step_latency = core::microseconds(250);
  c.node.overlap_compute_slowdown = 1.25;
  c.node.compute_lost_resuming_from_call = core::microseconds(250);
  const auto text = cluster_to_json(c).dump();
  EXPECT_NE(text.find(R"("overlap_compute_slowdown":1.25)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("compute_lost_resuming_from_call_us":250)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("measured":{"reduce_scatter":)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("scalar_all_reduce_step_latency_us":250)"), std::string::npos) << text;
  EXPECT_EQ(load_cluster_text("cpt_test_measured.json", text).node, c.node);
  auto bad = nlohmann::json::parse(text);
  bad["node"]["intra_node"]["measured"]["all_to_all"] = {{"latency_us", 1}, {"bandwidth_GB_per_s_per_direction", 1}};
  const auto unknown = cluster_text_error("cpt_test_measured_bad.json", bad.dump());
  EXPECT_NE(unknown.find("$.node.intra_node.measured"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("all_to_all"), std::string::npos) << unknown;
  auto zero = nlohmann::json::parse(text);
  zero["node"]["intra_node"]["scalar_all_reduce_step_latency_us"] = 0;
  const auto not_positive = cluster_text_error("cpt_test_scalar_bad.json", zero.dump());
  EXPECT_NE(not_positive.find("$.node.intra_node.scalar_all_reduce_step_latency_us"), std::string::npos)
      << not_positive;
  auto negative = nlohmann::json::parse(text);
  negative["node"]["intra_node"]["overlap_compute_slowdown"] = -0.5;
  const auto below = cluster_text_error("cpt_test_overlap_bad.json", negative.dump());
  EXPECT_NE(below.find("$.node.intra_node.overlap_compute_slowdown"), std::string::npos) << below;
  auto lost = nlohmann::json::parse(text);
  lost["node"]["intra_node"]["compute_lost_resuming_from_call_us"] = -3;
  const auto negative_resume = cluster_text_error("cpt_test_resume_bad.json", lost.dump());
  EXPECT_NE(negative_resume.find("$.node.intra_node.compute_lost_resuming_from_call_us"), std::string::npos)
      << negative_resume;
}

// A CPU node whose ranks share its cores (spec::SharedCores) round-trips; a zero core count is
// refused naming the key.
TEST(HardwareCatalog, SharedCoresRoundTrip) {
  auto c = cat().cluster_for_gpu("h100", 8, "--gpu");
  c.node.shared_cores = SharedCores{2, 1};
  const auto text = cluster_to_json(c).dump();
  EXPECT_NE(text.find(R"("shared_cores":{"cores":2,"threads_per_device":1})"), std::string::npos) << text;
  EXPECT_EQ(load_cluster_text("cpt_test_shared_cores.json", text).node, c.node);
  auto bad = nlohmann::json::parse(text);
  bad["node"]["shared_cores"]["cores"] = 0;
  const auto error = cluster_text_error("cpt_test_shared_cores_bad.json", bad.dump());
  EXPECT_NE(error.find("$.node.shared_cores.cores"), std::string::npos) << error;
}

TEST(HardwareCatalog, BadClusterFilesNameFileAndPath) {
  const auto bad_node = write_temp("cpt_test_bad1.json",
                                   R"({"name": "x", "node": "dgx_h1000", "num_nodes": 2, "fabric": "ib_ndr_400g"})");
  try {
    (void)cat().load_cluster(bad_node.string(), "--cluster");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), bad_node.string() +
                                         ": $.node: expected a node name (see `cpt profiles list`), got \"dgx_h1000\" "
                                         "(did you mean \"dgx_h100\"?)");
  }
  const auto negative = write_temp("cpt_test_bad2.json",
                                   R"({"name": "x", "node": "dgx_h100", "num_nodes": -1, "fabric": "ib_ndr_400g"})");
  try {
    (void)cat().load_cluster(negative.string(), "--cluster");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), negative.string() + ": $.num_nodes: expected an integer in [1, 1000000], got -1");
  }
  std::filesystem::remove(bad_node);
  std::filesystem::remove(negative);
}

// A capacity whose byte count does not fit int64 is bad input, not a conversion (found by
// fuzz/spec_json_fuzzer.cpp).
TEST(HardwareCatalog, AnAbsurdCapacityIsAConfigError) {
  const auto doc = core::parse_json_text(R"({"name": "g", "display_name": "g", "hbm_capacity_GB": 1.5e100,
      "hbm_bandwidth_GB_per_s": 1, "dense_bf16_TFLOPs_per_s": 1, "nvlink_bandwidth_GB_per_s_per_direction": 0})",
                                         "g.json");
  auto r = core::JsonObjectReader::root_of(doc);
  try {
    (void)gpu_from_json(r);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hbm_capacity_GB"), std::string::npos) << e.what();
  }
}

TEST(HardwareCatalog, MeasuredEfficiencyCurvesLoadAndRoundTrip) {
  const std::string base = R"({"name": "g", "display_name": "g", "hbm_capacity_GiB": 80, "hbm_bandwidth_GB_per_s": 1,
      "dense_bf16_TFLOPs_per_s": 1, "nvlink_bandwidth_GB_per_s_per_direction": 0, "gemm_efficiency": )";
  auto parse = [&](const std::string& curve) {
    const auto doc = core::parse_json_text(base + curve + "}", "g.json");
    auto r = core::JsonObjectReader::root_of(doc);
    return gpu_from_json(r);
  };
  const GpuSpec g = parse(R"({"bf16": [[0.1, 0.2], [100, 0.75]]})");
  ASSERT_EQ(g.gemm_efficiency[0].size(), 2u);
  EXPECT_EQ(g.gemm_efficiency[0][1], (EfficiencyPoint{100, 0.75}));
  const auto doc = core::parse_json_text(gpu_to_json(g).dump(), "x");
  auto r = core::JsonObjectReader::root_of(doc);
  EXPECT_EQ(gpu_from_json(r), g);
  // A calibrated CPU's extra measurements: the attention curve and the cross-entropy rates.
  const auto cpu_doc =
      core::parse_json_text(base + R"({"fp32": [[1, 0.9]]}, "attention_efficiency": {"fp32": [[0.01, 0.2], [1, 0.4]]},
      "cross_entropy_rates": [{"logits": 1e6, "forward_logits_per_s": 9e8, "backward_logits_per_s": 5e8},
                              {"logits": 3.2e7, "forward_logits_per_s": 4e8, "backward_logits_per_s": 1.8e8}],
      "compute_jitter_sqrt_s": 0.012,
      "gemm_efficiency_by_min_dim": {"fp32": [{"min_dim": 32, "efficiency": [[0.01, 0.5], [1, 0.6]]},
                                              {"min_dim": 512, "efficiency": [[0.1, 0.95]]}]}})",
                            "cpu.json");
  auto cpu_r = core::JsonObjectReader::root_of(cpu_doc);
  const GpuSpec cpu = gpu_from_json(cpu_r);
  const auto fp32 = static_cast<std::size_t>(Precision::kFp32);
  ASSERT_EQ(cpu.attention_efficiency[fp32].size(), 2u);
  EXPECT_EQ(cpu.attention_efficiency[fp32][1], (EfficiencyPoint{1, 0.4}));
  EXPECT_EQ(cpu.compute_jitter_sqrt_s, 0.012);
  ASSERT_EQ(cpu.gemm_efficiency_by_min_dim[fp32].size(), 2u);
  EXPECT_EQ(cpu.gemm_efficiency_by_min_dim[fp32][1], (GemmShapeCurve{512, {{0.1, 0.95}}}));
  ASSERT_EQ(cpu.cross_entropy_rates.size(), 2u);
  EXPECT_EQ(cpu.cross_entropy_rates[1], (CrossEntropyPoint{3.2e7, 4e8, 1.8e8}));
  const auto cpu_again = core::parse_json_text(gpu_to_json(cpu).dump(), "y");
  auto again_r = core::JsonObjectReader::root_of(cpu_again);
  EXPECT_EQ(gpu_from_json(again_r), cpu);
  try {
    parse(R"({"bf16": [[100, 0.75], [0.1, 0.2]]})");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "g.json: $.gemm_efficiency.bf16[1]: expected an array of [GFLOP > 0, efficiency in (0, 1]] "
                 "pairs with increasing GFLOP, got [0.1,0.2]");
  }
  EXPECT_THROW(parse(R"({"bf17": [[1, 0.5]]})"), core::ConfigError);
  // The one-size rates of older profiles read as a one-point curve; not beside a curve, not alone.
  auto gpu_of = [&](const std::string& extra) {
    const auto text = core::parse_json_text(base + R"({"fp32": [[1, 0.9]]})" + extra + "}", "cpu.json");
    auto reader = core::JsonObjectReader::root_of(text);
    return gpu_from_json(reader);
  };
  const auto old =
      gpu_of(R"(, "cross_entropy_forward_logits_per_s": 4.5e8, "cross_entropy_backward_logits_per_s": 2e8)");
  ASSERT_EQ(old.cross_entropy_rates.size(), 1u);
  EXPECT_EQ(old.cross_entropy_rates[0], (CrossEntropyPoint{1.0, 4.5e8, 2e8}));
  EXPECT_THROW(gpu_of(R"(, "cross_entropy_forward_logits_per_s": 4.5e8)"), core::ConfigError);
  EXPECT_THROW(gpu_of(R"(, "cross_entropy_forward_logits_per_s": 4.5e8, "cross_entropy_backward_logits_per_s": 2e8,
      "cross_entropy_rates": [{"logits": 1e6, "forward_logits_per_s": 9e8, "backward_logits_per_s": 5e8}])"),
               core::ConfigError);
  // The curves by smallest dimension in ascending order.
  try {
    (void)gpu_of(R"(, "gemm_efficiency_by_min_dim": {"fp32": [{"min_dim": 128, "efficiency": [[1, 0.9]]},
                                                            {"min_dim": 32, "efficiency": [[1, 0.5]]}]})");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "cpu.json: $.gemm_efficiency_by_min_dim.fp32[1].min_dim: expected min_dim increasing, got 32");
  }
  EXPECT_THROW(gpu_of(R"(, "gemm_efficiency_by_min_dim": {"fp32": [{"min_dim": 32}]})"), core::ConfigError);
  // Sizes must grow along the cross-entropy curve.
  try {
    const auto bad = core::parse_json_text(base + R"({"fp32": [[1, 0.9]]}, "cross_entropy_rates": [
          {"logits": 4e6, "forward_logits_per_s": 9e8, "backward_logits_per_s": 5e8},
          {"logits": 1e6, "forward_logits_per_s": 9e8, "backward_logits_per_s": 5e8}]})",
                                           "cpu.json");
    auto bad_r = core::JsonObjectReader::root_of(bad);
    (void)gpu_from_json(bad_r);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_STREQ(e.what(), "cpu.json: $.cross_entropy_rates[1].logits: expected logits increasing, got 1000000.0");
  }
}

TEST(HardwareCatalog, ProfileNameMustMatchFileName) {
  const std::vector<std::pair<std::string_view, std::string_view>> files = {
      {"fabrics/a.json", R"({"name": "b", "display_name": "", "topology": "fat_tree", "link_bandwidth_Gbit_per_s": 1,
                            "latency_us": 1, "rail_optimized": true, "oversubscription": 1, "switch_radix": 8})"}};
  EXPECT_THROW(HardwareCatalog{files}, core::ConfigError);
}

}  // namespace
TEST(GpuForDeviceName, TheDriversNamesFindTheirCatalogGpu) {
  const auto& cat = HardwareCatalog::builtin();
  const std::pair<const char*, const char*> known[] = {
      {"NVIDIA H200", "h200_sxm_141gb"},           {"NVIDIA H100 80GB HBM3", "h100_sxm5_80gb"},
      {"NVIDIA H100 PCIe", "h100_pcie_80gb"},      {"NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"},
      {"NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"}, {"NVIDIA A100 80GB PCIe", "a100_pcie_80gb"},
      {"NVIDIA B200", "b200_sxm_180gb"},
  };
  for (const auto& [device, gpu] : known) {
    EXPECT_EQ(gpu_for_device_name(device, cat).value_or("none"), gpu) << device;
  }
}

TEST(GpuForDeviceName, AVariantTheCatalogLacksIsNoneRatherThanItsSibling) {
  const auto& cat = HardwareCatalog::builtin();
  // Other form factors (NVL: lower clocks and power) and other memory sizes are not the SXM card.
  for (const char* device :
       {"NVIDIA H200 NVL", "NVIDIA H100 NVL", "NVIDIA A100-PCIE-40GB", "NVIDIA GeForce RTX 4090"}) {
    EXPECT_EQ(gpu_for_device_name(device, cat), std::nullopt) << device;
  }
}

}  // namespace cpt::spec
