#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/io/safetensors.h"
#include "executor/train/lr_schedule.h"
#include "executor_test_support.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

TEST(Safetensors, RoundTripsDtypesShapesAndMetadata) {
  ScratchDir dir("st");
  const auto f32 = torch::arange(6, torch::kFloat32).reshape({2, 3});
  const auto bf16 = torch::tensor({1.5, -2.0, 3.25}, torch::kBFloat16);
  const auto i64 = torch::tensor({7}, torch::kInt64);
  write_safetensors(dir.path() / "a.safetensors", {{"w", f32}, {"b", bf16}, {"n", i64}}, {{"format", "pt"}});
  const auto st = SafetensorsFile::open(dir.path() / "a.safetensors");
  EXPECT_EQ(st.names(), (std::vector<std::string>{"w", "b", "n"}));
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.info("b").dtype, "BF16");
  EXPECT_TRUE(torch::equal(st.load("w", torch::kFloat32), f32));
  EXPECT_TRUE(torch::equal(st.load("b", torch::kFloat32), bf16.to(torch::kFloat32)));
  EXPECT_EQ(st.load("n", torch::kInt64).item<std::int64_t>(), 7);
  // Header length is a multiple of 8 (the format's alignment rule).
  std::ifstream in(dir.path() / "a.safetensors", std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, TruncatedFileIsRefused) {
  ScratchDir dir("st-trunc");
  write_safetensors(dir.path() / "a.safetensors", {{"w", torch::ones({100})}});
  fs::resize_file(dir.path() / "a.safetensors", fs::file_size(dir.path() / "a.safetensors") - 4);
  try {
    (void)SafetensorsFile::open(dir.path() / "a.safetensors");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// A shape whose byte count wraps around 64 bits ([2^62, 4] of F32) is refused, not accepted
// against a small byte range.
TEST(Safetensors, AShapeTooLargeForAnyFileIsRefused) {
  ScratchDir dir("st-huge");
  const auto path = dir.path() / "a.safetensors";
  write_safetensors(path, {{"w", torch::ones({4})}});
  const std::string header = R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})";
  const std::uint64_t length = header.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << std::string(16, '\0');
  out.close();
  try {
    (void)SafetensorsFile::open(path);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("shape [4611686018427387904, 4] holds more bytes than any file"),
              std::string::npos)
        << e.what();
  }
}

// A header nested 100,000 deep is refused in one line, by the depth limit every JSON file cpt
// reads gets (core::kMaxJsonDepth), before any walk over it.
TEST(Safetensors, ADeeplyNestedHeaderIsAnErrorNotACrash) {
  const std::string header = R"({"__metadata__":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::string file(8, '\0');
  const std::uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);
  file += header;
  try {
    (void)parse_safetensors_header("deep.safetensors", reinterpret_cast<const std::byte*>(file.data()), file.size());
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("deep.safetensors"), std::string::npos) << e.what();
  }
}

// Header values of the wrong kind are one-line errors. A shape of 3.4e50 (found by the fuzzer)
// was converted to an integer by the JSON library, which is undefined behaviour.
TEST(Safetensors, HeaderValuesOfTheWrongKindAreErrors) {
  for (const std::string entry : {R"({"dtype": "F32", "shape": [3, 3.4e50, 32], "data_offsets": [0, 4]})",
                                  R"({"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]})",
                                  R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4.5]})",
                                  R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})",
                                  R"({"dtype": 7, "shape": [1], "data_offsets": [0, 4]})", R"([1, 2])",
                                  R"({"dtype": "F32", "data_offsets": [0, 4]})"}) {
    const std::string header = R"({"w": )" + entry + "}";
    std::string file(8, '\0');
    const std::uint64_t length = header.size();
    std::memcpy(file.data(), &length, 8);
    file += header + std::string(4, '\0');
    try {
      (void)parse_safetensors_header("x.safetensors", reinterpret_cast<const std::byte*>(file.data()), file.size());
      ADD_FAILURE() << entry;
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("x.safetensors: tensor w: "), std::string::npos) << e.what();
    }
  }
}

CheckpointContents contents(std::int64_t step) {
  CheckpointContents c;
  c.step = step;
  c.model = spec::find_catalog_model("tiny").value().spec;
  c.weights = {{"embed_tokens.weight", torch::full({4, 2}, static_cast<float>(step))}};
  c.optimizer = {{"embed_tokens.weight/exp_avg", torch::zeros({4, 2})}};
  c.trainer_state = {{"step", step}};
  return c;
}

