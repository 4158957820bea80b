#pragma once
// A SentencePiece tokenizer (the library Debian ships): load an existing .model file (LLaMA-2
// style) or train one on a corpus. LibTorch-free.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace cpt::exec {

class Tokenizer {
 public:
  // ConfigError naming the file when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::filesystem::path& model_file);
  // The same from the file's bytes (`model_file` names them in errors and path()).
  static Tokenizer parse(const std::string& bytes, const std::filesystem::path& model_file);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text) const;
  [[nodiscard]] std::string decode(const std::vector<std::int32_t>& ids) const;
  [[nodiscard]] std::int64_t vocab_size() const;
  [[nodiscard]] std::int32_t bos_id() const;  // -1 when the model has none
  [[nodiscard]] std::int32_t eos_id() const;  // -1 when the model has none
  [[nodiscard]] std::int32_t unk_id() const;
  // The id of `piece`, or -1 when it is not in the vocabulary.
  [[nodiscard]] std::int32_t piece_id(const std::string& piece) const;
  [[nodiscard]] std::string piece(std::int32_t id) const;
  [[nodiscard]] float score(std::int32_t id) const;  // the piece's score (BPE: merge priority, higher first)
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // Stable hash of the model file's bytes: data shards record it, training checks it.
  [[nodiscard]] const std::string& fingerprint() const { return fingerprint_; }

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::filesystem::path path_;
  std::string fingerprint_;
};

struct TokenizerTrainOptions {
  std::int64_t vocab_size = 32000;
  std::string model_type = "bpe";          // "bpe" or "unigram"
  std::int64_t max_sentences = 2'000'000;  // lines sampled for training
  // LLaMA-style defaults: byte fallback (every byte encodable), digits split, whitespace kept
  // verbatim (code), no Unicode normalisation; ids 0 unk, 1 bos, 2 eos.
};

// Trains on the lines of `documents` and writes `<out_prefix>.model` (atomically) and
// `<out_prefix>.vocab`. ConfigError for an impossible vocabulary size (SentencePiece's message).
void train_tokenizer(const std::vector<std::string>& documents, const TokenizerTrainOptions& options,
                     const std::filesystem::path& out_prefix);

// How extend_tokenizer adds pieces.
enum class ExtendMode {
  // User-defined pieces, matched whole before BPE (Hugging Face's added tokens): a token is one id
  // wherever its text occurs, whatever surrounds it.
  kWhole,
  // Normal pieces that take part in BPE's merges, scored below every base piece in list order
  // (Chinese-LLaMA's merge of a domain SentencePiece model into LLaMA's): the base's merges keep
  // priority and the domain's follow in their own order, so a token forms where BPE would build it
  // (e.g. "▁return" only at a word start). For learned tokens, list the domain model's pieces in
  // its merge order with their intermediates (learn_domain_tokens with `for_merging`).
  kMerge,
};

// Vocabulary extension: `base` plus `tokens` appended (as `mode` says), written to `out_model`.
// Existing ids are unchanged, so text that contains none of the new tokens' text encodes exactly
// as before. Tokens already in the vocabulary and duplicates are skipped. Returns the pieces
// added. (The model file is a protobuf ModelProto; a piece is appended as one more `pieces` entry,
// which protobuf parsers append to the repeated field.)
std::vector<std::string> extend_tokenizer(const std::filesystem::path& base, const std::vector<std::string>& tokens,
                                          const std::filesystem::path& out_model, ExtendMode mode = ExtendMode::kWhole);

// Domain tokens for extension: the pieces of a `vocab_size` BPE tokenizer trained on `documents`
// that `base` lacks, in the domain model's merge order (most frequent first; bytes and control
// pieces excluded), at most `count`. With `avoid` (original-domain text), a piece is kept only when
// it is at least 10 times as frequent per byte in `documents` as in `avoid`: a new token that is
// common in the original domain would change how that text is tokenized and cost the base model
// its perplexity there (its embedding starts as a mean row). With `for_merging` (ExtendMode::kMerge)
// single characters the base lacks are kept too, and a piece is kept only with every piece BPE
// needs to build it (its domain merge's two halves, when the base lacks them).
std::vector<std::string> learn_domain_tokens(const std::vector<std::string>& documents, const Tokenizer& base,
                                             std::int64_t vocab_size, std::int64_t count,
                                             const std::vector<std::string>& avoid = {}, bool for_merging = false);

}  // namespace cpt::exec
