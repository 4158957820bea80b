#pragma once
// The built-in model catalog: architectures of published models, each with its source and its
// published parameter count, so that `--model llama3-8b` needs no file. The numbers are checked
// against the published counts in tests/spec/model_catalog_test.cpp.

#include <optional>
#include <string>
#include <vector>

#include "spec/model_spec.h"

namespace cpt::spec {

struct CatalogModel {
  ModelSpec spec;                   // spec.name is the command-line name, e.g. "llama3-8b"
  std::vector<std::string> aliases;  // other accepted names
  std::string source;               // where the architecture numbers come from
  // The published parameter count and its precision: an exact count (precision 1) from the
  // released checkpoint, or a rounded figure from a paper (e.g. 1.7e9 with precision 1e8).
  double published_params = 0;
  double published_precision = 1;
};

// All catalog entries, in a fixed order (families, then size).
const std::vector<CatalogModel>& model_catalog();
// The entry whose name or alias equals `name` (case-insensitive), if any.
std::optional<CatalogModel> find_catalog_model(const std::string& name);

}  // namespace cpt::spec
