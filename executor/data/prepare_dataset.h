#pragma once
// `cpt data prepare`: text (files, directories, JSONL) -> tokenized shards + manifest.json
// (token_shards.h). Streaming: one document in memory at a time. The output directory appears
// atomically (written as <dir>.tmp-<pid>, then renamed), so a dataset directory with a manifest
// is always complete.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "executor/data/corpus_reader.h"
#include "executor/data/tokenizer.h"

namespace cpt::exec {

struct PrepareOptions {
  CorpusOptions corpus;
  std::int64_t max_tokens_per_shard = 256ll << 20;  // a new shard starts past this many tokens
  bool append_eos = true;                           // end each document with the tokenizer's EOS
};

struct PrepareResult {
  CorpusStats corpus;
  std::int64_t tokens = 0;
  std::int64_t shards = 0;
};

// ConfigError when `out_dir` exists already (never overwritten) or a source is missing.
PrepareResult prepare_dataset(const std::vector<std::filesystem::path>& sources, const Tokenizer& tokenizer,
                              const std::filesystem::path& out_dir, const PrepareOptions& options);

// Reads up to `max_bytes` of good documents from `sources` (for training a tokenizer).
std::vector<std::string> sample_documents(const std::vector<std::filesystem::path>& sources,
                                          const CorpusOptions& options, std::uint64_t max_bytes);

}  // namespace cpt::exec
