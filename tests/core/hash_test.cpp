#include "core/hash.h"

#include <gtest/gtest.h>

namespace cpt::core {
namespace {

// FNV-1a 64 reference values (the algorithm's published test vectors) and streaming in pieces.
TEST(Hash, Fnv1a64MatchesReferenceAndStreams) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(fnv1a64("bar", fnv1a64("foo")), fnv1a64("foobar"));
  EXPECT_EQ(hex64(0xabcULL), "0000000000000abc");
  EXPECT_EQ(stable_hash_hex("foobar"), "85944171f73967e8");
}

}  // namespace
}  // namespace cpt::core
