#pragma once
// A check for flags that take a positive number, in place of CLI11's PositiveNumber (whose message
// prints its range as 0 to the largest double, in full): a failure reads
// "--ep: expected a positive number, got '0'", one line naming the flag (CLI11 prefixes it).
#include <CLI/CLI.hpp>

namespace cpt::cli {

// Accepts a finite decimal number greater than zero (an integer option then converts it, and
// refuses a fraction itself); refuses zero, negatives, words, hexadecimal, NaN and infinity.
const CLI::Validator& positive_number();

// Accepts a whole number in digits in [lo, hi]; a failure reads
// "--master-port: expected a whole number in 1..65535, got '70000'".
CLI::Validator whole_number_in(long long lo, long long hi);

// The one-line message of a parse error: CLI11's own, except that a value an option's type cannot
// hold ("Could not convert: --etp = 99999999999": too large, a fraction, or an exponent) names the
// flag, what it expects and what it got.
std::string parse_error_message(const CLI::ParseError& error);

}  // namespace cpt::cli
