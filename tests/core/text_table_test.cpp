#include "core/text_table.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace cpt::core {
namespace {

TEST(TextTable, AlignsColumns) {
  TextTable t({"name", "params"}, {Align::kLeft, Align::kRight});
  t.add_row({"llama3-8b", "8.03 B"});
  t.add_row({"tiny", "52 K"});
  EXPECT_EQ(t.render(),
            "name       params\n"
            "---------  ------\n"
            "llama3-8b  8.03 B\n"
            "tiny         52 K\n");
}

TEST(TextTable, RowWidthMismatchIsABug) {
  TextTable t({"a", "b"});
  EXPECT_THROW(t.add_row({"only one"}), InternalError);
}

}  // namespace
}  // namespace cpt::core
