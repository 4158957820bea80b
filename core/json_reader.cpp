#include "core/json_reader.h"

#include <cmath>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::core {

JsonDocument::JsonDocument(std::unique_ptr<Json> root, std::string origin)
    : root_(std::move(root)), origin_(std::move(origin)) {}
JsonDocument::JsonDocument(JsonDocument&&) noexcept = default;
JsonDocument& JsonDocument::operator=(JsonDocument&&) noexcept = default;
JsonDocument::~JsonDocument() = default;

JsonDocument parse_json_text(std::string_view text, std::string origin) {
  // Refused while parsing, before anything recurses over the value (dump, describe_json): nesting
  // too deep, and a key twice in one object (nlohmann keeps the last; which one was meant?).
  std::vector<std::unordered_set<std::string>> keys_of_open_objects;
  const auto check = [&origin, &keys_of_open_objects](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxJsonDepth) {
      throw ConfigError(str_cat(origin, ": invalid JSON: nested deeper than ", kMaxJsonDepth, " levels"));
    }
    if (event == Json::parse_event_t::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      keys_of_open_objects.pop_back();
    } else if (event == Json::parse_event_t::key &&
               !keys_of_open_objects.back().insert(parsed.get<std::string>()).second) {
      throw ConfigError(str_cat(origin, ": invalid JSON: key \"", parsed.get<std::string>(), "\" twice in one object"));
    }
    return true;
  };
  try {
    auto root = std::make_unique<Json>(Json::parse(text.begin(), text.end(), check));
    return JsonDocument(std::move(root), std::move(origin));
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number out of range ("[json.exception.out_of_range.406] number overflow
    // parsing '1e9999'"): nlohmann's message after its tag.
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw ConfigError(str_cat(origin, ": invalid JSON: ", pos == std::string::npos ? what : what.substr(pos + 2)));
  }
}

JsonDocument parse_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw ConfigError(str_cat(path.string(), ": file not found"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(str_cat(path.string(), ": expected a JSON file, got a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(str_cat(path.string(), ": cannot be opened for reading"));
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_json_text(buf.str(), path.string());
}

std::string describe_json(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array: {
      const auto text = value.dump();  // short arrays are shown: [0.1,0.2]
      return text.size() <= 40 ? text : std::string("an array");
    }
    case Json::value_t::string:
      return str_cat("string ", value.dump());
    case Json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    default:
      return value.dump();  // numbers
  }
}

JsonObjectReader::JsonObjectReader(const Json& value, std::string origin, std::string path)
    : value_(&value), origin_(std::move(origin)), path_(std::move(path)) {
  if (!value.is_object()) {
    throw ConfigError(str_cat(origin_, ": ", path_, ": expected an object, got ", describe_json(value)));
  }
}

JsonObjectReader JsonObjectReader::root_of(const JsonDocument& doc) {
  return JsonObjectReader(doc.root(), doc.origin(), "$");
}

std::string JsonObjectReader::path_of(std::string_view key) const {
  return str_cat(path_, ".", key);
}

void JsonObjectReader::fail(std::string_view key, std::string_view expected, std::string_view got) const {
  throw ConfigError(str_cat(origin_, ": ", path_of(key), ": expected ", expected, ", got ", got));
}

bool JsonObjectReader::has(std::string_view key) const {
  return value_->contains(key);
}

void JsonObjectReader::accept(std::string_view key) {
  seen_.emplace(key);
}

const Json& JsonObjectReader::field(std::string_view key) {
  seen_.emplace(key);
  const auto it = value_->find(key);
  if (it == value_->end()) fail(key, "a value (required key is missing)", "nothing");
  return *it;
}

const Json& JsonObjectReader::raw(std::string_view key) {
  return field(key);
}

std::int64_t JsonObjectReader::integer(std::string_view key, std::int64_t min, std::int64_t max) {
  const Json& v = field(key);
  // A float counts when it is whole and inside int64's range (converting one outside it is
  // undefined): [-2^63, 2^63).
  const auto whole_int64 = [](double d) {
    return d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == std::trunc(d);
  };
  const bool is_int = v.is_number_integer() || (v.is_number_float() && whole_int64(v.get<double>()));
  auto range = [&] {
    if (min != INT64_MIN && max != INT64_MAX) return str_cat("an integer in [", min, ", ", max, "]");
    if (min != INT64_MIN) return str_cat("an integer >= ", min);
    if (max != INT64_MAX) return str_cat("an integer <= ", max);
    return std::string("an integer");
  };
  if (!is_int) fail(key, range(), describe_json(v));
  const auto x = v.is_number_float() ? static_cast<std::int64_t>(v.get<double>()) : v.get<std::int64_t>();
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    fail(key, range(), describe_json(v));
  }
  if (x < min || x > max) fail(key, range(), describe_json(v));
  return x;
}

double JsonObjectReader::number(std::string_view key, double min, double max) {
  const Json& v = field(key);
  if (!v.is_number()) fail(key, "a number", describe_json(v));
  const double x = v.get<double>();
  if (x < min || x > max) fail(key, str_cat("a number in [", min, ", ", max, "]"), describe_json(v));
  return x;
}

double JsonObjectReader::positive_number(std::string_view key) {
  const Json& v = field(key);
  if (!v.is_number() || v.get<double>() <= 0.0) fail(key, "a number > 0", describe_json(v));
  return v.get<double>();
}

bool JsonObjectReader::boolean(std::string_view key) {
  const Json& v = field(key);
  if (!v.is_boolean()) fail(key, "true or false", describe_json(v));
  return v.get<bool>();
}

std::string JsonObjectReader::string(std::string_view key) {
  const Json& v = field(key);
  if (!v.is_string()) fail(key, "a string", describe_json(v));
  return v.get<std::string>();
}

std::string JsonObjectReader::one_of(std::string_view key, const std::vector<std::string>& choices) {
  const Json& v = field(key);
  const std::string list = join(choices, "|");
  if (!v.is_string()) fail(key, str_cat("one of ", list), describe_json(v));
  auto s = v.get<std::string>();
  if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
    fail(key, str_cat("one of ", list), describe_json(v));
  }
  return s;
}

