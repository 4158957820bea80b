#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "executor/data/corpus_reader.h"
#include "executor/data/data_loader.h"
#include "executor/data/token_shards.h"
#include "executor/data/tokenizer.h"
#include "executor_test_support.h"

namespace cpt::exec {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

// A tokenizer model whose vocabulary makes SentencePiece throw instead of returning a status (an
// empty piece in its trie; found by fuzz/tokenizer_fuzzer.cpp) is a one-line ConfigError naming
// the file, not an internal error.
TEST(TokenizerFile, AModelTheLibraryThrowsOnIsAConfigError) {
  const fs::path model = fs::path(CPT_TEST_DATA_DIR) / "fuzz_findings/tokenizer_empty_piece.model";
  try {
    (void)Tokenizer::load(model);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_empty_piece.model: not a SentencePiece model: "), std::string::npos)
        << e.what();
  }
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(Utf8, AcceptsWellFormedAndRejectsMalformed) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // été € 😀
  EXPECT_FALSE(is_valid_utf8("\xc3"));                                            // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));                                        // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));                                    // surrogate
  EXPECT_FALSE(is_valid_utf8("\xff"));
}

TEST(Corpus, ReadsFilesDirectoriesAndJsonlAndCountsWhatItSkips) {
  ScratchDir dir("corpus");
  fs::create_directories(dir.path() / "d/sub");
  write(dir.path() / "d/b.txt", "second");
  write(dir.path() / "d/sub/a.txt", "third");
  write(dir.path() / "d/a.txt", "first");
  write(dir.path() / "d/skip.bin", "not taken: wrong extension");
  write(dir.path() / "d/empty.txt", "");
  write(dir.path() / "d/bad.txt", "caf\xe9");
  write(dir.path() / "d/nul.txt", std::string("a\0b", 3));
  write(dir.path() / "x.jsonl", "{\"text\": \"j1\"}\nnot json\n{\"text\": 3}\n\n{\"text\": \"j2\", \"id\": 1}\n");
  std::vector<std::string> docs;
  CorpusOptions o;
  o.extensions = {".txt"};
  const auto stats = read_corpus({dir.path() / "d", dir.path() / "x.jsonl"}, o,
                                 [&](std::string_view t, const std::string&) { docs.emplace_back(t); });
  EXPECT_EQ(docs, (std::vector<std::string>{"first", "second", "third", "j1", "j2"}));  // sorted paths
  EXPECT_EQ(stats.documents, 5);
  EXPECT_EQ(stats.skipped.at("empty"), 1);
  EXPECT_EQ(stats.skipped.at("invalid_utf8"), 1);
  EXPECT_EQ(stats.skipped.at("binary"), 1);
  EXPECT_EQ(stats.skipped.at("bad_json_line"), 2);
  EXPECT_THROW(read_corpus({dir.path() / "missing"}, o, [](std::string_view, const std::string&) {}),
               core::ConfigError);
}

TEST(TokenShards, RoundTripInMegatronFormatWithBothTokenWidths) {
  ScratchDir dir("shards");
  for (const auto vocab : {std::int64_t{512}, std::int64_t{128256}}) {
    const auto dtype = token_dtype_for_vocab(vocab);
    const auto prefix = dir.path() / ("s" + std::to_string(vocab));
    TokenShardWriter w(prefix, dtype);
    const std::vector<std::int32_t> a{1, 2, 3}, b{}, c{static_cast<std::int32_t>(vocab - 1), 7};
    w.add_document(a);
    w.add_document(b);
    w.add_document(c);
    w.finish();
    const auto s = TokenShard::open(prefix);
    ASSERT_EQ(s.documents(), 3);
    EXPECT_EQ(s.tokens(), 5);
    EXPECT_EQ(s.dtype(), dtype);
    std::vector<std::int64_t> out(5);
    s.read(0, out);
    EXPECT_EQ(out, (std::vector<std::int64_t>{1, 2, 3, vocab - 1, 7}));
    // Megatron's header: magic, version 1, dtype code.
    std::ifstream idx(prefix.string() + ".idx", std::ios::binary);
    char head[18];
    idx.read(head, 18);
    EXPECT_EQ(std::string(head, 7), "MMIDIDX");
    EXPECT_EQ(static_cast<int>(head[17]), vocab <= 65536 ? 8 : 4);
  }
}

TEST(TokenShards, TruncatedBinIsRefusedWithTheNumbers) {
  ScratchDir dir("truncated");
  const auto prefix = dir.path() / "s";
  TokenShardWriter w(prefix, TokenDtype::kUInt16);
  const std::vector<std::int32_t> a{1, 2, 3, 4};
  w.add_document(a);
  w.finish();
  fs::resize_file(prefix.string() + ".bin", 6);
  try {
    (void)TokenShard::open(prefix);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("6 bytes, but its index describes 4 tokens"), std::string::npos) << e.what();
  }
}

