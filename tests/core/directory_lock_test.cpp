#include "core/directory_lock.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "core/error.h"

namespace cpt::core {
namespace {

// A second writer of the same directory is refused in one line naming the holder's pid; once the
// first lets go, the directory can be taken again.
TEST(DirectoryLock, ASecondWriterIsRefusedUntilTheFirstLetsGo) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpt-lock-test-" + std::to_string(::getpid())) / "out";
  std::optional<DirectoryLock> first = DirectoryLock::acquire(dir, "another cpt train");
  try {
    (void)DirectoryLock::acquire(dir, "another cpt train");
    FAIL() << "locked twice";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": another cpt train is writing it (pid " +
                                         std::to_string(::getpid()) +
                                         "); wait for it to end or choose another directory");
  }
  first.reset();
  EXPECT_NO_THROW((void)DirectoryLock::acquire(dir, "another cpt train"));
  std::filesystem::remove_all(dir.parent_path());
}

// A reader learns who writes a directory without taking it or creating anything: the holder's
// pid while it writes, nothing before and after.
TEST(DirectoryLock, HolderOfNamesTheWriterAndTakesNothing) {
  const auto dir = std::filesystem::temp_directory_path() / ("cpt-lock-holder-" + std::to_string(::getpid()));
  EXPECT_EQ(DirectoryLock::holder_of(dir), std::nullopt);
  EXPECT_FALSE(std::filesystem::exists(dir));
  std::optional<DirectoryLock> writer = DirectoryLock::acquire(dir, "another cpt train");
  EXPECT_EQ(DirectoryLock::holder_of(dir), std::to_string(::getpid()));
  writer.reset();
  EXPECT_EQ(DirectoryLock::holder_of(dir), std::nullopt);
  EXPECT_NO_THROW((void)DirectoryLock::acquire(dir, "another cpt train"));  // holder_of left it free
  // A lock path that is not a file (a FIFO would block an open for reading): nobody holds it.
  std::filesystem::remove(dir / ".cpt.lock");
  ASSERT_EQ(::mkfifo((dir / ".cpt.lock").c_str(), 0600), 0);
  EXPECT_EQ(DirectoryLock::holder_of(dir), std::nullopt);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpt::core
