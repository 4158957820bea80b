#include "core/confined_path.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace cpt::core {
namespace {

std::string error_of(std::string_view name) {
  try {
    (void)path_inside("/data/set", name, "set/manifest.json", "$.shards[0]");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PathInside, RelativeNamesStayInTheirDirectory) {
  EXPECT_EQ(path_inside("/data/set", "shard_0", "m", "shard"), std::filesystem::path("/data/set/shard_0"));
  EXPECT_EQ(path_inside("/data/set", "part/shard_0", "m", "shard"), std::filesystem::path("/data/set/part/shard_0"));
  EXPECT_EQ(path_inside("/data/set", "a..b", "m", "shard"), std::filesystem::path("/data/set/a..b"));
}

// A manifest naming ../ or an absolute path is refused in one line naming the file and the key.
TEST(PathInside, EscapesAreRefused) {
  EXPECT_EQ(error_of("../secret"), "set/manifest.json: $.shards[0] \"../secret\": expected a path inside /data/set");
  EXPECT_NE(error_of("part/../../secret"), "");
  EXPECT_NE(error_of("/etc/passwd"), "");
  EXPECT_NE(error_of(""), "");
}

}  // namespace
}  // namespace cpt::core
