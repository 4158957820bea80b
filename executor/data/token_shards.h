#pragma once
// Pre-tokenized data in Megatron-LM's indexed format (megatron/core/datasets/indexed_dataset.py),
// so Megatron's own tools can prepare data for cpt and the other way round. One shard is
//   <name>.bin  the tokens of every document, back to back
//   <name>.idx  "MMIDIDX\0\0", <Q version 1, <B dtype code, <Q sequence count, <Q document count,
//               int32 sequence lengths, int64 byte offsets into .bin, int64 document indices
// Each document is one sequence here (document indices 0, 1, ..., n). Tokens are uint16 (dtype
// code 8) when the vocabulary has at most 65,536 entries and int32 (code 4) otherwise: Megatron
// has no uint32 code, and int32 holds any real vocabulary.
// A dataset directory holds shards shard_00000.{bin,idx}, ... and manifest.json (format, tokenizer
// fingerprint, vocabulary size, token dtype, counts, sources, skipped documents).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "executor/io/mapped_file.h"

namespace cpt::exec {

enum class TokenDtype : std::uint8_t { kUInt16 = 8, kInt32 = 4 };
TokenDtype token_dtype_for_vocab(std::int64_t vocab);

// Streams documents into one shard. finish() writes the index; a writer destroyed before
// finish() leaves no .idx (so a reader refuses the half-written shard).
class TokenShardWriter {
 public:
  TokenShardWriter(std::filesystem::path prefix, TokenDtype dtype);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;
  void add_document(std::span<const std::int32_t> tokens);
  void finish();
  [[nodiscard]] std::int64_t tokens() const { return tokens_; }
  [[nodiscard]] std::int64_t documents() const { return static_cast<std::int64_t>(lengths_.size()); }

 private:
  std::filesystem::path prefix_;
  TokenDtype dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<std::int32_t> lengths_;
  std::int64_t tokens_ = 0;
  bool finished_ = false;
};

// One shard, memory-mapped. ConfigError naming the file for a missing file, a bad magic number or
// version, an index claiming more sequences than it holds, a .bin shorter than the index says (a
// truncated shard), or a negative token id.
class TokenShard {
 public:
  static TokenShard open(const std::filesystem::path& prefix);
  [[nodiscard]] std::int64_t documents() const { return static_cast<std::int64_t>(lengths_.size()); }
  [[nodiscard]] std::int64_t tokens() const { return tokens_; }
  [[nodiscard]] std::int32_t document_length(std::int64_t doc) const { return lengths_[static_cast<std::size_t>(doc)]; }
  [[nodiscard]] TokenDtype dtype() const { return dtype_; }
  // The largest token id in the shard (found when it is opened; a negative id is refused there).
  [[nodiscard]] std::int64_t max_token() const { return max_token_; }
  // Copies tokens [first, first + out.size()) of the shard's token stream into `out`.
  void read(std::int64_t first, std::span<std::int64_t> out) const;

 private:
  std::shared_ptr<const MappedFile> bin_;
  TokenDtype dtype_ = TokenDtype::kUInt16;
  std::vector<std::int32_t> lengths_;
  std::int64_t tokens_ = 0;
  std::int64_t max_token_ = 0;
  void scan_token_range(const std::string& bin);
};

// A dataset directory: its manifest and shards, seen as one token stream of documents (each
// document ends with the tokenizer's end-of-document token when it has one).
class TokenDataset {
 public:
  // ConfigError when the directory, its manifest or a shard is missing or corrupt, a shard is named
  // outside the directory, or a token id is not below the manifest's vocab_size.
  static TokenDataset open(const std::filesystem::path& dir);
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] std::int64_t tokens() const { return total_tokens_; }
  [[nodiscard]] std::int64_t documents() const { return static_cast<std::int64_t>(doc_starts_.size()); }
  [[nodiscard]] std::int64_t vocab_size() const { return vocab_size_; }
  [[nodiscard]] const std::string& tokenizer_fingerprint() const { return tokenizer_fingerprint_; }
  // Tokens [first, first + out.size()) of the whole stream (may span shards).
  void read(std::int64_t first, std::span<std::int64_t> out) const;
  // Index of the document holding stream position `pos`, and that document's first position.
  [[nodiscard]] std::int64_t document_at(std::int64_t pos) const;
  [[nodiscard]] std::int64_t document_start(std::int64_t doc) const { return doc_starts_[static_cast<std::size_t>(doc)]; }
  [[nodiscard]] std::int64_t document_length(std::int64_t doc) const;

 private:
  std::filesystem::path dir_;
  std::vector<TokenShard> shards_;
  std::vector<std::int64_t> shard_starts_;  // first stream position of each shard
  std::vector<std::int64_t> doc_starts_;    // first stream position of each document
  std::int64_t total_tokens_ = 0;
  std::int64_t vocab_size_ = 0;
  std::string tokenizer_fingerprint_;
};

}  // namespace cpt::exec
