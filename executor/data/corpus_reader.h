#pragma once
// Documents from plain-text files, directories (recursively, in sorted order) and JSONL files
// (one document per line, from its "text" field). Streaming: one document in memory at a time.
// Bad documents are counted by reason and skipped with a warning naming the first few; they never
// stop the run and never pass silently.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cpt::exec {

struct CorpusOptions {
  // For directories: file name suffixes to take (e.g. ".py", ".txt"); empty = every regular file.
  std::vector<std::string> extensions;
  std::uint64_t max_document_bytes = 64ull << 20;  // larger documents are skipped as "too_large"
};

struct CorpusStats {
  std::int64_t files = 0;
  std::int64_t documents = 0;  // passed to the callback
  std::int64_t bytes = 0;      // of those documents
  // Reason -> count: "invalid_utf8", "binary" (contains NUL), "empty", "too_large",
  // "bad_json_line" (not an object with a string "text"), "unreadable".
  std::map<std::string, std::int64_t> skipped;
};

// Calls `on_document(text, origin)` for every good document under `sources`, in a deterministic
// order (sources in the given order; directory entries sorted). ConfigError when a source does
// not exist or a directory holds no matching file.
CorpusStats read_corpus(const std::vector<std::filesystem::path>& sources, const CorpusOptions& options,
                        const std::function<void(std::string_view text, const std::string& origin)>& on_document);

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace cpt::exec
