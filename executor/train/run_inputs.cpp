#include "executor/train/run_inputs.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "executor/data/prepare_dataset.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

Tokenizer ready_tokenizer(const TokenizerConfig& t, const fs::path& out_dir) {
  if (t.model) return Tokenizer::load(*t.model);
  const auto prefix = out_dir / "tokenizer";
  const auto model = fs::path(prefix.string() + ".model");
  if (fs::exists(model)) {
    core::info0("tokenizer: reusing ", model.string());
    return Tokenizer::load(model);
  }
  CorpusOptions corpus;
  corpus.extensions = t.train_extensions;
  const auto docs = sample_documents(t.train_sources, corpus, t.train_max_bytes);
  core::info0("tokenizer: training a ", t.train_vocab_size, "-piece BPE model on ", docs.size(), " documents");
  TokenizerTrainOptions options;
  options.vocab_size = t.train_vocab_size;
  train_tokenizer(docs, options, prefix);
  return Tokenizer::load(model);
}

std::shared_ptr<const TokenDataset> ready_dataset(const DataSetConfig& d, const std::optional<Tokenizer>& tokenizer,
                                                  const fs::path& out_dir) {
  if (d.path) return std::make_shared<const TokenDataset>(TokenDataset::open(*d.path));
  const auto dir = out_dir / "data" / d.name;
  std::vector<std::string> wanted;
  for (const auto& s : d.sources) wanted.push_back(fs::absolute(s).string());
  if (fs::exists(dir / "manifest.json")) {
    const auto doc = core::parse_json_file(dir / "manifest.json");
    const auto& m = doc.root();
    if (m.value("tokenizer_fingerprint", "") == tokenizer->fingerprint() &&
        m.value("sources", std::vector<std::string>{}) == wanted) {
      return std::make_shared<const TokenDataset>(TokenDataset::open(dir));
    }
    throw core::ConfigError(str_cat(dir.string(), ": prepared for other sources or another tokenizer than data set \"",
                                    d.name, "\" now names; delete it to prepare again"));
  }
  core::create_parent_directory(dir);
  PrepareOptions options;
  options.corpus.extensions = d.extensions;
  const auto r = prepare_dataset(d.sources, *tokenizer, dir, options);
  core::info0("data: prepared \"", d.name, "\": ", r.corpus.documents, " documents, ", r.tokens, " tokens in ",
              r.shards, " shard(s)");
  return std::make_shared<const TokenDataset>(TokenDataset::open(dir));
}

void check_vocab(const DataSetConfig& d, const TokenDataset& data, const std::optional<Tokenizer>& tokenizer,
                 const spec::ModelSpec& model) {
  if (data.vocab_size() > model.vocab) {
    throw core::ConfigError(str_cat("data set \"", d.name, "\" (", data.dir().string(), "): tokenized with a ",
                                    data.vocab_size(), "-token vocabulary, but model ", model.name, " has ",
                                    model.vocab, " (extend the model's vocabulary or use its tokenizer)"));
  }
  if (tokenizer && data.tokenizer_fingerprint() != tokenizer->fingerprint()) {
    throw core::ConfigError(str_cat("data set \"", d.name, "\" (", data.dir().string(), "): tokenized with tokenizer ",
                                    data.tokenizer_fingerprint(), ", not with the run's tokenizer ",
                                    tokenizer->path().string(), " (", tokenizer->fingerprint(), ")"));
  }
}

}  // namespace

RunInputs prepare_run_inputs(const TrainConfig& config, const spec::ModelSpec& model, const fs::path& out_dir) {
  RunInputs in;
  if (config.tokenizer) {
    in.tokenizer = ready_tokenizer(*config.tokenizer, out_dir);
    if (in.tokenizer->vocab_size() > model.vocab) {
      throw core::ConfigError(str_cat(config.origin.string(), ": $.tokenizer: a ", in.tokenizer->vocab_size(),
                                      "-token vocabulary does not fit model ", model.name, " (vocab ", model.vocab,
                                      ")"));
    }
  }
  for (const auto& d : config.data) {
    auto data = ready_dataset(d, in.tokenizer, out_dir);
    check_vocab(d, *data, in.tokenizer, model);
    in.train.push_back(DataSource{d.name, data, d.weight});
  }
  for (const auto& d : config.eval) {
    auto data = ready_dataset(d, in.tokenizer, out_dir);
    check_vocab(d, *data, in.tokenizer, model);
    in.eval.push_back(DataSource{d.name, data, 1.0});
    in.eval_sequences.push_back(d.eval_sequences);
  }
  if (config.ewc) {
    auto data = ready_dataset(config.ewc->data, in.tokenizer, out_dir);
    check_vocab(config.ewc->data, *data, in.tokenizer, model);
    in.ewc = DataSource{config.ewc->data.name, data, 1.0};
  }
  return in;
}

}  // namespace cpt::exec
