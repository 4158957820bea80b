#include "spec/model_catalog.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "spec/model_io.h"

namespace cpt::spec {
namespace {

// Every entry with a published count matches it within 0.5%, or within the rounding of the
// published figure when that is coarser (Narayanan et al. give 0.1 B).
TEST(ModelCatalog, ParameterCountsMatchPublished) {
  int checked = 0;
  for (const auto& e : model_catalog()) {
    if (e.published_params <= 0) continue;
    const double ours = static_cast<double>(e.spec.num_params());
    const double tolerance = std::max(0.005 * e.published_params, e.published_precision / 2);
    EXPECT_NEAR(ours, e.published_params, tolerance) << e.spec.name << " (" << e.source << ")";
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

// Bias-free LLaMA/Mistral checkpoints are counted exactly.
TEST(ModelCatalog, LlamaAndMistralCountsAreExact) {
  for (const char* name :
       {"llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "mistral-7b"}) {
    const auto e = find_catalog_model(name);
    ASSERT_TRUE(e) << name;
    EXPECT_EQ(static_cast<double>(e->spec.num_params()), e->published_params) << name;
  }
}

TEST(ModelCatalog, NamesAreUniqueAndSpecsValid) {
  std::set<std::string> names;
  for (const auto& e : model_catalog()) {
    EXPECT_TRUE(names.insert(e.spec.name).second) << e.spec.name;
    for (const auto& a : e.aliases) EXPECT_TRUE(names.insert(a).second) << a;
    EXPECT_TRUE(find_model_spec_errors(e.spec).empty()) << e.spec.name;
    EXPECT_FALSE(e.source.empty()) << e.spec.name;
  }
}

TEST(ModelCatalog, LookupByNameOrAliasIgnoringCase) {
  EXPECT_EQ(find_catalog_model("LLaMA3-8B")->spec.name, "llama3-8b");
  EXPECT_EQ(find_catalog_model("llama-2-70b")->spec.name, "llama2-70b");
  EXPECT_EQ(find_catalog_model("llama3-405b")->spec.name, "llama3.1-405b");
  EXPECT_FALSE(find_catalog_model("llama5-1t"));
}

TEST(ModelIo, OwnFormatRoundTrips) {
  const ModelSpec m = load_model(std::string(CPT_TEST_DATA_DIR) + "/tiny_model.json", "--model");
  EXPECT_EQ(m, find_catalog_model("tiny")->spec);
  const auto doc = core::parse_json_text(model_to_json(m).dump(), "x");
  auto r = core::JsonObjectReader::root_of(doc);
  EXPECT_EQ(model_from_json(r), m);
}

TEST(ModelIo, HuggingFaceLlamaConfig) {
  const ModelSpec m = load_model(std::string(CPT_TEST_DATA_DIR) + "/hf_llama2_7b/config.json", "--model");
  ModelSpec expected = find_catalog_model("llama2-7b")->spec;
  expected.name = "hf_llama2_7b";  // no _name_or_path: the folder names it
  EXPECT_EQ(m, expected);
  EXPECT_EQ(m.num_params(), 6'738'415'616);
}

// Llama 3.1's config.json: its "llama3" rope_scaling is read (and is the catalog's); other kinds of
// scaling leave the spec without one (the executor refuses them; the layout is unchanged).
TEST(ModelIo, HuggingFaceLlama31RopeScaling) {
  nlohmann::json config{{"model_type", "llama"},
                        {"_name_or_path", "llama3.1-8b"},
                        {"hidden_size", 4096},
                        {"intermediate_size", 14336},
                        {"num_hidden_layers", 32},
                        {"num_attention_heads", 32},
                        {"num_key_value_heads", 8},
                        {"vocab_size", 128256},
                        {"max_position_embeddings", 131072},
                        {"rope_theta", 500000.0},
                        {"rms_norm_eps", 1e-5},
                        {"rope_scaling",
                         {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}}}};
  auto read = [](const nlohmann::json& j) {
    const auto doc = core::parse_json_text(j.dump(), "config.json");
    auto r = core::JsonObjectReader::root_of(doc);
    return model_from_hf_config(r, "m");
  };
  EXPECT_EQ(read(config), find_catalog_model("llama3.1-8b")->spec);
  config["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};  // a kind that is not read
  EXPECT_FALSE(read(config).rope_scaling.present());
  // The model JSON keeps it through a round trip, and checks it.
  const auto spec = find_catalog_model("llama3.1-8b")->spec;
  const auto doc = core::parse_json_text(model_to_json(spec).dump(), "m.json");
  auto r = core::JsonObjectReader::root_of(doc);
  EXPECT_EQ(model_from_json(r).rope_scaling, spec.rope_scaling);
}

// DeepSeek-V2-Lite's YaRN as its config.json writes it: its magnitudes cancel on cos and sin
// (mscale = mscale_all_dim), and latent attention's softmax scale grows by (0.1·0.707·ln 40 + 1)².
TEST(ModelIo, HuggingFaceYarnRopeScaling) {
  nlohmann::json config{{"model_type", "llama"},
                        {"hidden_size", 64},
                        {"intermediate_size", 128},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"vocab_size", 512},
                        {"rope_theta", 10000.0},
                        {"max_position_embeddings", 163840},
                        {"rope_scaling",
                         {{"type", "yarn"},
                          {"factor", 40},
                          {"beta_fast", 32},
                          {"beta_slow", 1},
                          {"mscale", 0.707},
                          {"mscale_all_dim", 0.707},
                          {"original_max_position_embeddings", 4096}}}};
  auto read = [](const nlohmann::json& j) {
    const auto doc = core::parse_json_text(j.dump(), "config.json");
    auto r = core::JsonObjectReader::root_of(doc);
    return model_from_hf_config(r, "m");
  };
  const auto s = read(config).rope_scaling;
  ASSERT_TRUE(s.yarn());
  EXPECT_EQ(s.factor, 40);
  EXPECT_EQ(s.original_max_positions, 4096);
  EXPECT_DOUBLE_EQ(s.yarn_attention_factor(), 1.0);
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(s.latent_softmax_factor(), mscale * mscale);
  // Without magnitudes: cos and sin carry mscale(factor, 1); transformers' defaults elsewhere.
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", nullptr}};
  const auto plain = read(config).rope_scaling;
  EXPECT_DOUBLE_EQ(plain.yarn_attention_factor(), 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(plain.latent_softmax_factor(), 1.0);
  EXPECT_EQ(plain.beta_fast, 32);
  EXPECT_EQ(plain.original_max_positions, 163840);  // max_position_embeddings
  // The model JSON keeps it through a round trip; a YaRN key under llama3 is refused by name.
  auto spec = find_catalog_model("tiny")->spec;
  spec.rope_scaling = s;
  const auto doc = core::parse_json_text(model_to_json(spec).dump(), "m.json");
  auto r = core::JsonObjectReader::root_of(doc);
  EXPECT_EQ(model_from_json(r).rope_scaling, s);
  auto own = model_to_json(spec);
  own["rope_scaling"]["type"] = "llama3";
  const auto bad = core::parse_json_text(own.dump(), "m.json");
  auto bad_reader = core::JsonObjectReader::root_of(bad);
  EXPECT_THROW(model_from_json(bad_reader), core::ConfigError);
}

std::string load_error(const std::string& json) {
  try {
    const auto doc = core::parse_json_text(json, "m.json");
    auto r = core::JsonObjectReader::root_of(doc);
    if (r.has("model_type")) {
      model_from_hf_config(r, "m");
    } else {
      model_from_json(r);
    }
    return "";
  } catch (const core::ConfigError& e) {
    return e.what();
  }
}

TEST(ModelIo, BadInputsSayWhereAndWhat) {
  const std::string ok =
      R"("name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 512,
         "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": false, "max_seq_len": 128)";
  EXPECT_EQ(load_error("{" + ok + "}"), "");
  EXPECT_EQ(load_error("{" + ok + R"(, "rope_theat": 10000})"),
            "m.json: $.rope_theat: unknown key (did you mean \"rope_theta\"?)");
  EXPECT_EQ(load_error("{" + ok + R"(, "rope_scaling": {"factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}})"),
            "m.json: $: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got 4 and 1");
  EXPECT_EQ(load_error("{" + ok + R"(, "norm_eps": 0})"),
            "m.json: $.norm_eps: expected a number in [1e-12, 0.1], got 0");
  EXPECT_EQ(load_error(R"({"name": "x", "layers": -2})"),
            "m.json: $.layers: expected an integer in [1, 1073741824], got -2");
  std::string bad_heads = "{" + ok + "}";
  bad_heads.replace(bad_heads.find("\"kv_heads\": 2"), 13, "\"kv_heads\": 3");
  EXPECT_EQ(load_error(bad_heads), "m.json: $: heads (4) must be divisible by kv_heads (3)");
  EXPECT_EQ(
      load_error(R"({"model_type": "gpt2"})"),
      "m.json: $.model_type: expected one of "
      "llama|mistral|qwen2|qwen3|mixtral|qwen2_moe|qwen3_moe|deepseek_v2|deepseek_v3|gpt_oss, got string \"gpt2\"");
  EXPECT_EQ(load_error(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                          "num_attention_heads": 4, "intermediate_size": 176, "vocab_size": 512,
                          "max_position_embeddings": 128, "hidden_act": "gelu"})"),
            "m.json: $.hidden_act: expected \"silu\" (SwiGLU MLP), got \"gelu\"");
}

TEST(ModelIo, UnknownNameHints) {
  try {
    load_model("lama3-8b", "--model");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--model: expected a model name (see `cpt models list`) or a JSON file, got \"lama3-8b\" (did you "
                 "mean \"llama3-8b\"?)");
  }
  EXPECT_THROW(load_model("/no/such/model.json", "--model"), core::ConfigError);
}

}  // namespace
}  // namespace cpt::spec
