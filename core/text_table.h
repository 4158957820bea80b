#pragma once
// Aligned plain-text tables for CLI reports:
//
//   TextTable t({"name", "params"}, {Align::kLeft, Align::kRight});
//   t.add_row({"llama3-8b", "8.03 B"});
//   std::cout << t.render();
//
//   name       params
//   ---------  ------
//   llama3-8b  8.03 B

#include <string>
#include <vector>

namespace cpt::core {

enum class Align { kLeft, kRight };

class TextTable {
 public:
  // Columns without an explicit alignment are left-aligned.
  explicit TextTable(std::vector<std::string> header, std::vector<Align> align = {});
  // REQUIRES: row.size() == number of columns.
  void add_row(std::vector<std::string> row);
  [[nodiscard]] std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace cpt::core
