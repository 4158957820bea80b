#include "executor/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/output_directory.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw core::ConfigError(str_cat(p.string(), ": cannot read the tokenizer model"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Feeds SentencePiece the non-empty lines of the documents, in order.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& docs) : docs_(docs) { advance(); }
  bool done() const override { return doc_ >= docs_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (doc_ < docs_.size()) {
      const auto& d = docs_[doc_];
      if (pos_ >= d.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      auto end = d.find('\n', pos_);
      if (end == std::string::npos) end = d.size();
      line_.assign(d, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }
  const std::vector<std::string>& docs_;
  std::size_t doc_ = 0, pos_ = 0;
  std::string line_;
};

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  return parse(read_bytes(model_file), model_file);
}

Tokenizer Tokenizer::parse(const std::string& bytes, const std::filesystem::path& model_file) {
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = t.sp_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // The library throws (rather than returning a status) for some malformed vocabularies, e.g. an
    // empty piece in its trie (found by fuzz/tokenizer_fuzzer.cpp).
    throw core::ConfigError(str_cat(model_file.string(), ": not a SentencePiece model: ", e.what()));
  }
  if (!status.ok()) {
    throw core::ConfigError(str_cat(model_file.string(), ": not a SentencePiece model: ", status.ToString()));
  }
  t.path_ = model_file;
  t.fingerprint_ = core::stable_hash_hex(bytes);
  return t;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!status.ok()) throw core::RuntimeError(str_cat("tokenizer ", path_.string(), ": ", status.ToString()));
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  const std::vector<int> v(ids.begin(), ids.end());
  const auto status = sp_->Decode(v, &out);
  if (!status.ok()) throw core::RuntimeError(str_cat("tokenizer ", path_.string(), ": ", status.ToString()));
  return out;
}

std::int64_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

std::int32_t Tokenizer::piece_id(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  // PieceToId answers unk_id for unknown pieces; only the unknown piece itself maps there truly.
  return id == sp_->unk_id() && sp_->IdToPiece(id) != piece ? -1 : id;
}

std::string Tokenizer::piece(std::int32_t id) const {
  return sp_->IdToPiece(id);
}
float Tokenizer::score(std::int32_t id) const {
  return sp_->GetScore(id);
}
std::int32_t Tokenizer::bos_id() const {
  return sp_->bos_id();
}
std::int32_t Tokenizer::eos_id() const {
  return sp_->eos_id();
}

std::int32_t Tokenizer::unk_id() const {
  return sp_->unk_id();
}

namespace {

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A ModelProto.pieces entry (field 1): SentencePiece {piece = 1 (string), score = 2 (float),
// type = 3 (enum; NORMAL = 1, USER_DEFINED = 4)}.
std::string piece_entry(const std::string& piece, float score, int type) {
  std::string body;
  body.push_back('\x0A');
  put_varint(body, piece.size());
  body += piece;
  body.push_back('\x15');
  body.append(reinterpret_cast<const char*>(&score), 4);
  body.push_back('\x18');
  body.push_back(static_cast<char>(type));
  std::string entry;
  entry.push_back('\x0A');
  put_varint(entry, body.size());
  return entry + body;
}

}  // namespace

std::vector<std::string> extend_tokenizer(const std::filesystem::path& base, const std::vector<std::string>& tokens,
                                          const std::filesystem::path& out_model, ExtendMode mode) {
  auto proto = read_bytes(base);
  const auto tok = Tokenizer::load(base);
  // Merged pieces score below every base piece, in list order (BPE merges the highest first).
  float score = 0;
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) score = std::min(score, tok.score(id));
  std::vector<std::string> added;
  std::set<std::string> seen;
  for (const auto& t : tokens) {
    if (t.empty() || tok.piece_id(t) >= 0 || !seen.insert(t).second) continue;
    if (mode == ExtendMode::kMerge) {
      score -= 1.0f;
      proto += piece_entry(t, score, /*NORMAL=*/1);
    } else {
      proto += piece_entry(t, 0.0f, /*USER_DEFINED=*/4);
    }
    added.push_back(t);
  }
  sentencepiece::SentencePieceProcessor check;
  if (!check.LoadFromSerializedProto(proto).ok() ||
      check.GetPieceSize() != static_cast<int>(tok.vocab_size() + static_cast<std::int64_t>(added.size()))) {
    throw core::InternalError(str_cat("extending ", base.string(), " produced an unloadable model"));
  }
  core::prepare_output_file(out_model);
  core::write_file_atomic(out_model, proto);
  return added;
}

