// libFuzzer harness: a checkpoint's manifest.json (executor/checkpoint/checkpoint_manifest.h), as
// `--resume`, `cpt checkpoint` and init_from read it. Every listed file must stay inside the
// checkpoint directory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/json_reader.h"
#include "executor/checkpoint/checkpoint_manifest.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path dir = "/nonexistent/checkpoints/step_00000010";
  cpt::fuzz::expect_an_answer([&] {
    const auto doc =
        cpt::core::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "manifest.json");
    const auto manifest = cpt::exec::read_checkpoint_manifest(doc, dir);
    for (const auto& file : manifest.files) {
      const auto relative = file.path.lexically_relative(dir);
      if (relative.empty() || *relative.begin() == "..") std::abort();
    }
  });
  return 0;
}