std::vector<std::int64_t> JsonObjectReader::integer_array(std::string_view key, std::int64_t min) {
  const Json& v = field(key);
  const auto expected =
      min == INT64_MIN ? std::string("an array of integers") : str_cat("an array of integers >= ", min);
  if (!v.is_array()) fail(key, expected, describe_json(v));
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (!e.is_number_integer() || e.get<std::int64_t>() < min) {
      fail(str_cat(key, "[", i, "]"), expected.substr(std::string("an array of ").size()), describe_json(e));
    }
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::vector<std::string> JsonObjectReader::string_array(std::string_view key) {
  const Json& v = field(key);
  if (!v.is_array()) fail(key, "an array of strings", describe_json(v));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail(str_cat(key, "[", i, "]"), "a string", describe_json(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

JsonObjectReader JsonObjectReader::object(std::string_view key) {
  const Json& v = field(key);
  if (!v.is_object()) fail(key, "an object", describe_json(v));
  return JsonObjectReader(v, origin_, path_of(key));
}

std::optional<std::int64_t> JsonObjectReader::optional_integer(std::string_view key, std::int64_t min,
                                                               std::int64_t max) {
  seen_.emplace(key);  // a known key even when absent (for "did you mean" hints)
  if (!has(key)) return std::nullopt;
  return integer(key, min, max);
}

std::optional<double> JsonObjectReader::optional_positive_number(std::string_view key) {
  seen_.emplace(key);  // a known key even when absent (for "did you mean" hints)
  if (!has(key)) return std::nullopt;
  return positive_number(key);
}

std::optional<bool> JsonObjectReader::optional_boolean(std::string_view key) {
  seen_.emplace(key);  // a known key even when absent (for "did you mean" hints)
  if (!has(key)) return std::nullopt;
  return boolean(key);
}

std::optional<std::string> JsonObjectReader::optional_string(std::string_view key) {
  seen_.emplace(key);  // a known key even when absent (for "did you mean" hints)
  if (!has(key)) return std::nullopt;
  return string(key);
}

std::pair<std::string, double> JsonObjectReader::positive_number_with_unit(
    std::string_view stem, const std::vector<std::string>& unit_suffixes) {
  std::vector<std::string> present;
  std::vector<std::string> keys;
  for (const auto& u : unit_suffixes) {
    keys.push_back(str_cat(stem, "_", u));
    if (has(keys.back())) present.push_back(u);
  }
  const std::string names = join(keys, " or ");
  if (present.size() != 1) {
    throw ConfigError(str_cat(origin_, ": ", path_of(stem), "_*: expected exactly one of ", names, ", got ",
                              present.empty() ? std::string("none") : str_cat(present.size(), " of them")));
  }
  const auto k = str_cat(stem, "_", present.front());
  return {present.front(), positive_number(k)};
}

void JsonObjectReader::finish() const {
  std::vector<std::string> known(seen_.begin(), seen_.end());
  for (const auto& [k, v] : value_->items()) {
    if (seen_.count(k) == 0) {
      const auto hint = closest_match(k, known);
      throw ConfigError(str_cat(origin_, ": ", path_of(k), ": unknown key",
                                hint.empty() ? std::string() : str_cat(" (did you mean \"", hint, "\"?)")));
    }
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const auto d = edit_distance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A plausible typo: at most a third of the name changed (and at least one edit allowed).
  const std::size_t limit = std::max<std::size_t>(1, name.size() / 3);
  return best_d <= limit ? best : std::string();
}

}  // namespace cpt::core
