#include "executor/checkpoint/checkpoint_manifest.h"

#include <nlohmann/json.hpp>

#include "core/confined_path.h"
#include "core/str_cat.h"
#include "spec/model_io.h"

namespace cpt::exec {

using core::str_cat;

CheckpointManifest read_checkpoint_manifest(const core::JsonDocument& doc, const std::filesystem::path& dir) {
  auto r = core::JsonObjectReader::root_of(doc);
  const auto format = r.string("format");
  if (format != kCheckpointFormat) {
    r.fail("format", str_cat("\"", kCheckpointFormat, "\""), str_cat("\"", format, "\""));
  }
  CheckpointManifest m;
  m.step = r.integer("step", 0);
  auto model = r.object("model");
  m.model = spec::model_from_json(model);
  const auto& files = r.raw("files");
  if (!files.is_object() || !files.contains("model.safetensors")) {
    r.fail("files", "an object listing model.safetensors", core::describe_json(files));
  }
  r.finish();
  const auto& origin = doc.origin();
  for (const auto& [name, entry] : files.items()) {
    ManifestFile f;
    f.name = name;
    f.path = core::path_inside(dir, name, origin, "a key of $.files");
    core::JsonObjectReader file(entry, origin, str_cat("$.files.", name));
    f.bytes = static_cast<std::uintmax_t>(file.integer("bytes", 0));
    f.fnv1a64 = file.string("fnv1a64");
    file.finish();
    m.files.push_back(std::move(f));
  }
  return m;
}

}  // namespace cpt::exec
