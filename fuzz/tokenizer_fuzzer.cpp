// libFuzzer harness: a tokenizer model file (executor/data/tokenizer.h; SentencePiece's protobuf,
// read by Debian's libsentencepiece), as `cpt data` and training load it; a model that loads then
// encodes and decodes a fixed text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/data/tokenizer.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cpt::fuzz::expect_an_answer([&] {
    const auto tokenizer =
        cpt::exec::Tokenizer::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.model");
    const auto ids = tokenizer.encode("def main():\n    return 0  # çà 漢字\n");
    (void)tokenizer.decode(ids);
    (void)tokenizer.vocab_size();
  });
  return 0;
}