TEST(Checkpoint, WritesAtomicallyAndReadsBackVerified) {
  ScratchDir dir("ckpt");
  const auto path = write_checkpoint(dir.path(), contents(10));
  EXPECT_EQ(path.filename(), "step_00000010");
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp")) << "temporary directory left behind";
  }
  const auto c = Checkpoint::open(path);
  EXPECT_EQ(c.step(), 10);
  EXPECT_EQ(c.model().name, "tiny");
  EXPECT_TRUE(c.has_optimizer());
  EXPECT_EQ(c.weights().load("embed_tokens.weight", torch::kFloat32)[0][0].item<float>(), 10.0f);
}

TEST(Checkpoint, CorruptedOrHalfWrittenCheckpointsAreRefusedAndSkipped) {
  ScratchDir dir("ckpt-bad");
  write_checkpoint(dir.path(), contents(10));
  const auto newest = write_checkpoint(dir.path(), contents(20));
  // Flip one byte of the newest checkpoint's weights: its checksum no longer matches.
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  try {
    (void)Checkpoint::open(newest);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  // A half-written one (no manifest) is refused too.
  fs::create_directories(dir.path() / "step_00000030");
  EXPECT_THROW((void)Checkpoint::open(dir.path() / "step_00000030"), core::ConfigError);
  const auto latest = latest_valid_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step(), 10);
}

// A manifest edited by hand (a renamed key, a changed type, a file named outside the directory) is
// refused in one line naming it, and the previous checkpoint is used, as for a corrupt tensor file
// (it was an internal error from the JSON library).
TEST(Checkpoint, AnAlteredManifestFallsBackToThePreviousCheckpoint) {
  ScratchDir dir("ckpt-manifest");
  write_checkpoint(dir.path(), contents(10));
  const auto newest = write_checkpoint(dir.path(), contents(20));
  const auto manifest_path = newest / "manifest.json";
  const auto original = nlohmann::json::parse(std::ifstream(manifest_path));
  const auto expect_refused = [&](nlohmann::json manifest, const std::string& message) {
    std::ofstream(manifest_path) << manifest.dump();
    try {
      (void)Checkpoint::open(newest);
      ADD_FAILURE() << "accepted: " << manifest.dump();
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    const auto latest = latest_valid_checkpoint(dir.path());
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->step(), 10);
  };
  auto renamed = original;
  renamed["files"]["model.safetensors"].erase("bytes");
  renamed["files"]["model.safetensors"]["size"] = 1;
  expect_refused(renamed, "manifest.json: $.files.model.safetensors.bytes");
  auto retyped = original;
  retyped["files"]["model.safetensors"]["fnv1a64"] = 7;
  expect_refused(retyped, "$.files.model.safetensors.fnv1a64: expected");
  auto escaping = original;
  escaping["files"]["../step_00000010/model.safetensors"] = original["files"]["model.safetensors"];
  expect_refused(escaping, "expected a path inside");
}

// A writer killed mid-checkpoint leaves a .tmp- directory, or, while replacing a step, the old
// copy as .old-: the next run deletes the first and restores the second.
TEST(Checkpoint, UnfinishedWritesAreClearedAndAnInterruptedReplacementRestored) {
  ScratchDir dir("ckpt-recover");
  write_checkpoint(dir.path(), contents(10));
  const auto step20 = write_checkpoint(dir.path(), contents(20));
  fs::rename(step20, dir.path() / ".old-step_00000020-4242");
  fs::create_directories(dir.path() / ".tmp-step_00000030-4242");
  fs::create_directories(dir.path() / ".new-step_00000020-4242");
  EXPECT_EQ(recover_unfinished_checkpoints(dir.path()), 3);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_00000010", "step_00000020"}));
  EXPECT_EQ(latest_valid_checkpoint(dir.path())->step(), 20);
  EXPECT_EQ(recover_unfinished_checkpoints(dir.path()), 0);
}

TEST(Checkpoint, PruneKeepsTheNewest) {
  ScratchDir dir("ckpt-prune");
  for (int s : {1, 2, 3, 4}) write_checkpoint(dir.path(), contents(s));
  prune_checkpoints(dir.path(), 2, dir.path() / "step_00000004");
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000001"));
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000002"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000003"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000004"));
}

TEST(LrSchedule, WarmupCosineConstantAndWsd) {
  LrSchedule s{LrScheduleKind::kCosine, 1.0, 10, 0.1, 0.2, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: floor + (peak - floor)/2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  s.kind = LrScheduleKind::kConstant;
  EXPECT_DOUBLE_EQ(s.at(100), 1.0);
  s.kind = LrScheduleKind::kWsd;  // decay over the last 22 steps
  EXPECT_DOUBLE_EQ(s.at(87), 1.0);
  EXPECT_NEAR(s.at(99), 1.0 - 0.9 * 11.0 / 22.0, 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
}

}  // namespace
}  // namespace cpt::exec

