#include "spec/hardware_catalog.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::ConfigError;
using core::JsonObjectReader;
using core::str_cat;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

template <class Map>
std::vector<std::string> keys(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

[[noreturn]] void unknown(const std::string& what, const std::string& name, const std::string& flag,
                          std::vector<std::string> known, const std::string& list_cmd) {
  const auto hint = core::closest_match(lower(name), known);
  throw ConfigError(str_cat(flag, ": expected a ", what, " name (see `", list_cmd, "`), got \"", name, "\"",
                            hint.empty() ? std::string() : str_cat(" (did you mean \"", hint, "\"?)")));
}

template <class Map>
const typename Map::mapped_type* find_named(const Map& m, const std::string& name) {
  const auto it = m.find(lower(name));
  return it == m.end() ? nullptr : &it->second;
}

}  // namespace

const HardwareCatalog& HardwareCatalog::builtin() {
  static const HardwareCatalog catalog(profiles::embedded_profile_files());
  return catalog;
}

HardwareResolver HardwareCatalog::resolver() const {
  HardwareResolver r;
  r.gpu = [this](const std::string& name, JsonObjectReader& rd, std::string_view key) {
    return gpu(name, str_cat(rd.origin(), ": ", rd.path_of(key)));
  };
  r.node = [this](const std::string& name, JsonObjectReader& rd, std::string_view key) {
    return node(name, str_cat(rd.origin(), ": ", rd.path_of(key)));
  };
  r.fabric = [this](const std::string& name, JsonObjectReader& rd, std::string_view key) {
    return fabric(name, str_cat(rd.origin(), ": ", rd.path_of(key)));
  };
  return r;
}

HardwareCatalog::HardwareCatalog(const std::vector<std::pair<std::string_view, std::string_view>>& files) {
  // Parse in dependency order: GPUs, then nodes (which reference GPUs), fabrics, clusters.
  for (const char* kind : {"gpus/", "nodes/", "fabrics/", "clusters/"}) {
    for (const auto& [path_view, text] : files) {
      const std::string path(path_view);
      if (path.rfind(kind, 0) != 0) continue;
      const auto origin = str_cat("hardware_profiles/", path);
      const auto doc = core::parse_json_text(text, origin);
      auto r = JsonObjectReader::root_of(doc);
      const auto stem = std::filesystem::path(path).stem().string();
      const std::string k(kind);
      std::string name;
      if (k == "gpus/") {
        auto g = gpu_from_json(r);
        name = g.name;
        gpus_.emplace(name, std::move(g));
      } else if (k == "nodes/") {
        auto n = node_from_json(r, resolver());
        name = n.name;
        nodes_.emplace(name, std::move(n));
      } else if (k == "fabrics/") {
        auto f = fabric_from_json(r);
        name = f.name;
        fabrics_.emplace(name, std::move(f));
      } else {
        auto c = cluster_from_json(r, resolver());
        name = c.name;
        clusters_.emplace(name, std::move(c));
      }
      if (name != stem) {
        throw ConfigError(str_cat(origin, ": $.name: expected \"", stem, "\" (the file name), got \"", name, "\""));
      }
      sources_.emplace(path, std::string(text));
    }
  }
  // Defaults must resolve, so that a GPU name alone always implies a whole cluster.
  for (const auto& [name, g] : gpus_) {
    if (!g.default_node.empty() && nodes_.count(g.default_node) == 0) {
      throw ConfigError(str_cat("hardware_profiles/gpus/", name, ".json: $.default_node: expected a node profile, got \"",
                                g.default_node, "\""));
    }
  }
  for (const auto& [name, n] : nodes_) {
    if (!n.default_fabric.empty() && fabrics_.count(n.default_fabric) == 0) {
      throw ConfigError(str_cat("hardware_profiles/nodes/", name,
                                ".json: $.default_fabric: expected a fabric profile, got \"", n.default_fabric, "\""));
    }
  }
}

GpuSpec HardwareCatalog::gpu(const std::string& name, const std::string& flag) const {
  if (const auto* g = find_named(gpus_, name)) return *g;
  std::vector<std::string> known = keys(gpus_);
  for (const auto& [n, g] : gpus_) {
    for (const auto& a : g.aliases) {
      if (a == lower(name)) return g;
      known.push_back(a);
    }
  }
  unknown("GPU", name, flag, known, "cpt profiles list");
}

NodeSpec HardwareCatalog::node(const std::string& name, const std::string& flag) const {
  if (const auto* n = find_named(nodes_, name)) return *n;
  unknown("node", name, flag, keys(nodes_), "cpt profiles list");
}

FabricSpec HardwareCatalog::fabric(const std::string& name, const std::string& flag) const {
  if (const auto* f = find_named(fabrics_, name)) return *f;
  unknown("fabric", name, flag, keys(fabrics_), "cpt profiles list");
}

ClusterSpec HardwareCatalog::cluster(const std::string& name, const std::string& flag) const {
  if (const auto* c = find_named(clusters_, name)) return *c;
  unknown("cluster", name, flag, keys(clusters_), "cpt profiles list");
}

ClusterSpec HardwareCatalog::cluster_for_gpu(const std::string& gpu_name, int num_gpus, const std::string& flag) const {
  const GpuSpec g = gpu(gpu_name, flag);
  if (g.default_node.empty()) {
    throw ConfigError(str_cat(flag, ": GPU \"", g.name, "\" has no default node; name a cluster file with --cluster"));
  }
  ClusterSpec c;
  c.node = nodes_.at(g.default_node);
  if (c.node.default_fabric.empty()) {
    throw ConfigError(str_cat(flag, ": node \"", c.node.name, "\" has no default fabric; name a cluster file with --cluster"));
  }
  c.fabric = fabrics_.at(c.node.default_fabric);
  const int per_node = c.node.gpus_per_node;
  c.num_gpus = num_gpus;
  c.num_nodes = std::max(1, (num_gpus + per_node - 1) / per_node);
  c.name = str_cat(g.name, "_x", num_gpus);
  if (num_gpus < 1 || (num_gpus > per_node && num_gpus % per_node != 0)) {
    throw ConfigError(str_cat("--gpus: expected a count that fills whole ", c.node.name, " nodes (a multiple of ",
                              per_node, ") or at most ", per_node, ", got ", num_gpus));
  }
  return c;
}

ClusterSpec HardwareCatalog::load_cluster_file(const std::filesystem::path& path) const {
  const auto doc = core::parse_json_file(path);
  auto r = JsonObjectReader::root_of(doc);
  return cluster_from_json(r, resolver());
}

ClusterSpec HardwareCatalog::load_cluster(const std::string& name_or_path, const std::string& flag) const {
  if (const auto* c = find_named(clusters_, name_or_path)) return *c;
  std::error_code ec;
  const std::filesystem::path path(name_or_path);
  if (path.extension() == ".json" || std::filesystem::exists(path, ec)) return load_cluster_file(path);
  unknown("cluster", name_or_path, flag, keys(clusters_), "cpt profiles list");
}

}  // namespace cpt::spec
