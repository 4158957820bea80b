#include "core/text_table.h"

#include <algorithm>

#include "core/check.h"

namespace cpt::core {

TextTable::TextTable(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  align_.resize(header_.size(), Align::kLeft);
}

void TextTable::add_row(std::vector<std::string> row) {
  CPT_CHECK(row.size() == header_.size(), "row has ", row.size(), " cells, table has ", header_.size(),
            " columns");
  rows_.push_back(std::move(row));
}

std::string TextTable::render() const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) line += "  ";
      line += align_[c] == Align::kRight ? pad + cells[c] : cells[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header_);
  std::vector<std::string> rule;
  for (auto w : width) rule.emplace_back(w, '-');
  emit(rule);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace cpt::core