#include "executor/data/corpus_reader.h"
#include "executor/data/tokenizer.h"
#include "executor/io/model_weights.h"
#include "executor/io/vocab_extension.h"
#include "executor/model/llama_model.h"

namespace cpt::exec {
namespace {

// Extension keeps every existing id: text without the new tokens encodes as before, and a new token
// becomes one id past the old vocabulary.
TEST(VocabExtension, TokenizerKeepsOldIdsAndAddsWholeTokens) {
  ScratchDir dir("vocab-tok");
  const auto& base = testing::small_tokenizer();
  const auto base_file = dir.path() / "base.model";
  fs::copy_file(base.path(), base_file);
  const auto added = extend_tokenizer(base_file, {"JSONDecodeError", "JSONDecodeError", "\xe2\x96\x81return"},
                                      dir.path() / "ext.model");
  ASSERT_GE(added.size(), 1u);
  EXPECT_EQ(added.front(), "JSONDecodeError");
  const auto ext = Tokenizer::load(dir.path() / "ext.model");
  EXPECT_EQ(ext.vocab_size(), base.vocab_size() + static_cast<std::int64_t>(added.size()));
  const std::string plain = "def scan(s, idx):\n    yield s[idx:]  # no new token here\n";
  EXPECT_EQ(ext.encode(plain), base.encode(plain));
  const auto with = ext.encode("raise JSONDecodeError(msg)");
  EXPECT_NE(std::find(with.begin(), with.end(), ext.piece_id("JSONDecodeError")), with.end());
  EXPECT_EQ(ext.piece_id("JSONDecodeError"), base.vocab_size());
  EXPECT_EQ(ext.decode(with), "raise JSONDecodeError(msg)");
}

// Of the added word pieces ("▁word", no other "▁"), how many encode their word alone as their one
// id (added[i] has id base_size + i): {words, single}.
std::pair<int, int> words_that_encode_whole(const Tokenizer& ext, std::int64_t base_size,
                                            const std::vector<std::string>& added) {
  int words = 0, single = 0;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const auto& p = added[i];
    if (p.rfind("\xe2\x96\x81", 0) != 0 || p.size() < 5 || p.find("\xe2\x96\x81", 3) != std::string::npos) continue;
    ++words;
    const auto id = static_cast<std::int32_t>(base_size + static_cast<std::int64_t>(i));
    single += ext.encode(p.substr(3)) == std::vector<std::int32_t>{id};
  }
  return {words, single};
}

// Merging a learned domain tokenizer (Chinese-LLaMA's recipe): the domain pieces join BPE's merges
// after the base's. Old ids keep their pieces; a line of code that contains none of the new pieces'
// text encodes as before; the domain text (licenses) takes fewer tokens; and BPE builds the new
// word pieces: a word alone encodes to its one new id.
TEST(VocabExtension, MergedDomainPiecesFormThroughBpe) {
  ScratchDir dir("vocab-merge");
  const auto& base = testing::small_tokenizer();
  const auto base_file = dir.path() / "base.model";
  fs::copy_file(base.path(), base_file);
  const std::filesystem::path licenses = "/usr/share/common-licenses";
  ASSERT_TRUE(fs::exists(licenses)) << "needs /usr/share/common-licenses (base-files)";
  const auto docs = sample_documents({licenses}, CorpusOptions{}, 1 << 20);
  const auto tokens = learn_domain_tokens(docs, base, 1024, 200, {}, /*for_merging=*/true);
  const auto added = extend_tokenizer(base_file, tokens, dir.path() / "merged.model", ExtendMode::kMerge);
  ASSERT_EQ(added.size(), tokens.size());
  ASSERT_GE(added.size(), 100u);
  const auto ext = Tokenizer::load(dir.path() / "merged.model");
  for (std::int32_t id = 0; id < base.vocab_size(); ++id) ASSERT_EQ(ext.piece(id), base.piece(id)) << id;
  // Lines of Python without any new piece's text: the same ids.
  std::vector<std::string> surfaces;
  for (const auto& p : added) {
    std::string text;
    for (std::size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xe2\x96\x81") == 0) {
        text += ' ';
        i += 3;
      } else {
        text += p[i++];
      }
    }
    surfaces.push_back(text);
  }
  std::ifstream code(testing::python_json_package() / "decoder.py");
  int lines = 0;
  for (std::string line; std::getline(code, line);) {
    const auto padded = " " + line;  // SentencePiece's dummy prefix
    if (std::any_of(surfaces.begin(), surfaces.end(),
                    [&](const auto& t) { return padded.find(t) != std::string::npos; })) {
      continue;
    }
    EXPECT_EQ(ext.encode(line), base.encode(line)) << line;
    ++lines;
  }
  EXPECT_GT(lines, 20);
  std::string license;
  for (const auto& d : docs) license += d;
  license.resize(std::min<std::size_t>(license.size(), 50000));
  EXPECT_LT(static_cast<double>(ext.encode(license).size()), 0.9 * static_cast<double>(base.encode(license).size()));
  const auto [words, single] = words_that_encode_whole(ext, base.vocab_size(), added);
  EXPECT_GT(words, 10);
  EXPECT_GE(single, words * 9 / 10) << single << " of " << words << " word pieces encode to themselves";
  std::cout << "merged " << added.size() << " pieces: license text " << ext.encode(license).size() << " vs "
            << base.encode(license).size() << " tokens; " << single << " of " << words
            << " word pieces encode to themselves; " << lines << " unchanged code lines\n";
}