namespace {

// Bytes of the UTF-8 character that starts with `lead`.
int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Occurrences of `piece` (with "▁" read as a space) per byte of `docs`.
double frequency(const std::string& piece, const std::vector<std::string>& docs) {
  std::string needle;
  for (std::size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, "\xe2\x96\x81") == 0) {
      needle += ' ';
      i += 3;
    } else {
      needle += piece[i++];
    }
  }
  double hits = 0, bytes = 0;
  for (const auto& d : docs) {
    bytes += static_cast<double>(d.size());
    for (auto at = d.find(needle); at != std::string::npos; at = d.find(needle, at + 1)) ++hits;
  }
  return bytes > 0 ? hits / bytes : 0;
}

}  // namespace

std::vector<std::string> learn_domain_tokens(const std::vector<std::string>& documents, const Tokenizer& base,
                                             std::int64_t vocab_size, std::int64_t count,
                                             const std::vector<std::string>& avoid, bool for_merging) {
  const auto dir = std::filesystem::temp_directory_path() / str_cat("cpt-domain-tokens-", ::getpid());
  std::filesystem::create_directories(dir);
  TokenizerTrainOptions o;
  o.vocab_size = vocab_size;
  train_tokenizer(documents, o, dir / "domain");
  const auto domain = Tokenizer::load(dir / "domain.model");
  std::filesystem::remove_all(dir);
  std::vector<std::string> candidates;
  std::set<std::string> kept;
  // A piece BPE can build from pieces the extended vocabulary has: some split of it into two
  // pieces, each in the base or already kept (the domain model's own merge is one such split).
  auto buildable = [&](const std::string& p) {
    for (std::size_t cut = 1; cut < p.size(); ++cut) {
      if ((p[cut] & 0xC0) == 0x80) continue;  // inside a UTF-8 character
      const auto l = p.substr(0, cut), r = p.substr(cut);
      if ((base.piece_id(l) >= 0 || kept.count(l) > 0) && (base.piece_id(r) >= 0 || kept.count(r) > 0)) return true;
    }
    return false;
  };
  const auto special = [](const std::string& p) {  // <unk>, <s>, <0x0A>, ...
    return p.size() >= 2 && p.front() == '<' && p.back() == '>';
  };
  const auto one_character = [](const std::string& p) {
    return p.size() == static_cast<std::size_t>(utf8_length(static_cast<unsigned char>(p[0])));
  };
  if (for_merging) {
    // SentencePiece's BPE lists the characters after every merge; BPE needs them first: every
    // character the base lacks, before any piece built from it.
    for (std::int32_t id = 0; id < domain.vocab_size() && static_cast<std::int64_t>(candidates.size()) < count; ++id) {
      const auto p = domain.piece(id);
      if (special(p) || !one_character(p) || base.piece_id(p) >= 0) continue;
      candidates.push_back(p);
      kept.insert(p);
    }
  }
  for (std::int32_t id = 0; id < domain.vocab_size() && static_cast<std::int64_t>(candidates.size()) < count; ++id) {
    const auto p = domain.piece(id);
    if (special(p) || base.piece_id(p) >= 0 || kept.count(p) > 0) continue;
    if (!for_merging) {
      if (p.size() < 2) continue;
    } else if (one_character(p) || !buildable(p)) {
      continue;  // characters are in already; a piece BPE cannot reach from what is kept is useless
    }
    if (!avoid.empty() && frequency(p, documents) < 10 * frequency(p, avoid)) continue;
    candidates.push_back(p);
    kept.insert(p);
  }
  // Id order is BPE merge order: the most frequent domain pieces first.
  if (static_cast<std::int64_t>(candidates.size()) > count) candidates.resize(static_cast<std::size_t>(count));
  return candidates;
}

void train_tokenizer(const std::vector<std::string>& documents, const TokenizerTrainOptions& options,
                     const std::filesystem::path& out_prefix) {
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    throw core::ConfigError(
        str_cat("tokenizer model_type: expected \"bpe\" or \"unigram\", got \"", options.model_type, "\""));
  }
  const std::unordered_map<std::string, std::string> args{
      {"model_type", options.model_type},
      {"vocab_size", str_cat(options.vocab_size)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"normalization_rule_name", "identity"},
      {"character_coverage", "0.9995"},
      {"input_sentence_size", str_cat(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", "2"},
      {"minloglevel", "2"},
  };
  LineIterator lines(documents);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) throw core::ConfigError(str_cat("tokenizer training: ", status.ToString()));
  core::create_parent_directory(out_prefix.string() + ".model");
  core::write_file_atomic(out_prefix.string() + ".model", model);
  // The human-readable vocabulary, one "piece<TAB>id" per line.
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(model).ok())
    throw core::InternalError("tokenizer training produced an unloadable model");
  std::string vocab;
  for (int i = 0; i < sp.GetPieceSize(); ++i) vocab += str_cat(sp.IdToPiece(i), "\t", i, "\n");
  core::write_file_atomic(out_prefix.string() + ".vocab", vocab);
}

}  // namespace cpt::exec
