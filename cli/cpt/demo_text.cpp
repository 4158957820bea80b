#include "cli/cpt/demo_text.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::cli {

using core::str_cat;
namespace fs = std::filesystem;

LocalText find_local_text() {
  LocalText t;
  std::vector<fs::path> docs;
  for (const auto& e : fs::directory_iterator("/usr/share/doc")) {
    if (fs::is_regular_file(e.path() / "copyright")) docs.push_back(e.path());
  }
  std::sort(docs.begin(), docs.end());
  for (const auto& d : docs) {
    const char c = d.filename().string().front();
    if (c >= 'd' && c <= 'h') t.english_train.push_back((d / "copyright").string());
    if (c >= 'p' && c <= 'z') t.english_heldout.push_back((d / "copyright").string());
  }
  fs::path python;
  for (const char* v : {"3.13", "3.12", "3.11", "3.10", "3.9"}) {
    if (fs::exists(str_cat("/usr/lib/python", v, "/json/decoder.py"))) {
      python = str_cat("/usr/lib/python", v);
      break;
    }
  }
  for (const char* p : {"asyncio", "email", "http", "logging", "multiprocessing", "unittest", "xml", "importlib",
                        "urllib", "concurrent"}) {
    if (!python.empty() && fs::is_directory(python / p)) t.code_train.push_back((python / p).string());
  }
  for (const char* p : {"json", "html", "wsgiref", "tomllib"}) {
    if (!python.empty() && fs::is_directory(python / p)) t.code_heldout.push_back((python / p).string());
  }
  if (t.english_train.empty() || t.english_heldout.empty() || t.code_train.empty() || t.code_heldout.empty()) {
    throw core::RuntimeError(
        "cpt run needs English text (/usr/share/doc/*/copyright) and Python source (/usr/lib/python3.X); "
        "run scripts/setup");
  }
  return t;
}

}  // namespace cpt::cli
