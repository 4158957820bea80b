// libFuzzer harness: a token shard's index and tokens (executor/data/token_shards.h), as
// `cpt data` writes them and training maps them. The first two bytes give the index's length;
// the index, then the tokens, follow. Every document is read back whole.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor/data/token_shards.h"
#include "fuzz/fuzz_support.h"

namespace {

const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("cpt_fuzz_shard." + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t index_size = std::min<std::size_t>(size - 2, data[0] | (std::size_t{data[1]} << 8));
  const auto prefix = scratch() / "shard";
  write(prefix.string() + ".idx", data + 2, index_size);
  write(prefix.string() + ".bin", data + 2 + index_size, size - 2 - index_size);
  cpt::fuzz::expect_an_answer([&] {
    const auto shard = cpt::exec::TokenShard::open(prefix);
    std::int64_t first = 0;
    for (std::int64_t doc = 0; doc < shard.documents(); ++doc) {
      std::vector<std::int64_t> tokens(static_cast<std::size_t>(shard.document_length(doc)));
      shard.read(first, tokens);
      first += shard.document_length(doc);
    }
  });
  return 0;
}
