// libFuzzer harness: the JSON readers of spec/ (a model spec, a Hugging Face config.json, a GPU
// profile, a cluster with inline node and fabric, a plan, a measured run, a TRAIN.json whose paths
// resolve in a directory that does not exist, calibrate-host's measurements). The first byte picks
// the reader; the rest is the document (parsed with the depth limit every file gets).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/json_reader.h"
#include "fuzz/fuzz_support.h"
#include "spec/hardware_io.h"
#include "spec/host_measurements.h"
#include "spec/measured_run.h"
#include "spec/model_io.h"
#include "spec/plan.h"
#include "spec/train_config.h"

namespace {

using namespace cpt;

// A cluster's named parts are refused: the harness reads inline documents only.
spec::HardwareResolver no_names() {
  spec::HardwareResolver resolve;
  resolve.gpu = [](const std::string& name, core::JsonObjectReader& r, std::string_view key) -> spec::GpuSpec {
    r.fail(key, "an inline object", name);
  };
  resolve.node = [](const std::string& name, core::JsonObjectReader& r, std::string_view key) -> spec::NodeSpec {
    r.fail(key, "an inline object", name);
  };
  resolve.fabric = [](const std::string& name, core::JsonObjectReader& r, std::string_view key) -> spec::FabricSpec {
    r.fail(key, "an inline object", name);
  };
  return resolve;
}

void read(std::uint8_t which, std::string_view text) {
  const core::JsonDocument doc = core::parse_json_text(text, "fuzz.json");
  if (which % 8 == 5) {
    (void)spec::measured_run_from_json(doc.root(), "fuzz.json");
    return;
  }
  if (which % 8 == 7) {
    (void)spec::host_measurements_from_json(doc.root(), "fuzz.json");
    return;
  }
  auto reader = core::JsonObjectReader::root_of(doc);
  switch (which % 8) {
    case 0:
      (void)spec::model_from_json(reader);
      break;
    case 1:
      (void)spec::model_from_hf_config(reader, "fuzz");
      break;
    case 2:
      (void)spec::gpu_from_json(reader);
      break;
    case 3:
      (void)spec::cluster_from_json(reader, no_names());
      break;
    case 6:
      (void)spec::train_config_from_json(reader, "/nonexistent/cpt-fuzz", "fuzz.json");
      break;
    default:
      (void)spec::plan_from_json(reader);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  cpt::fuzz::expect_an_answer([&] { read(data[0], text); });
  return 0;
}
