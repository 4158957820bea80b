// cpt profiles list|show NAME [--json]: the hardware profiles (GPUs, nodes, fabrics, clusters).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cpt/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "spec/hardware_catalog.h"
#include "spec/hardware_io.h"

namespace cpt::cli {
namespace {

using core::Align;
using core::str_cat;

struct ListOptions {
  bool json = false;
};

struct ShowOptions {
  std::string name;
  bool json = false;
};

std::string peak(const spec::GpuSpec& g, spec::Precision p) {
  const auto v = g.peak(p);
  return v ? fixed(core::to_teraflops_per_second(*v), 1) : "-";
}

core::TextTable gpu_table(const std::vector<spec::GpuSpec>& gpus) {
  core::TextTable t(
      {"gpu", "aliases", "HBM GiB", "HBM GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "NVLink GB/s/dir"},
      {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  for (const auto& g : gpus) {
    t.add_row({g.name, core::join(g.aliases, ", "), fixed(core::to_gibibytes(g.hbm_capacity), 1),
               fixed(core::to_gigabytes_per_second(g.hbm_bandwidth), 0), peak(g, spec::Precision::kBf16),
               peak(g, spec::Precision::kFp8), fixed(core::to_gigabytes_per_second(g.nvlink_bandwidth), 0)});
  }
  return t;
}

core::TextTable node_table(const std::vector<spec::NodeSpec>& nodes) {
  core::TextTable t(
      {"node", "gpu", "gpus", "intra", "intra GB/s/dir", "NICs", "NIC Gbit/s"},
      {Align::kLeft, Align::kLeft, Align::kRight, Align::kLeft, Align::kRight, Align::kRight, Align::kRight});
  for (const auto& n : nodes) {
    t.add_row({n.name, n.gpu.name, std::to_string(n.gpus_per_node),
               n.intra_kind == spec::IntraNodeKind::kNvSwitch ? "nvswitch" : "pcie",
               fixed(core::to_gigabytes_per_second(n.intra_bandwidth), 0), std::to_string(n.nics_per_node),
               fixed(core::to_gigabits_per_second(n.nic_bandwidth), 0)});
  }
  return t;
}

core::TextTable fabric_table(const std::vector<spec::FabricSpec>& fabrics) {
  core::TextTable t({"fabric", "link Gbit/s", "latency us", "rail-optimised", "oversubscription"},
                    {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kRight});
  for (const auto& f : fabrics) {
    t.add_row({f.name, fixed(core::to_gigabits_per_second(f.link_bandwidth), 0),
               fixed(core::to_microseconds(f.latency), 1), f.rail_optimized ? "yes" : "no",
               fixed(f.oversubscription, 1)});
  }
  return t;
}

core::TextTable cluster_table(const std::vector<spec::ClusterSpec>& clusters) {
  core::TextTable t({"cluster", "node", "nodes", "gpus", "fabric", "off-node GB/s/gpu"},
                    {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kRight});
  for (const auto& c : clusters) {
    t.add_row({c.name, c.node.name, std::to_string(c.num_nodes), std::to_string(c.num_gpus), c.fabric.name,
               fixed(core::to_gigabytes_per_second(c.inter_node_bandwidth_per_gpu()), 1)});
  }
  return t;
}

template <class Map>
auto values(const Map& m) {
  std::vector<typename Map::mapped_type> out;
  for (const auto& [k, v] : m) out.push_back(v);
  return out;
}

void run_list(const ListOptions& o) {
  const auto& cat = spec::HardwareCatalog::builtin();
  if (o.json) {
    core::Json out = {{"gpus", core::Json::array()},
                      {"nodes", core::Json::array()},
                      {"fabrics", core::Json::array()},
                      {"clusters", core::Json::array()}};
    for (const auto& [k, g] : cat.gpus()) out["gpus"].push_back(spec::gpu_to_json(g));
    for (const auto& [k, n] : cat.nodes()) out["nodes"].push_back(spec::node_to_json(n));
    for (const auto& [k, f] : cat.fabrics()) out["fabrics"].push_back(spec::fabric_to_json(f));
    for (const auto& [k, c] : cat.clusters()) out["clusters"].push_back(spec::cluster_to_json(c));
    print_json(out);
    return;
  }
  std::cout << "GPUs (dense peaks; a GPU name alone implies its node and fabric)\n"
            << gpu_table(values(cat.gpus())).render() << "\nNodes\n"
            << node_table(values(cat.nodes())).render() << "\nFabrics\n"
            << fabric_table(values(cat.fabrics())).render() << "\nClusters\n"
            << cluster_table(values(cat.clusters())).render();
}

// A name is looked up as GPU (or alias), node, fabric, cluster, in that order; a path as a cluster file.
void run_show(const ShowOptions& o) {
  const auto& cat = spec::HardwareCatalog::builtin();
  const std::string flag = "profiles show NAME";
  auto emit = [&](const char* kind, core::Json j, const core::TextTable& t) {
    if (o.json) {
      print_json({{"kind", kind}, {"profile", std::move(j)}});
    } else {
      std::cout << t.render();
    }
  };
  auto known = [&](auto&& lookup) {
    try {
      lookup();
      return true;
    } catch (const core::ConfigError&) {
      return false;
    }
  };
  if (known([&] { (void)cat.gpu(o.name, flag); })) {
    const auto g = cat.gpu(o.name, flag);
    return emit("gpu", spec::gpu_to_json(g), gpu_table({g}));
  }
  if (known([&] { (void)cat.node(o.name, flag); })) {
    const auto n = cat.node(o.name, flag);
    return emit("node", spec::node_to_json(n), node_table({n}));
  }
  if (known([&] { (void)cat.fabric(o.name, flag); })) {
    const auto f = cat.fabric(o.name, flag);
    return emit("fabric", spec::fabric_to_json(f), fabric_table({f}));
  }
  std::error_code ec;
  if (known([&] { (void)cat.cluster(o.name, flag); }) || std::filesystem::exists(o.name, ec) ||
      std::filesystem::path(o.name).extension() == ".json") {
    const auto c = cat.load_cluster(o.name, flag);
    return emit("cluster", spec::cluster_to_json(c), cluster_table({c}));
  }
  std::vector<std::string> names;
  for (const auto& [k, g] : cat.gpus()) {
    names.push_back(k);
    names.insert(names.end(), g.aliases.begin(), g.aliases.end());
  }
  for (const auto& [k, v] : cat.nodes()) names.push_back(k);
  for (const auto& [k, v] : cat.fabrics()) names.push_back(k);
  for (const auto& [k, v] : cat.clusters()) names.push_back(k);
  const auto hint = core::closest_match(o.name, names);
  throw core::ConfigError(str_cat(flag, ": expected a GPU, node, fabric or cluster name (see `cpt profiles list`) ",
                                  "or a cluster JSON file, got \"", o.name, "\"",
                                  hint.empty() ? std::string() : str_cat(" (did you mean \"", hint, "\"?)")));
}

}  // namespace

void register_profiles_command(CLI::App& app) {
  auto* profiles = app.add_subcommand("profiles", "List the hardware profiles, or show one");
  profiles->require_subcommand(1);

  auto list_opts = std::make_shared<ListOptions>();
  auto* list = profiles->add_subcommand("list", "Every GPU, node, fabric and cluster profile");
  list->add_flag("--json", list_opts->json, "Print JSON instead of tables");
  list->callback([list_opts] { run_list(*list_opts); });

  auto show_opts = std::make_shared<ShowOptions>();
  auto* show = profiles->add_subcommand("show", "One profile by name or alias, or a cluster JSON file");
  show->add_option("NAME", show_opts->name, "e.g. h100, dgx_h100, ib_ndr_400g, h100_256gpu_ndr")->required();
  show->add_flag("--json", show_opts->json, "Print JSON instead of a table");
  show->callback([show_opts] { run_show(*show_opts); });
}

}  // namespace cpt::cli
