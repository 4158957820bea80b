#include "spec/gpu_for_device_name.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

namespace cpt::spec {

namespace {

// Lower-case words; a memory size ("80gb", "80g") as "80g".
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  auto flush = [&] {
    if (w.empty()) return;
    const bool memory = w.size() >= 2 && std::isdigit(static_cast<unsigned char>(w.front())) != 0 &&
                        (w.ends_with("gb") || w.ends_with("g")) &&
                        std::all_of(w.begin(), w.end() - (w.ends_with("gb") ? 2 : 1),
                                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
    if (memory) w = w.substr(0, w.size() - (w.ends_with("gb") ? 2 : 1)) + "g";
    out.push_back(w);
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

bool is_memory_word(const std::string& w) { return w.size() >= 2 && w.back() == 'g' && std::isdigit(static_cast<unsigned char>(w.front())) != 0; }

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
