#pragma once
// Strict JSON input. Every error is a ConfigError of the form
//
//   <origin>: <$.json.path>: expected <what>, got <what was there>
//
// where <origin> is the file name (or "--flag" / "built-in profile x.json" for other sources).
//
// Usage: read each key of an object through a JsonObjectReader, then call finish(), which rejects
// every key that nobody asked for (with a "did you mean" hint), so a misspelt key is an error and
// never a silently ignored default.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace cpt::core {

using Json = nlohmann::ordered_json;

// A parsed document that remembers where it came from.
class JsonDocument {
 public:
  JsonDocument(std::unique_ptr<Json> root, std::string origin);
  JsonDocument(JsonDocument&&) noexcept;
  JsonDocument& operator=(JsonDocument&&) noexcept;
  ~JsonDocument();
  [[nodiscard]] const Json& root() const { return *root_; }
  [[nodiscard]] const std::string& origin() const { return origin_; }

 private:
  std::unique_ptr<Json> root_;
  std::string origin_;
};

// Arrays and objects nested deeper than this are refused: no file cpt reads nests beyond a handful
// of levels, and the recursive walks over a value (printing it, describing it in an error) must
// stay far from the end of the stack.
inline constexpr int kMaxJsonDepth = 256;

// ConfigError if the file is missing or unreadable, or not valid JSON (with line and column), or
// nested deeper than kMaxJsonDepth.
JsonDocument parse_json_file(const std::filesystem::path& path);
JsonDocument parse_json_text(std::string_view text, std::string origin);

// One line describing a JSON value for an error message: `string "abc"`, `-3`, `null`, `[1,2]`,
// `an array` (when long), `an object`.
std::string describe_json(const Json& value);

class JsonObjectReader {
 public:
  // REQUIRES: `value` outlives the reader. ConfigError if `value` is not an object.
  JsonObjectReader(const Json& value, std::string origin, std::string path = "$");
  static JsonObjectReader root_of(const JsonDocument& doc);

  [[nodiscard]] bool has(std::string_view key) const;
  // Marks `key` as understood without reading it (for keys consumed elsewhere).
  void accept(std::string_view key);

  // Required values. Range checks are inclusive.
  std::int64_t integer(std::string_view key, std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX);
  double number(std::string_view key, double min = -1e308, double max = 1e308);
  double positive_number(std::string_view key);  // > 0
  bool boolean(std::string_view key);
  std::string string(std::string_view key);
  std::string one_of(std::string_view key, const std::vector<std::string>& choices);
  std::vector<std::int64_t> integer_array(std::string_view key, std::int64_t min = INT64_MIN);
  std::vector<std::string> string_array(std::string_view key);
  JsonObjectReader object(std::string_view key);
  const Json& raw(std::string_view key);  // any type; caller checks

  // Optional values: std::nullopt when the key is absent (present-but-null is an error).
  std::optional<std::int64_t> optional_integer(std::string_view key, std::int64_t min = INT64_MIN,
                                               std::int64_t max = INT64_MAX);
  std::optional<double> optional_positive_number(std::string_view key);
  std::optional<bool> optional_boolean(std::string_view key);
  std::optional<std::string> optional_string(std::string_view key);

  // Exactly one of `stem + "_" + suffix` for suffix in `unit_suffixes` must be present (e.g.
  // "hbm_capacity" with {"GiB", "GB"}). Returns (suffix, value > 0); ConfigError if none or several.
  std::pair<std::string, double> positive_number_with_unit(std::string_view stem,
                                                           const std::vector<std::string>& unit_suffixes);

  // ConfigError naming every key that was not read or accepted.
  void finish() const;

  // Throws ConfigError "<origin>: <path>.<key>: expected <expected>, got <got>".
  [[noreturn]] void fail(std::string_view key, std::string_view expected, std::string_view got) const;
  [[nodiscard]] std::string path_of(std::string_view key) const;
  [[nodiscard]] const std::string& origin() const { return origin_; }
  [[nodiscard]] const std::string& path() const { return path_; }  // "$", "$.model", ...

 private:
  const Json& field(std::string_view key);

  const Json* value_;
  std::string origin_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// Levenshtein distance; used for "did you mean" hints on unknown keys and names.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `name` if it is close enough to be a plausible typo, else "".
std::string closest_match(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace cpt::core