// An index whose header claims 2^40 sequences in 34 bytes is refused before anything is allocated
// for them (it was std::bad_alloc).
TEST(TokenShards, AnIndexClaimingMoreThanItHoldsIsRefused) {
  ScratchDir dir("claims");
  const auto prefix = dir.path() / "s";
  TokenShardWriter w(prefix, TokenDtype::kUInt16);
  w.add_document(std::vector<std::int32_t>{1, 2});
  w.finish();
  const auto idx = prefix.string() + ".idx";
  fs::resize_file(idx, 34);
  {
    std::fstream f(idx, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint64_t sequences = std::uint64_t{1} << 40;
    f.seekp(18);
    f.write(reinterpret_cast<const char*>(&sequences), 8);
  }
  try {
    (void)TokenShard::open(prefix);
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("claims 1099511627776 sequences, but its 34 bytes hold at most 0"),
              std::string::npos)
        << e.what();
  }
}

class LoaderTest : public ::testing::Test {
 protected:
  // Prepared by the first test rather than in SetUpTestSuite, whose failure gtest reports as every
  // test skipped (which ctest counts as a pass).
  void SetUp() override {
    if (dir_ == nullptr) {
      dir_ = new ScratchDir("loader");
      testing::prepare_small_dataset(dir_->path() / "data");
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::shared_ptr<const TokenDataset> dataset() {
    return std::make_shared<const TokenDataset>(TokenDataset::open(dir_->path() / "data"));
  }
  static ScratchDir* dir_;
};
ScratchDir* LoaderTest::dir_ = nullptr;

TEST_F(LoaderTest, PreparedDatasetEndsEveryDocumentWithEos) {
  const auto d = dataset();
  EXPECT_GT(d->documents(), 3);
  EXPECT_EQ(d->vocab_size(), 512);
  for (std::int64_t doc = 0; doc < d->documents(); ++doc) {
    std::vector<std::int64_t> last(1);
    d->read(d->document_start(doc) + d->document_length(doc) - 1, last);
    EXPECT_EQ(last[0], testing::small_tokenizer().eos_id());
  }
}

TEST_F(LoaderTest, PackedBatchesShiftTargetsRestartPositionsAndMaskDocuments) {
  const auto d = dataset();
  DataLoader loader({{"py", d, 1.0}}, {64, 4, 1, Packing::kPacked, /*shuffle=*/false});
  bool saw_boundary = false;
  for (std::int64_t i = 0; i * 4 < loader.units(0); ++i) {
    const auto b = loader.next();
    ASSERT_EQ(b.tokens.sizes(), (std::vector<std::int64_t>{4, 64}));
    const auto pos = b.positions.max().item<std::int64_t>();
    EXPECT_LT(pos, 64);
    if (b.mask.defined()) {
      saw_boundary = true;
      // Every row attends to itself, never to the future.
      EXPECT_TRUE(b.mask.diagonal(0, 2, 3).all().item<bool>());
      EXPECT_FALSE(b.mask.triu(1).any().item<bool>());
    }
    // Within a row, the target at j is the input at j + 1 unless ignored.
    const auto same =
        (b.targets.narrow(1, 0, 63) == b.tokens.narrow(1, 1, 63)) | (b.targets.narrow(1, 0, 63) == kIgnoreIndex);
    EXPECT_TRUE(same.all().item<bool>());
    EXPECT_EQ(b.loss_tokens, (b.targets != kIgnoreIndex).sum().item<std::int64_t>());
  }
  EXPECT_TRUE(saw_boundary);
}

TEST_F(LoaderTest, SameSeedSameBatchesAndRestoredStateContinuesExactly) {
  const auto d = dataset();
  const LoaderOptions o{32, 2, 42, Packing::kPacked, true};
  DataLoader a({{"py", d, 1.0}}, o), b({{"py", d, 1.0}}, o);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(torch::equal(a.next().tokens, b.next().tokens));
  const auto state = a.state();
  const auto expected = a.next().tokens;
  DataLoader c({{"py", d, 1.0}}, o);
  c.restore(state, "test");
  EXPECT_TRUE(torch::equal(c.next().tokens, expected));
  DataLoader other_seed({{"py", d, 1.0}}, {32, 2, 43, Packing::kPacked, true});
  DataLoader first({{"py", d, 1.0}}, o);
  EXPECT_FALSE(torch::equal(first.next().tokens, other_seed.next().tokens));
}

TEST_F(LoaderTest, EpochsVisitEveryWindowOnce) {
  const auto d = dataset();
  DataLoader loader({{"py", d, 1.0}}, {128, 1, 3, Packing::kPacked, true});
  const auto n = loader.units(0);
  std::set<std::int64_t> firsts;
  for (std::int64_t i = 0; i < n; ++i) {
    // Identify a window by the sum of its tokens and its first tokens (distinct in practice).
    const auto t = loader.next().tokens;
    firsts.insert(t.index({0, 0}).item<std::int64_t>() * 1000003 + t.sum().item<std::int64_t>());
  }
  EXPECT_GE(static_cast<std::int64_t>(firsts.size()), n - 1);
}

TEST_F(LoaderTest, MixingFollowsTheWeightsToWithinOneSample) {
  const auto d = dataset();
  DataLoader loader({{"new", d, 3.0}, {"replay", d, 1.0}}, {32, 1, 5, Packing::kPacked, true});
  for (int i = 1; i <= 101; ++i) {
    (void)loader.next();
    EXPECT_NEAR(static_cast<double>(loader.consumed()[1]), 0.25 * i, 1.0);
  }
  DataLoader renamed({{"new", d, 3.0}, {"other", d, 1.0}}, {32, 1, 5, Packing::kPacked, true});
  EXPECT_THROW(renamed.restore(loader.state(), "ckpt"), core::ConfigError);
}

TEST_F(LoaderTest, PaddedBatchesHoldOneDocumentPerRow) {
  const auto d = dataset();
  DataLoader loader({{"py", d, 1.0}}, {4096, 2, 1, Packing::kPadded, false});
  const auto b = loader.next();
  EXPECT_FALSE(b.mask.defined());
  // Row 0 is document 0 (truncated to seq_len + 1 tokens), positions from 0.
  const auto len0 = std::min<std::int64_t>(d->document_length(0), 4097) - 1;
  EXPECT_EQ((b.targets[0] != kIgnoreIndex).sum().item<std::int64_t>(), len0);
  EXPECT_EQ(b.positions[0][len0 - 1].item<std::int64_t>(), len0 - 1);
  // Whole documents: the real tokens of each row are its document's, the rest of the width padding.
  DataLoader whole({{"py", d, 1.0}}, {1 << 24, 2, 1, Packing::kPadded, false});
  const auto w = whole.next();
  const auto first = d->document_length(0) - 1, second = d->document_length(1) - 1;
  ASSERT_NE(first, second);
  ASSERT_TRUE(w.real_tokens.defined());
  EXPECT_TRUE(torch::equal(w.real_tokens.sum(1), torch::tensor({first, second}, torch::kInt64)))
      << w.real_tokens.sum(1);
  EXPECT_TRUE(w.real_tokens[0].narrow(0, 0, first).all().item<bool>());
  EXPECT_TRUE(w.real_tokens[1].narrow(0, 0, second).all().item<bool>());
  // Rounded up to a multiple of the width (context and sequence parallelism split it).
  DataLoader rounded({{"py", d, 1.0}}, {12 << 20, 2, 1, Packing::kPadded, false, 12});
  const auto r = rounded.next();
  const auto longest = std::max(first, second);
  EXPECT_EQ(r.tokens.size(1), (longest + 11) / 12 * 12);
  EXPECT_TRUE(torch::equal(r.real_tokens.sum(1), w.real_tokens.sum(1)));
  EXPECT_TRUE(torch::equal(r.targets.narrow(1, 0, longest), w.targets));
  // Packed windows have no padding.
  DataLoader packed({{"py", d, 1.0}}, {32, 2, 1, Packing::kPacked, false});
  EXPECT_FALSE(packed.next().real_tokens.defined());
}

// A dataset is checked before it trains: a token id at or above the manifest's vocabulary (which
// LibTorch would report as an internal error, or a tensor-parallel rank would train on silently)
// and a shard named outside the dataset's directory are one-line errors naming the file.
TEST_F(LoaderTest, TokenIdsOutsideTheVocabularyAndEscapingShardsAreRefused) {
  ScratchDir copy("loader-hostile");
  fs::copy(dir_->path() / "data", copy.path() / "ids", fs::copy_options::recursive);
  auto manifest = nlohmann::json::parse(std::ifstream(copy.path() / "ids/manifest.json"));
  const auto shard = manifest["shards"][0].get<std::string>();
  ASSERT_EQ(manifest["token_dtype"], "uint16");
  {
    std::fstream f(copy.path() / "ids" / (shard + ".bin"), std::ios::in | std::ios::out | std::ios::binary);
    const std::uint16_t id = 65535;
    f.write(reinterpret_cast<const char*>(&id), 2);
  }
  try {
    (void)TokenDataset::open(copy.path() / "ids");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(shard + ".bin: token id 65535 is outside the"), std::string::npos) << e.what();
  }
  fs::copy(dir_->path() / "data", copy.path() / "escape", fs::copy_options::recursive);
  manifest["shards"][0] = "../ids/" + shard;
  std::ofstream(copy.path() / "escape/manifest.json") << manifest.dump();
  try {
    (void)TokenDataset::open(copy.path() / "escape");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a path inside"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cpt::exec
