#pragma once
// The names an enum is serialized as (plan.json, flags), each written once: a table of
// (value, name) pairs and the three lookups every such enum needs.
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cpt::core {

template <class Enum, std::size_t N>
struct EnumNames {
  std::array<std::pair<Enum, std::string_view>, N> entries;

  // `value`'s name; "?" for a value outside the table.
  [[nodiscard]] std::string name_of(Enum value) const {
    for (const auto& [known, name] : entries) {
      if (known == value) return std::string(name);
    }
    return "?";
  }
  // Every name, in the table's order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : entries) out.emplace_back(entry.second);
    return out;
  }
  // name_of's inverse; nullopt for any other string.
  [[nodiscard]] std::optional<Enum> value_of(std::string_view name) const {
    for (const auto& [value, known] : entries) {
      if (known == name) return value;
    }
    return std::nullopt;
  }
};

}  // namespace cpt::core
