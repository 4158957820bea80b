#include "executor/data/token_shards.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/check.h"
#include "core/confined_path.h"
#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kVersion = 1;

std::size_t token_bytes(TokenDtype d) { return d == TokenDtype::kUInt16 ? 2 : 4; }

template <class T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <class T>
T get(std::ifstream& in, const std::string& where) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof(T))) throw core::ConfigError(str_cat(where, ": truncated index"));
  return v;
}

}  // namespace

TokenDtype token_dtype_for_vocab(std::int64_t vocab) {
  return vocab <= 65536 ? TokenDtype::kUInt16 : TokenDtype::kInt32;
}

TokenShardWriter::TokenShardWriter(fs::path prefix, TokenDtype dtype) : prefix_(std::move(prefix)), dtype_(dtype) {
  const auto bin = prefix_.string() + ".bin";
  bin_ = std::fopen(bin.c_str(), "wb");
  if (bin_ == nullptr) throw core::RuntimeError(str_cat(bin, ": cannot create: ", std::strerror(errno)));
}

TokenShardWriter::~TokenShardWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
}

void TokenShardWriter::add_document(std::span<const std::int32_t> tokens) {
  CPT_CHECK(!finished_);
  if (dtype_ == TokenDtype::kUInt16) {
    std::vector<std::uint16_t> narrow(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) narrow[i] = static_cast<std::uint16_t>(tokens[i]);
    std::fwrite(narrow.data(), 2, narrow.size(), bin_);
  } else {
    std::fwrite(tokens.data(), 4, tokens.size(), bin_);
  }
  if (std::ferror(bin_)) throw core::RuntimeError(str_cat(prefix_.string(), ".bin: write failed"));
  lengths_.push_back(static_cast<std::int32_t>(tokens.size()));
  tokens_ += static_cast<std::int64_t>(tokens.size());
}

void TokenShardWriter::finish() {
  if (std::fflush(bin_) != 0 || ::fsync(::fileno(bin_)) != 0 || std::fclose(bin_) != 0) {
    bin_ = nullptr;
    throw core::RuntimeError(str_cat(prefix_.string(), ".bin: flush failed: ", std::strerror(errno)));
  }
  bin_ = nullptr;
  const auto idx = prefix_.string() + ".idx";
  {
    std::ofstream out(idx, std::ios::binary | std::ios::trunc);
    out.write(kMagic, sizeof kMagic);
    put(out, kVersion);
    put(out, static_cast<std::uint8_t>(dtype_));
    const auto n = static_cast<std::uint64_t>(lengths_.size());
    put(out, n);
    put(out, n + 1);
    out.write(reinterpret_cast<const char*>(lengths_.data()), static_cast<std::streamsize>(n * 4));
    std::int64_t offset = 0;
    for (const auto len : lengths_) {
      put(out, offset);
      offset += static_cast<std::int64_t>(len) * static_cast<std::int64_t>(token_bytes(dtype_));
    }
    for (std::uint64_t i = 0; i <= n; ++i) put(out, static_cast<std::int64_t>(i));
    if (!out.flush()) throw core::RuntimeError(str_cat(idx, ": write failed"));
  }
  finished_ = true;
}

TokenShard TokenShard::open(const fs::path& prefix) {
  const auto idx = prefix.string() + ".idx";
  const auto bin = prefix.string() + ".bin";
  std::ifstream in(idx, std::ios::binary);
  if (!in) throw core::ConfigError(str_cat(idx, ": missing (a shard needs its .idx and .bin)"));
  char magic[9];
  if (!in.read(magic, 9) || std::memcmp(magic, kMagic, 9) != 0) {
    throw core::ConfigError(str_cat(idx, ": not a Megatron indexed-dataset index (bad magic)"));
  }
  if (const auto v = get<std::uint64_t>(in, idx); v != kVersion) {
    throw core::ConfigError(str_cat(idx, ": index version ", v, ", expected 1"));
  }
  TokenShard s;
  const auto code = get<std::uint8_t>(in, idx);
  if (code != static_cast<std::uint8_t>(TokenDtype::kUInt16) && code != static_cast<std::uint8_t>(TokenDtype::kInt32)) {
    throw core::ConfigError(str_cat(idx, ": token dtype code ", int{code}, ", expected 8 (uint16) or 4 (int32)"));
  }
  s.dtype_ = static_cast<TokenDtype>(code);
  const auto sequences = get<std::uint64_t>(in, idx);
  (void)get<std::uint64_t>(in, idx);  // document count: every sequence is read as one document
  // The lengths follow the 34-byte header: a count the file cannot hold is refused before anything
  // is allocated for it.
  constexpr std::uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
  const auto idx_bytes = static_cast<std::uint64_t>(fs::file_size(idx));
  if (sequences > (idx_bytes - kHeaderBytes) / 4) {
    throw core::ConfigError(str_cat(idx, ": claims ", sequences, " sequences, but its ", idx_bytes,
                                    " bytes hold at most ", (idx_bytes - kHeaderBytes) / 4));
  }
  s.lengths_.resize(sequences);
  if (!in.read(reinterpret_cast<char*>(s.lengths_.data()), static_cast<std::streamsize>(sequences * 4))) {
    throw core::ConfigError(str_cat(idx, ": truncated index"));
  }
  for (const auto len : s.lengths_) {
    if (len < 0) throw core::ConfigError(str_cat(idx, ": negative sequence length ", len));
    s.tokens_ += len;
  }
  s.bin_ = MappedFile::open(bin);
  const auto expected = static_cast<std::size_t>(s.tokens_) * token_bytes(s.dtype_);
  if (s.bin_->size() != expected) {
    throw core::ConfigError(str_cat(bin, ": ", s.bin_->size(), " bytes, but its index describes ", s.tokens_, " tokens (",
                                    expected, " bytes): truncated or not the shard of this index"));
  }
  s.scan_token_range(bin);
  return s;
}

