#include "executor/data/prepare_dataset.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "executor/data/token_shards.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

PrepareResult prepare_dataset(const std::vector<fs::path>& sources, const Tokenizer& tokenizer, const fs::path& out_dir,
                              const PrepareOptions& options) {
  if (fs::exists(out_dir)) {
    throw core::ConfigError(str_cat(out_dir.string(), ": already exists; choose a new output directory"));
  }
  core::create_parent_directory(out_dir);
  const auto tmp = fs::path(str_cat(out_dir.string(), ".tmp-", ::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const auto dtype = token_dtype_for_vocab(tokenizer.vocab_size());
  const auto eos = tokenizer.eos_id();
  PrepareResult result;
  std::vector<std::string> shard_names;
  std::unique_ptr<TokenShardWriter> writer;
  auto close_shard = [&] {
    if (writer) {
      writer->finish();
      writer.reset();
    }
  };
  try {
    result.corpus = read_corpus(sources, options.corpus, [&](std::string_view text, const std::string&) {
      auto ids = tokenizer.encode(text);
      if (options.append_eos && eos >= 0) ids.push_back(eos);
      if (writer && writer->tokens() >= options.max_tokens_per_shard) close_shard();
      if (!writer) {
        char name[32];
        std::snprintf(name, sizeof name, "shard_%05zu", shard_names.size());
        shard_names.emplace_back(name);
        writer = std::make_unique<TokenShardWriter>(tmp / shard_names.back(), dtype);
      }
      writer->add_document(ids);
      result.tokens += static_cast<std::int64_t>(ids.size());
    });
    close_shard();
    if (shard_names.empty()) {
      throw core::ConfigError(str_cat("data prepare: no usable document in ", sources.size(), " source(s)"));
    }
    nlohmann::ordered_json m;
    m["format"] = "cpt-tokens-v1";
    m["tokenizer"] = fs::absolute(tokenizer.path()).string();
    m["tokenizer_fingerprint"] = tokenizer.fingerprint();
    m["vocab_size"] = tokenizer.vocab_size();
    m["token_dtype"] = dtype == TokenDtype::kUInt16 ? "uint16" : "int32";
    m["eos_appended"] = options.append_eos && eos >= 0;
    m["documents"] = result.corpus.documents;
    m["tokens"] = result.tokens;
    m["shards"] = shard_names;
    std::vector<std::string> src;
    for (const auto& s : sources) src.push_back(fs::absolute(s).string());
    m["sources"] = src;
    m["skipped"] = result.corpus.skipped;
    core::write_file_atomic(tmp / "manifest.json", m.dump(2) + "\n");
    fs::rename(tmp, out_dir);
  } catch (...) {
    writer.reset();
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  result.shards = static_cast<std::int64_t>(shard_names.size());
  return result;
}

std::vector<std::string> sample_documents(const std::vector<fs::path>& sources, const CorpusOptions& options,
                                          std::uint64_t max_bytes) {
  std::vector<std::string> docs;
  std::uint64_t bytes = 0;
  read_corpus(sources, options, [&](std::string_view text, const std::string&) {
    if (bytes >= max_bytes) return;
    docs.emplace_back(text);
    bytes += text.size();
  });
  return docs;
}

}  // namespace cpt::exec
