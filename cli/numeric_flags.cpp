#include "cli/numeric_flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

namespace cpt::cli {

namespace {

// Decimal digits with at most one point and an optional exponent: what a user types for a count
// or a size, and nothing strtod would also take (hexadecimal, "inf", "nan", leading spaces).
bool is_decimal(const std::string& text) {
  bool digits = false, point = false, exponent = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      digits = true;
    } else if (c == '.' && !point && !exponent) {
      point = true;
    } else if ((c == 'e' || c == 'E') && digits && !exponent) {
      exponent = true;
      digits = false;
      if (i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-')) ++i;
    } else {
      return false;
    }
  }
  return digits;
}

std::string check_positive(std::string& input) {
  if (is_decimal(input)) {
    const double value = std::strtod(input.c_str(), nullptr);
    if (std::isfinite(value) && value > 0) return {};
  }
  return "expected a positive number, got '" + input + "'";
}

}  // namespace

std::string parse_error_message(const CLI::ParseError& error) {
  const std::string text = error.what();
  // CLI11's "--gpus: At Most 1 required but received 2" for a flag given twice.
  constexpr std::string_view kRepeated = ": At Most 1 required but received ";
  if (const auto at = text.find(kRepeated); at != std::string::npos) {
    return text.substr(0, at) + ": expected once, given " + text.substr(at + kRepeated.size()) + " times";
  }
  constexpr std::string_view kConversion = "Could not convert: ";
  const auto equals = text.find(" = ");
  if (!text.starts_with(kConversion) || equals == std::string::npos) return text;
  const auto flag = text.substr(kConversion.size(), equals - kConversion.size());
  return flag + ": expected a whole number in digits within the option's range, got '" + text.substr(equals + 3) + "'";
}

CLI::Validator whole_number_in(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  auto check = [lo, hi, range](std::string& input) -> std::string {
    const bool digits =
        !input.empty() && input.size() <= 18 && input.find_first_not_of("0123456789") == std::string::npos;
    if (digits) {
      const long long value = std::stoll(input);
      if (value >= lo && value <= hi) return {};
    }
    return "expected a whole number in " + range + ", got '" + input + "'";
  };
  return CLI::Validator(check, "INT in " + range, "whole number in " + range);
}

const CLI::Validator& positive_number() {
  static const CLI::Validator validator(check_positive, "NUMBER > 0", "positive number");
  return validator;
}

}  // namespace cpt::cli
