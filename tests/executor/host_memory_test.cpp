// keep_freed_host_memory (executor/host_memory.h): a large block comes from the heap, not a fresh
// mmap, and stays in the process after it is freed, so the next step reuses it without faults.
#include "executor/host_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cpt::exec {
namespace {

TEST(HostMemory, FreedLargeBlocksStayInTheProcess) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "mallopt is glibc's";
#else
  ASSERT_TRUE(keep_freed_host_memory());
  constexpr std::size_t kBytes = 96u << 20;  // above glibc's largest mmap threshold (32 MiB)
  const auto before = mallinfo2();
  void* p = std::malloc(kBytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, kBytes);
  const auto held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "the block was mmapped";
  std::free(p);
  const auto after = mallinfo2();
  EXPECT_GE(after.fordblks, kBytes) << "the freed block went back to the OS";
#endif
}

}  // namespace
}  // namespace cpt::exec
