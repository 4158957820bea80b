// cpt checkpoint export|import --format hf SRC DST, cpt checkpoint verify DIR
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/numeric_flags.h"
#include "core/error.h"
#include "core/json_reader.h"

#include "cli/cpt_exec/exec_commands.h"
#include "core/str_cat.h"
#include "executor/checkpoint/checkpoint.h"
#include "executor/io/model_weights.h"
#include "executor/data/tokenizer.h"
#include "executor/io/safetensors.h"
#include "executor/io/vocab_extension.h"
#include "core/atomic_file.h"
#include "core/output_directory.h"
#include "executor/model/llama_model.h"
#include "spec/model_io.h"

namespace cpt::cli {

namespace {

// export, import and verify: a source and a destination.
struct ConvertArgs {
  std::string format = "hf", src, dst;
};

void register_convert(CLI::App& ckpt) {
  auto a = std::make_shared<ConvertArgs>();
  auto* exp =
      ckpt.add_subcommand("export", "cpt checkpoint -> Hugging Face directory (config.json + model.safetensors)");
  exp->add_option("--format", a->format, "Target format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  exp->add_option("checkpoint", a->src, "cpt checkpoint directory (OUT/checkpoints/step_*)")->required();
  exp->add_option("out", a->dst, "Output directory (must not exist)")->required();
  exp->callback([a] {
    exec::export_hf(a->src, a->dst);
    // The class the export chose (Llama, Qwen2/3, Mixtral, Qwen3-MoE), as its config.json names it.
    const auto config = core::parse_json_file(std::filesystem::path(a->dst) / "config.json");
    const auto architecture = config.root().at("architectures").front().get<std::string>();
    std::cout << core::str_cat("exported ", a->src, " -> ", a->dst, " (Hugging Face ", architecture, ", fp32)\n");
  });
  auto* imp = ckpt.add_subcommand("import", "Hugging Face directory -> cpt checkpoint (weights only)");
  imp->add_option("--format", a->format, "Source format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  imp->add_option("hf_dir", a->src, "Directory with config.json and *.safetensors")->required();
  imp->add_option("out", a->dst, "Output checkpoint directory (must not exist)")->required();
  imp->callback([a] {
    core::create_parent_directory(a->dst);
    exec::import_hf(a->src, a->dst);
    std::cout << core::str_cat("imported ", a->src, " -> ", a->dst, "\n");
  });
  auto* ver = ckpt.add_subcommand("verify", "Check a checkpoint's files against its manifest");
  ver->add_option("checkpoint", a->src, "cpt checkpoint directory")->required();
  ver->callback([a] {
    const auto c = exec::Checkpoint::open(a->src);
    std::cout << core::str_cat(a->src, ": valid checkpoint of ", c.model().name, " at step ", c.step(),
                               c.has_optimizer() ? " (with optimizer state)" : " (weights only)", "\n");
  });
}

struct InitArgs {
  std::string model, out;
  std::uint64_t seed = 1234;
};

void init_checkpoint(const InitArgs& i) {
  exec::CheckpointContents c;
  c.model = spec::load_model(i.model, "--model");
  exec::LlamaModel model(c.model);
  model->init_weights(i.seed);
  c.weights = exec::checkpoint_tensors(*model);
  c.trainer_state = {{"step", 0}, {"seed", i.seed}};
  exec::write_checkpoint_dir(i.out, c);
  std::cout << core::str_cat("initialised ", c.model.name, " (", c.model.num_params(), " parameters) -> ", i.out, "\n");
}

void register_init(CLI::App& ckpt) {
  auto i = std::make_shared<InitArgs>();
  auto* init = ckpt.add_subcommand("init", "A freshly initialised model as a weights-only checkpoint (step 0)");
  init->add_option("--model", i->model, "Catalog name or model JSON / Hugging Face config.json")->required();
  init->add_option("--seed", i->seed, "Initialisation seed (the trainer's scheme)")->capture_default_str();
  init->add_option("out", i->out, "Output checkpoint directory (must not exist)")->required();
  init->callback([i] { init_checkpoint(*i); });
}

struct ForwardArgs {
  std::string checkpoint, tokens, out;
};

void forward(const ForwardArgs& f) {
  const bool hf = exec::is_hf_directory(f.checkpoint);
  const auto spec = hf ? exec::read_hf_model_spec(f.checkpoint) : exec::Checkpoint::open(f.checkpoint).model();
  exec::LlamaModel model(spec);
  exec::load_model_weights(*model, f.checkpoint);
  const auto tokens = exec::SafetensorsFile::open(f.tokens).load("tokens", torch::kInt64);
  if (tokens.dim() != 2) {
    throw core::ConfigError(core::str_cat(f.tokens, ": tokens: expected [batch, seq], got ", tokens.dim(), " dims"));
  }
  if (tokens.size(1) > spec.max_seq_len) {
    throw core::ConfigError(core::str_cat(f.tokens, ": tokens: expected at most the model's max_seq_len (",
                                          spec.max_seq_len, ") positions, got ", tokens.size(1)));
  }
  if (tokens.numel() > 0) {
    const auto lowest = tokens.min().item<std::int64_t>(), highest = tokens.max().item<std::int64_t>();
    if (lowest < 0 || highest >= spec.vocab) {
      throw core::ConfigError(core::str_cat(f.tokens, ": tokens: expected ids in 0..", spec.vocab - 1, ", got ",
                                            lowest < 0 ? lowest : highest));
    }
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const auto s = tokens.size(1);
  exec::Batch b{tokens, {}, torch::arange(s, torch::kInt64).unsqueeze(0).expand({tokens.size(0), s}).contiguous(),
                {},     0,  {}};
  core::prepare_output_file(f.out);
  exec::write_safetensors(f.out, {{"logits", model->forward(b).to(torch::kFloat32)}});
}

void register_forward(CLI::App& ckpt) {
  auto f = std::make_shared<ForwardArgs>();
  auto* fwd = ckpt.add_subcommand("forward", "Logits of a checkpoint for given tokens (fp32, CPU; for checks)");
  fwd->add_option("checkpoint", f->checkpoint, "cpt checkpoint or Hugging Face directory")->required();
  fwd->add_option("--tokens", f->tokens, "safetensors file with an int64 tensor \"tokens\" [batch, seq]")->required();
  fwd->add_option("--out", f->out, "safetensors file to write: \"logits\" [batch, seq, vocab] fp32")->required();
  fwd->callback([f] { forward(*f); });
}

struct ExtendArgs {
  std::string checkpoint, tokenizer, out;
  std::int64_t vocab = 0, pad_to = 1;
  double noise_std = 0;
  std::uint64_t seed = 0;
};

void extend_vocab(const ExtendArgs& x) {
  const auto base = exec::Checkpoint::open(x.checkpoint);
  std::int64_t n = x.vocab;
  if (!x.tokenizer.empty()) n = exec::Tokenizer::load(x.tokenizer).vocab_size();
  if (n == 0) throw core::ConfigError("checkpoint extend-vocab: expected --tokenizer or --vocab, got neither");
  n = (n + x.pad_to - 1) / x.pad_to * x.pad_to;
  const auto c = exec::extend_vocabulary(base, {n, x.noise_std, x.seed});
  exec::write_checkpoint_dir(x.out, c);
  auto model = spec::model_to_json(c.model);
  model["name"] = c.model.name + "-ext" + std::to_string(n);
  core::write_file_atomic(std::filesystem::path(x.out) / "model.json", model.dump(2) + "\n");
  std::cout << core::str_cat("extended ", base.model().name, " from ", base.model().vocab, " to ", n, " tokens -> ",
                             x.out, " (plan with --model ", x.out, "/model.json)\n");
}

void register_extend_vocab(CLI::App& ckpt) {
  auto x = std::make_shared<ExtendArgs>();
  auto* ext =
      ckpt.add_subcommand("extend-vocab", "Grow embedding and LM head for an extended tokenizer (new rows = mean)");
  ext->add_option("checkpoint", x->checkpoint, "Base cpt checkpoint (or import a Hugging Face model first)")
      ->required();
  auto* by_tok =
      ext->add_option("--tokenizer", x->tokenizer, "The extended SentencePiece model: its size is the new vocabulary");
  auto* by_n = ext->add_option("--vocab", x->vocab, "The new vocabulary size")->check(cli::positive_number());
  by_tok->excludes(by_n);
  ext->add_option("--pad-to-multiple", x->pad_to, "Round the vocabulary up to a multiple (e.g. 128 x TP)")
      ->check(cli::positive_number())
      ->capture_default_str();
  ext->add_option("--noise-std", x->noise_std, "Standard deviation of noise added to the new rows")
      ->check(CLI::NonNegativeNumber);
  ext->add_option("--seed", x->seed, "Noise seed");
  ext->add_option("out", x->out, "Output checkpoint directory (must not exist); also writes OUT/model.json")
      ->required();
  ext->callback([x] { extend_vocab(*x); });
}

}  // namespace

void register_exec_checkpoint_command(CLI::App& app) {
  auto* ckpt = app.add_subcommand("checkpoint", "Verify checkpoints; convert to and from Hugging Face format");
  ckpt->require_subcommand(1);
  register_convert(*ckpt);
  register_init(*ckpt);
  register_forward(*ckpt);
  register_extend_vocab(*ckpt);
}

}  // namespace cpt::cli
