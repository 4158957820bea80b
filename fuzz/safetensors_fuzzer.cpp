// libFuzzer harness: a safetensors file's header (executor/io/safetensors_header.h), as cpt reads
// its own checkpoints and Hugging Face weights. The input is the whole file: the 8-byte length,
// the JSON header, the data.
#include <cstddef>
#include <cstdint>

#include "executor/io/safetensors_header.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cpt::fuzz::expect_an_answer([&] {
    const auto header =
        cpt::exec::parse_safetensors_header("fuzz.safetensors", reinterpret_cast<const std::byte*>(data), size);
    // What the loader then relies on: every range inside the data section, in order, apart.
    std::size_t cursor = 0;
    for (const auto& name : header.order) {
      const auto& info = header.tensors.at(name);
      if (info.begin < cursor || info.end > size - header.data_offset) std::abort();
      cursor = info.end;
    }
  });
  return 0;
}
