// cpt data prepare | train-tokenizer
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "cli/numeric_flags.h"
#include "core/error.h"

#include "cli/cpt_exec/exec_commands.h"
#include "core/str_cat.h"
#include "executor/data/prepare_dataset.h"
#include "executor/data/tokenizer.h"

namespace cpt::cli {

namespace {

std::string skipped_text(const exec::CorpusStats& s) {
  std::vector<std::string> parts;
  for (const auto& [reason, n] : s.skipped) parts.push_back(core::str_cat(n, " ", reason));
  return parts.empty() ? "none skipped" : core::str_cat("skipped: ", core::join(parts, ", "));
}

struct PrepareArgs {
  std::vector<std::string> inputs, extensions;
  std::string tokenizer, out;
  std::int64_t shard_tokens = 256ll << 20;
  double max_doc_mib = 64;
  bool no_eos = false;
};

void prepare(const PrepareArgs& p) {
  const auto tok = exec::Tokenizer::load(p.tokenizer);
  exec::PrepareOptions o;
  o.corpus.extensions = p.extensions;
  o.corpus.max_document_bytes = static_cast<std::uint64_t>(p.max_doc_mib * 1024 * 1024);
  o.max_tokens_per_shard = p.shard_tokens;
  o.append_eos = !p.no_eos;
  std::vector<std::filesystem::path> sources(p.inputs.begin(), p.inputs.end());
  const auto r = exec::prepare_dataset(sources, tok, p.out, o);
  std::cout << core::str_cat("prepared ", p.out, ": ", r.corpus.files, " files, ", r.corpus.documents, " documents, ",
                             r.tokens, " tokens in ", r.shards, " shard(s); ", skipped_text(r.corpus), "\n");
}

void register_prepare(CLI::App& data) {
  auto p = std::make_shared<PrepareArgs>();
  auto* prepare_cmd = data.add_subcommand("prepare", "Tokenize text into Megatron-format shards plus manifest.json");
  prepare_cmd->add_option("inputs", p->inputs, "Text files, directories (recursive) and .jsonl files (\"text\" field)")
      ->required()
      ->check(CLI::ExistingPath);
  prepare_cmd->add_option("--tokenizer", p->tokenizer, "SentencePiece .model file")
      ->required()
      ->check(CLI::ExistingFile);
  prepare_cmd->add_option("--out", p->out, "Output dataset directory (must not exist)")->required();
  prepare_cmd->add_option("--ext", p->extensions, "In directories, take only files ending so (repeatable), e.g. .py");
  prepare_cmd->add_option("--shard-tokens", p->shard_tokens, "Start a new shard past this many tokens")
      ->check(cli::positive_number())
      ->capture_default_str();
  prepare_cmd->add_option("--max-doc-mib", p->max_doc_mib, "Skip larger documents")
      ->check(cli::positive_number())
      ->capture_default_str();
  prepare_cmd->add_flag("--no-eos", p->no_eos, "Do not end documents with the tokenizer's end-of-sequence token");
  prepare_cmd->callback([p] { prepare(*p); });
}

struct ExtendTokenizerArgs {
  std::string base, tokens_file, out;
  std::vector<std::string> learn, extensions, avoid;
  std::int64_t count = 256, domain_vocab = 0;
  double max_mib = 64;
  bool merge = false;
};

// The tokens to add: --tokens' lines, or learned from --learn's text (less --avoid's).
std::vector<std::string> tokens_to_add(const ExtendTokenizerArgs& e, const exec::Tokenizer& base) {
  std::vector<std::string> tokens;
  if (!e.tokens_file.empty()) {
    std::ifstream in(e.tokens_file);
    for (std::string line; std::getline(in, line);) tokens.push_back(line);
    return tokens;
  }
  if (e.learn.empty()) {
    throw core::ConfigError("data extend-tokenizer: expected --tokens FILE or --learn TEXT..., got neither");
  }
  const auto max_bytes = static_cast<std::uint64_t>(e.max_mib * 1024 * 1024);
  exec::CorpusOptions corpus;
  corpus.extensions = e.extensions;
  const auto docs =
      exec::sample_documents(std::vector<std::filesystem::path>(e.learn.begin(), e.learn.end()), corpus, max_bytes);
  std::vector<std::string> avoid;
  if (!e.avoid.empty()) {
    avoid = exec::sample_documents(std::vector<std::filesystem::path>(e.avoid.begin(), e.avoid.end()),
                                   exec::CorpusOptions{}, max_bytes);
  }
  return exec::learn_domain_tokens(docs, base, e.domain_vocab > 0 ? e.domain_vocab : 2 * base.vocab_size(), e.count,
                                   avoid, e.merge);
}

void extend_tokenizer(const ExtendTokenizerArgs& e) {
  const auto base = exec::Tokenizer::load(e.base);
  const auto tokens = tokens_to_add(e, base);
  const auto added =
      exec::extend_tokenizer(e.base, tokens, e.out, e.merge ? exec::ExtendMode::kMerge : exec::ExtendMode::kWhole);
  std::cout << core::str_cat("extended ", e.base, " (", base.vocab_size(), " pieces) with ", added.size(),
                             e.merge ? " merged" : " whole", " tokens -> ", e.out, " (",
                             base.vocab_size() + static_cast<std::int64_t>(added.size()), " pieces)\n");
}

void register_extend_tokenizer(CLI::App& data) {
  auto e = std::make_shared<ExtendTokenizerArgs>();
  auto* ext = data.add_subcommand("extend-tokenizer",
                                  "Add domain tokens to a tokenizer (existing ids unchanged), from a list or learned");
  ext->add_option("base", e->base, "Base SentencePiece .model")->required()->check(CLI::ExistingFile);
  ext->add_option("--out", e->out, "Output .model file")->required();
  auto* list = ext->add_option("--tokens", e->tokens_file, "File with one token per line")->check(CLI::ExistingFile);
  auto* learn = ext->add_option("--learn", e->learn, "Learn tokens from this domain text (files, directories, JSONL)")
                    ->check(CLI::ExistingPath);
  list->excludes(learn);
  ext->add_option("--ext", e->extensions, "With --learn: in directories, take only files ending so");
  ext->add_option("--avoid", e->avoid,
                  "With --learn: original-domain text; tokens not 10x more frequent in the new text are skipped")
      ->check(CLI::ExistingPath);
  ext->add_option("--count", e->count, "With --learn: tokens to add at most")
      ->check(cli::positive_number())
      ->capture_default_str();
  ext->add_option("--domain-vocab", e->domain_vocab,
                  "With --learn: vocabulary of the domain tokenizer (default: 2 x base)")
      ->check(CLI::Range(260, 1000000));
  ext->add_flag("--merge", e->merge,
                "Add the tokens as BPE pieces that merge like the base's (scored after them), not as whole "
                "user-defined tokens; with --learn, new characters and every intermediate piece are added too");
  ext->callback([e] { extend_tokenizer(*e); });
}

struct TrainTokenizerArgs {
  std::vector<std::string> inputs, extensions;
  std::string out, model_type = "bpe";
  std::int64_t vocab = 32000;
  double max_mib = 64;
};

void train_tokenizer(const TrainTokenizerArgs& t) {
  exec::CorpusOptions corpus;
  corpus.extensions = t.extensions;
  std::vector<std::filesystem::path> sources(t.inputs.begin(), t.inputs.end());
  const auto docs = exec::sample_documents(sources, corpus, static_cast<std::uint64_t>(t.max_mib * 1024 * 1024));
  exec::TokenizerTrainOptions o;
  o.vocab_size = t.vocab;
  o.model_type = t.model_type;
  exec::train_tokenizer(docs, o, t.out);
  std::cout << core::str_cat("trained ", t.out, ".model (", t.vocab, " pieces) on ", docs.size(), " documents\n");
}

void register_train_tokenizer(CLI::App& data) {
  auto t = std::make_shared<TrainTokenizerArgs>();
  auto* tok =
      data.add_subcommand("train-tokenizer", "Train a SentencePiece tokenizer (LLaMA-style: BPE, byte fallback)");
  tok->add_option("inputs", t->inputs, "Text files, directories and .jsonl files")
      ->required()
      ->check(CLI::ExistingPath);
  tok->add_option("--vocab-size", t->vocab, "Vocabulary size")->required()->check(CLI::Range(260, 1000000));
  tok->add_option("--out", t->out, "Output prefix: writes PREFIX.model and PREFIX.vocab")->required();
  tok->add_option("--ext", t->extensions, "In directories, take only files ending so (repeatable)");
  tok->add_option("--model-type", t->model_type, "bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  tok->add_option("--max-mib", t->max_mib, "Read at most this much text")
      ->check(cli::positive_number())
      ->capture_default_str();
  tok->callback([t] { train_tokenizer(*t); });
}

}  // namespace

void register_exec_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare token shards from text, directories or JSONL");
  data->require_subcommand(1);
  register_prepare(*data);
  register_extend_tokenizer(*data);
  register_train_tokenizer(*data);
}

}  // namespace cpt::cli