void TokenShard::scan_token_range(const std::string& bin) {
  const auto* base = bin_->data();
  const auto count = static_cast<std::size_t>(tokens_);
  if (dtype_ == TokenDtype::kUInt16) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(base);
    std::uint16_t largest = 0;
    for (std::size_t i = 0; i < count; ++i) largest = std::max(largest, p[i]);
    max_token_ = largest;
    return;
  }
  const auto* p = reinterpret_cast<const std::int32_t*>(base);
  std::int32_t largest = 0, smallest = 0;
  for (std::size_t i = 0; i < count; ++i) {
    largest = std::max(largest, p[i]);
    smallest = std::min(smallest, p[i]);
  }
  if (smallest < 0) throw core::ConfigError(str_cat(bin, ": negative token id ", smallest));
  max_token_ = largest;
}

void TokenShard::read(std::int64_t first, std::span<std::int64_t> out) const {
  CPT_CHECK(first >= 0 && first + static_cast<std::int64_t>(out.size()) <= tokens_);
  const auto* base = bin_->data();
  if (dtype_ == TokenDtype::kUInt16) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(base) + first;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    const auto* p = reinterpret_cast<const std::int32_t*>(base) + first;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
}

TokenDataset TokenDataset::open(const fs::path& dir) {
  const auto manifest_path = dir / "manifest.json";
  if (!fs::is_directory(dir)) throw core::ConfigError(str_cat(dir.string(), ": no such dataset directory"));
  const auto doc = core::parse_json_file(manifest_path);
  auto r = core::JsonObjectReader::root_of(doc);
  const auto format = r.string("format");
  if (format != "cpt-tokens-v1") r.fail("format", "\"cpt-tokens-v1\"", str_cat("\"", format, "\""));
  TokenDataset d;
  d.dir_ = dir;
  d.vocab_size_ = r.integer("vocab_size", 1);
  d.tokenizer_fingerprint_ = r.string("tokenizer_fingerprint");
  const auto shard_names = r.string_array("shards");
  const auto expected_tokens = r.integer("tokens", 0);
  for (const char* k : {"documents", "token_dtype", "tokenizer", "sources", "skipped", "eos_appended"}) r.accept(k);
  r.finish();
  if (shard_names.empty()) r.fail("shards", "at least one shard", "[]");
  for (const auto& name : shard_names) {
    d.shard_starts_.push_back(d.total_tokens_);
    const auto prefix = core::path_inside(dir, name, manifest_path.string(), "$.shards[]");
    auto shard = TokenShard::open(prefix);
    if (shard.max_token() >= d.vocab_size_) {
      throw core::ConfigError(str_cat(prefix.string(), ".bin: token id ", shard.max_token(), " is outside the ",
                                      d.vocab_size_, "-token vocabulary of ", manifest_path.string()));
    }
    for (std::int64_t i = 0; i < shard.documents(); ++i) {
      d.doc_starts_.push_back(d.total_tokens_);
      d.total_tokens_ += shard.document_length(i);
    }
    d.shards_.push_back(std::move(shard));
  }
  if (d.total_tokens_ != expected_tokens) {
    throw core::ConfigError(str_cat(manifest_path.string(), ": $.tokens: expected the ", d.total_tokens_,
                                    " tokens its shards hold, got ", expected_tokens));
  }
  return d;
}

void TokenDataset::read(std::int64_t first, std::span<std::int64_t> out) const {
  CPT_CHECK(first >= 0 && first + static_cast<std::int64_t>(out.size()) <= total_tokens_);
  auto s = static_cast<std::size_t>(std::upper_bound(shard_starts_.begin(), shard_starts_.end(), first) -
                                    shard_starts_.begin() - 1);
  std::size_t done = 0;
  while (done < out.size()) {
    const auto local = first + static_cast<std::int64_t>(done) - shard_starts_[s];
    const auto n = std::min<std::int64_t>(shards_[s].tokens() - local, static_cast<std::int64_t>(out.size() - done));
    shards_[s].read(local, out.subspan(done, static_cast<std::size_t>(n)));
    done += static_cast<std::size_t>(n);
    ++s;
  }
}

std::int64_t TokenDataset::document_at(std::int64_t pos) const {
  return std::upper_bound(doc_starts_.begin(), doc_starts_.end(), pos) - doc_starts_.begin() - 1;
}

std::int64_t TokenDataset::document_length(std::int64_t doc) const {
  const auto next = doc + 1 < documents() ? doc_starts_[static_cast<std::size_t>(doc + 1)] : total_tokens_;
  return next - doc_starts_[static_cast<std::size_t>(doc)];
}

}  // namespace cpt::exec
