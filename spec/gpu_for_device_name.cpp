#include "spec/gpu_for_device_name.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>
#include <vector>

namespace cpt::spec {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

// A memory size: digits then "g" (after words() normalised "80gb" to "80g").
bool is_memory_word(const std::string& w) { return w.size() >= 2 && w.back() == 'g' && all_digits(std::string_view(w).substr(0, w.size() - 1)); }

// Lower-case words split at ' ', '-' and '_'; a memory size ("80GB", "80G") as "80g".
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  auto flush = [&] {
    if (w.ends_with("gb") && all_digits(std::string_view(w).substr(0, w.size() - 2))) w.pop_back();
    if (!w.empty()) out.push_back(w);
    w.clear();
  };
  for (const char ch : s) {
    if (ch == ' ' || ch == '-' || ch == '_') {
      flush();
    } else {
      w.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
    }
  }
  flush();
  return out;
}

}  // namespace

std::optional<std::string> gpu_for_device_name(const std::string& device_name, const HardwareCatalog& catalog) {
  const auto device_words = words(device_name);
  const std::set<std::string> device(device_words.begin(), device_words.end());
  std::optional<std::string> best;
  std::size_t best_words = 0;
  for (const auto& [name, gpu] : catalog.gpus()) {
    const auto own_words = words(name);
    const std::set<std::string> own(own_words.begin(), own_words.end());
    bool compatible = true;
    for (const char* form : {"pcie", "nvl"}) {
      if (device.contains(form) != own.contains(form)) compatible = false;
    }
    for (const auto& w : device) {
      if (!is_memory_word(w)) continue;
      for (const auto& o : own) {
        if (is_memory_word(o) && o != w) compatible = false;
      }
    }
    if (!compatible) continue;
    std::vector<std::string> names = gpu.aliases;
    names.push_back(name);
    for (const auto& n : names) {
      const auto key = words(n);
      const bool all_found = std::all_of(key.begin(), key.end(), [&](const std::string& w) { return device.contains(w); });
      if (all_found && key.size() > best_words) {
        best = name;
        best_words = key.size();
      }
    }
  }
  return best;
}

}  // namespace cpt::spec
