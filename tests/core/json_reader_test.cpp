#include "core/json_reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cpt::core {
namespace {

// Parses `text` as origin "f.json" and runs `read` on its root; returns the ConfigError message,
// or "" when nothing was thrown.
template <class Fn>
std::string error_of(const std::string& text, Fn read) {
  try {
    const auto doc = parse_json_text(text, "f.json");
    auto r = JsonObjectReader::root_of(doc);
    read(r);
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(JsonReader, ReadsTypedValues) {
  const auto doc = parse_json_text(R"({"n": 3, "x": 2.5, "b": true, "s": "hi", "a": [1, 2], "o": {"k": 1}})", "f.json");
  auto r = JsonObjectReader::root_of(doc);
  EXPECT_EQ(r.integer("n", 1, 10), 3);
  EXPECT_DOUBLE_EQ(r.positive_number("x"), 2.5);
  EXPECT_TRUE(r.boolean("b"));
  EXPECT_EQ(r.string("s"), "hi");
  EXPECT_EQ(r.integer_array("a"), (std::vector<std::int64_t>{1, 2}));
  auto o = r.object("o");
  EXPECT_EQ(o.integer("k"), 1);
  EXPECT_EQ(o.optional_integer("missing"), std::nullopt);
  EXPECT_NO_THROW(o.finish());
  EXPECT_NO_THROW(r.finish());
}

// A key twice in one object (a hand-edited plan.json with two "ep") is refused by name; the same
// key in sibling or nested objects is not a repeat.
TEST(JsonReader, AKeyTwiceInOneObjectIsRefused) {
  EXPECT_EQ(error_of(R"({"ep": 8, "tp": 1, "ep": 4})", [](JsonObjectReader&) {}),
            "f.json: invalid JSON: key \"ep\" twice in one object");
  EXPECT_EQ(error_of(R"({"o": {"ep": 1}, "p": [{"ep": 2}, {"ep": 3}], "ep": {"ep": 4}})",
                     [](JsonObjectReader& r) {
                       r.accept("o");
                       r.accept("p");
                       r.accept("ep");
                     }),
            "");
}

// A value nested 100,000 deep (it overflowed the stack while the error described it) is one
// line; kMaxJsonDepth levels still parse.
TEST(JsonReader, DeepNestingIsAnErrorNotACrash) {
  const auto deep = std::string(100'000, '[') + std::string(100'000, ']');
  EXPECT_EQ(error_of(R"({"a": )" + deep + "}", [](JsonObjectReader&) {}),
            "f.json: invalid JSON: nested deeper than 256 levels");
  const auto objects = std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']');
  EXPECT_NE(error_of(R"({"a": )" + objects + "}", [](JsonObjectReader& r) { r.integer("a"); }).find("$.a: expected"),
            std::string::npos);
}

// A whole float beyond int64 is not an integer (converting it would be undefined; found by
// fuzz/spec_json_fuzzer.cpp).
TEST(JsonReader, AFloatBeyondInt64IsNotAnInteger) {
  EXPECT_NE(error_of(R"({"layers": 1.11111e111})", [](JsonObjectReader& r) { r.integer("layers"); })
                .find("expected an integer"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"layers": -9.3e18})", [](JsonObjectReader& r) { r.integer("layers"); }).find("expected an integer"),
      std::string::npos);
}

// A number beyond double's range is bad input too (found by fuzz/spec_json_fuzzer.cpp).
TEST(JsonReader, ANumberOutOfRangeIsAnErrorNotAnException) {
  try {
    (void)parse_json_text(R"({"peak": 1e914489})", "gpu.json");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu.json: invalid JSON: number overflow"), std::string::npos) << e.what();
  }
}

TEST(JsonReader, UnknownKeyIsRejectedWithAHint) {
  EXPECT_EQ(error_of(R"({"layers": 2, "hiden": 64})",
                     [](JsonObjectReader& r) {
                       r.integer("layers");
                       r.optional_integer("hidden");
                       r.finish();
                     }),
            "f.json: $.hiden: unknown key (did you mean \"hidden\"?)");
}

TEST(JsonReader, MissingKeyNamesThePath) {
  EXPECT_EQ(error_of(R"({"node": {}})", [](JsonObjectReader& r) { r.object("node").integer("gpus_per_node"); }),
            "f.json: $.node.gpus_per_node: expected a value (required key is missing), got nothing");
}

TEST(JsonReader, WrongTypeAndRangeSayExpectedAndGot) {
  EXPECT_EQ(error_of(R"({"gpus": 0})", [](JsonObjectReader& r) { r.integer("gpus", 1); }),
            "f.json: $.gpus: expected an integer >= 1, got 0");
  EXPECT_EQ(error_of(R"({"gpus": "8"})", [](JsonObjectReader& r) { r.integer("gpus", 1); }),
            "f.json: $.gpus: expected an integer >= 1, got string \"8\"");
  EXPECT_EQ(error_of(R"({"bw": -3})", [](JsonObjectReader& r) { r.positive_number("bw"); }),
            "f.json: $.bw: expected a number > 0, got -3");
  EXPECT_EQ(error_of(R"({"mlp": "relu"})",
                     [](JsonObjectReader& r) {
                       r.one_of("mlp", {"swiglu", "gelu"});
                     }),
            "f.json: $.mlp: expected one of swiglu|gelu, got string \"relu\"");
  EXPECT_EQ(error_of(R"({"a": [1, "x"]})", [](JsonObjectReader& r) { r.integer_array("a"); }),
            "f.json: $.a[1]: expected integers, got string \"x\"");
  EXPECT_EQ(error_of(R"({"b": null})", [](JsonObjectReader& r) { r.optional_boolean("b"); }),
            "f.json: $.b: expected true or false, got null");
}

TEST(JsonReader, UnitKeysMustBeExactlyOne) {
  const auto read = [](JsonObjectReader& r) { r.positive_number_with_unit("hbm_capacity", {"GiB", "GB"}); };
  EXPECT_EQ(error_of(R"({"hbm_capacity_GiB": 80, "hbm_capacity_GB": 80})", read),
            "f.json: $.hbm_capacity_*: expected exactly one of hbm_capacity_GiB or hbm_capacity_GB, got 2 of them");
  EXPECT_EQ(error_of(R"({"hbm_capacity_TB": 80})", read),
            "f.json: $.hbm_capacity_*: expected exactly one of hbm_capacity_GiB or hbm_capacity_GB, got none");
  EXPECT_EQ(error_of(R"({"hbm_capacity_GB": 141})", read), "");
}

TEST(JsonReader, SyntaxErrorsCarryLineAndColumn) {
  const auto msg = error_of("{\n  \"a\": 1,\n}", [](JsonObjectReader&) {});
  EXPECT_EQ(msg.rfind("f.json: invalid JSON: parse error at line 3, column 1", 0), 0u) << msg;
}

TEST(JsonReader, RootMustBeAnObject) {
  EXPECT_EQ(error_of("[1, 2]", [](JsonObjectReader&) {}), "f.json: $: expected an object, got [1,2]");
}

TEST(JsonReader, FilesThatAreMissingOrDirectories) {
  EXPECT_THROW(parse_json_file("/nonexistent/cpt/x.json"), ConfigError);
  try {
    parse_json_file("/nonexistent/cpt/x.json");
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/cpt/x.json: file not found");
  }
  EXPECT_THROW(parse_json_file(std::filesystem::temp_directory_path()), ConfigError);
}

TEST(JsonReader, EditDistanceAndClosestMatch) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest_match("lama3-8b", {"llama3-8b", "llama2-7b"}), "llama3-8b");
  EXPECT_EQ(closest_match("completely-different", {"llama3-8b"}), "");
}

}  // namespace
}  // namespace cpt::core
