#pragma once
// The text `cpt run`'s demonstration trains on, found on the machine itself (cli/cpt/cmd_run.cpp).
#include <string>
#include <vector>

namespace cpt::cli {

// Text a fresh machine has after scripts/setup: English in the copyright files of Debian packages,
// Python in the standard library. Training and held-out sets are disjoint package ranges.
struct LocalText {
  std::vector<std::string> english_train, english_heldout, code_train, code_heldout;
};

// The files and directories of each set. Throws core::RuntimeError naming what is missing (run
// scripts/setup) when a set would be empty.
LocalText find_local_text();

}  // namespace cpt::cli