// A domain whose characters the base never saw (Greek, into the Python tokenizer): merging adds the
// characters before the pieces built from them, so BPE reaches the new words.
TEST(VocabExtension, MergingBringsNewCharactersFirst) {
  ScratchDir dir("vocab-merge-greek");
  const auto& base = testing::small_tokenizer();
  const auto base_file = dir.path() / "base.model";
  fs::copy_file(base.path(), base_file);
  const std::vector<std::string> syllables = {"\xce\xba\xce\xb1", "\xce\xbb\xce\xbf", "\xcf\x83\xcf\x84\xce\xb7",
                                              "\xce\xbc\xce\xb5", "\xce\xbd\xce\xb9", "\xcf\x81\xce\xbf\xcf\x82"};
  std::vector<std::string> docs;
  std::uint64_t state = 7;
  for (int d = 0; d < 200; ++d) {
    std::string text;
    for (int w = 0; w < 60; ++w) {
      const int n = 1 + static_cast<int>((state = state * 6364136223846793005ULL + 1) >> 62);
      for (int k = 0; k < n; ++k)
        text += syllables[((state = state * 6364136223846793005ULL + 1) >> 33) % syllables.size()];
      text += ' ';
    }
    docs.push_back(text);
  }
  const auto tokens = learn_domain_tokens(docs, base, 400, 60, {}, /*for_merging=*/true);
  const auto added = extend_tokenizer(base_file, tokens, dir.path() / "greek.model", ExtendMode::kMerge);
  const auto ext = Tokenizer::load(dir.path() / "greek.model");
  EXPECT_GE(ext.piece_id("\xce\xba"), base.vocab_size());  // kappa: a new character
  // A word the domain model merged is one id in the extended tokenizer.
  const auto [words, single] = words_that_encode_whole(ext, base.vocab_size(), added);
  EXPECT_GT(words, 3);
  EXPECT_GE(single, words * 9 / 10) << single << " of " << words;
  const std::string greek = docs.front();
  EXPECT_LT(ext.encode(greek).size() * 2, base.encode(greek).size());  // bytes before, pieces now
}

// The extended model: old rows bit-identical, new rows the mean; on old tokens its logits over the
// old vocabulary are exactly the base model's.
TEST(VocabExtension, ModelKeepsTheBaseLogitsOnOldTokens) {
  ScratchDir dir("vocab-model");
  const auto spec = spec::find_catalog_model("tiny").value().spec;
  LlamaModel base(spec);
  base->init_weights(3);
  CheckpointContents c;
  c.model = spec;
  for (const auto& p : base->named_parameters()) c.weights.emplace_back(p.key(), p.value());
  write_checkpoint_dir(dir.path() / "base", c);
  const auto extended = extend_vocabulary(Checkpoint::open(dir.path() / "base"), {spec.vocab + 40, 0.0, 0});
  write_checkpoint_dir(dir.path() / "ext", extended);
  ASSERT_EQ(extended.model.vocab, spec.vocab + 40);
  LlamaModel ext(extended.model);
  load_model_weights(*ext, dir.path() / "ext");
  const auto emb = ext->embed_tokens->weight;
  EXPECT_TRUE(torch::equal(emb.narrow(0, 0, spec.vocab), base->embed_tokens->weight));
  EXPECT_TRUE(torch::allclose(emb[spec.vocab + 7], base->embed_tokens->weight.mean(0)));
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  const auto tokens = torch::randint(spec.vocab, {2, 20}, torch::kInt64);
  Batch b{tokens, tokens, torch::arange(20, torch::kInt64).unsqueeze(0).expand({2, 20}).contiguous(), {}, 0, {}};
  const auto a = base->forward(b);
  const auto e = ext->forward(b);
  EXPECT_EQ(e.size(-1), spec.vocab + 40);
  EXPECT_TRUE(torch::equal(e.narrow(-1, 0, spec.vocab), a));
  EXPECT_THROW(extend_vocabulary(Checkpoint::open(dir.path() / "base"), {spec.vocab - 1, 0.0, 0}), core::ConfigError);
}

}  // namespace
}  // namespace cpt::exec
