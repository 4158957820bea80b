#include "core/output_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace cpt::core {
namespace {

namespace fs = std::filesystem;

class OutputDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cpt-output-dir-test-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "file") << "x";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// Missing parents are made; an existing directory is left as it is.
TEST_F(OutputDirectory, MakesMissingParentsAndKeepsAnExistingDirectory) {
  create_output_directory(root_ / "a" / "b" / "c");
  EXPECT_TRUE(fs::is_directory(root_ / "a" / "b" / "c"));
  std::ofstream(root_ / "a" / "b" / "c" / "kept") << "y";
  create_output_directory(root_ / "a" / "b" / "c");
  EXPECT_TRUE(fs::exists(root_ / "a" / "b" / "c" / "kept"));
  create_parent_directory(root_ / "d" / "log.jsonl");
  EXPECT_TRUE(fs::is_directory(root_ / "d"));
  EXPECT_NO_THROW(create_parent_directory("bare-name.json"));
}

// A file in the way is the user's input: one line naming it (ConfigError, exit 2).
TEST_F(OutputDirectory, AFileInThePathIsNamedInOneLine) {
  for (const auto& [dir, message] :
       {std::pair{root_ / "file", (root_ / "file").string() + ": is a file, not a directory"},
        std::pair{root_ / "file" / "sub" / "out", (root_ / "file" / "sub" / "out").string() + ": " +
                                                      (root_ / "file").string() + " is a file, not a directory"}}) {
    try {
      create_output_directory(dir);
      FAIL() << dir;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  // A directory to write a file in: the error names the file to be written.
  try {
    create_parent_directory(root_ / "file" / "hf");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              (root_ / "file" / "hf").string() + ": " + (root_ / "file").string() + " is a file, not a directory");
  }
}

// A dangling symbolic link in the path is the user's too: named with its target, not "File exists".
TEST_F(OutputDirectory, ADanglingLinkInThePathIsNamedWithItsTarget) {
  fs::create_directory_symlink(root_ / "gone", root_ / "link");
  for (const auto& [dir, message] :
       {std::pair{root_ / "link", (root_ / "link").string() + ": is a symbolic link to " + (root_ / "gone").string() +
                                      ", which does not exist"},
        std::pair{root_ / "link" / "out", (root_ / "link" / "out").string() + ": " + (root_ / "link").string() +
                                              " is a symbolic link to " + (root_ / "gone").string() +
                                              ", which does not exist"}}) {
    try {
      create_output_directory(dir);
      FAIL() << dir;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

// Two links to each other: named as a loop.
TEST_F(OutputDirectory, ALoopOfLinksIsNamedAsOne) {
  fs::create_directory_symlink(root_ / "there", root_ / "here");
  fs::create_directory_symlink(root_ / "here", root_ / "there");
  try {
    create_output_directory(root_ / "here" / "out");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), (root_ / "here" / "out").string() + ": " + (root_ / "here").string() +
                                         " is a symbolic link to " + (root_ / "there").string() + ", a loop of links");
  }
}

// An output file that is a directory is refused before anything is computed into it.
TEST_F(OutputDirectory, AnOutputFileThatIsADirectoryIsRefused) {
  fs::create_directory(root_ / "log.jsonl");
  try {
    prepare_output_file(root_ / "log.jsonl");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), (root_ / "log.jsonl").string() + ": expected a file, got a directory");
  }
  prepare_output_file(root_ / "new" / "trace.json");
  EXPECT_TRUE(fs::is_directory(root_ / "new"));
}

}  // namespace
}  // namespace cpt::core
