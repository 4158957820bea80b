#pragma once
// JSON <-> hardware specs. The profile format (docs/hardware_profile_format.md) spells each unit in
// its key; this file is the one place where those units are converted to core/units.h types.
//
// A node names its GPU and a cluster names its node and fabric either by profile name (resolved
// through `resolve`) or inline as a full object. Written specs are always fully inline, so a plan
// file is self-contained.

#include <functional>
#include <string>

#include "core/json_reader.h"
#include "spec/hardware_spec.h"

namespace cpt::spec {

// Resolves references by name; each throws ConfigError (naming `reader` and `key`) when unknown.
struct HardwareResolver {
  std::function<GpuSpec(const std::string& name, core::JsonObjectReader& reader, std::string_view key)> gpu;
  std::function<NodeSpec(const std::string& name, core::JsonObjectReader& reader, std::string_view key)> node;
  std::function<FabricSpec(const std::string& name, core::JsonObjectReader& reader, std::string_view key)> fabric;
};

// Each reader is finished on return (unknown keys rejected).
GpuSpec gpu_from_json(core::JsonObjectReader& r);
NodeSpec node_from_json(core::JsonObjectReader& r, const HardwareResolver& resolve);
FabricSpec fabric_from_json(core::JsonObjectReader& r);
ClusterSpec cluster_from_json(core::JsonObjectReader& r, const HardwareResolver& resolve);

core::Json gpu_to_json(const GpuSpec& g);
core::Json node_to_json(const NodeSpec& n);
core::Json fabric_to_json(const FabricSpec& f);
core::Json cluster_to_json(const ClusterSpec& c);

}  // namespace cpt::spec
