#pragma once
// Text from a plan (a model's name comes from the user's model JSON) in the files cpt plan writes
// for other programs, so that no name can end a string or a comment there and run as code.
#include <string>
#include <string_view>

namespace cpt::planner {

// `text` as a double-quoted string literal of JSON, which TOML's basic strings and Python also read
// as the same text (\" \\ \n \uXXXX escapes).
[[nodiscard]] std::string string_literal(std::string_view text);

// `text` for a comment line: control characters (a newline would end the comment) as '?'.
[[nodiscard]] std::string one_line(std::string_view text);

// `text` as a word for a shell or scheduler: letters, digits, '.', '_' and '-' kept, the rest '_'.
[[nodiscard]] std::string word(std::string_view text);

}  // namespace cpt::planner
