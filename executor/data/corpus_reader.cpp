#include "executor/data/corpus_reader.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n = 0;
    std::uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

namespace {

class Reader {
 public:
  Reader(const CorpusOptions& o, const std::function<void(std::string_view, const std::string&)>& f)
      : options_(o), on_document_(f) {}

  void source(const fs::path& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        if (it->is_regular_file(ec) && matches(it->path())) files.push_back(it->path());
      }
      if (files.empty()) {
        throw core::ConfigError(str_cat(path.string(), ": no file", options_.extensions.empty() ? "" : " ending in ",
                                        core::join(options_.extensions, " or "), " in this directory"));
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) file(f);
    } else if (fs::is_regular_file(path, ec)) {
      file(path);
    } else {
      throw core::ConfigError(str_cat(path.string(), ": no such file or directory"));
    }
  }

  CorpusStats stats;

 private:
  bool matches(const fs::path& p) const {
    if (options_.extensions.empty()) return true;
    const auto name = p.filename().string();
    return std::any_of(options_.extensions.begin(), options_.extensions.end(),
                       [&](const std::string& e) { return name.ends_with(e); });
  }

  void skip(const std::string& reason, const std::string& origin) {
    if (++stats.skipped[reason] <= 3) core::warn("data: skipped ", origin, ": ", reason, stats.skipped[reason] == 3 ? " (further skips of this kind are only counted)" : "");
  }

  void document(std::string_view text, const std::string& origin) {
    if (text.empty()) return skip("empty", origin);
    if (text.size() > options_.max_document_bytes) return skip("too_large", origin);
    if (text.find('\0') != std::string_view::npos) return skip("binary", origin);
    if (!is_valid_utf8(text)) return skip("invalid_utf8", origin);
    ++stats.documents;
    stats.bytes += static_cast<std::int64_t>(text.size());
    on_document_(text, origin);
  }

  void file(const fs::path& path) {
    ++stats.files;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return skip("unreadable", path.string());
    const bool jsonl = path.extension() == ".jsonl";
    if (!jsonl && size > options_.max_document_bytes) return skip("too_large", path.string());
    std::ifstream in(path, std::ios::binary);
    if (!in) return skip("unreadable", path.string());
    if (!jsonl) {
      std::string text(size, '\0');
      in.read(text.data(), static_cast<std::streamsize>(size));
      if (static_cast<std::uint64_t>(in.gcount()) != size) return skip("unreadable", path.string());
      return document(text, path.string());
    }
    std::string line;
    std::int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      const auto origin = str_cat(path.string(), ":", line_no);
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        skip("bad_json_line", origin);
        continue;
      }
      document(j["text"].get_ref<const std::string&>(), origin);
    }
  }

  const CorpusOptions& options_;
  const std::function<void(std::string_view, const std::string&)>& on_document_;
};

}  // namespace

CorpusStats read_corpus(const std::vector<fs::path>& sources, const CorpusOptions& options,
                        const std::function<void(std::string_view text, const std::string& origin)>& on_document) {
  Reader reader(options, on_document);
  for (const auto& s : sources) reader.source(s);
  return reader.stats;
}

}  // namespace cpt::exec
