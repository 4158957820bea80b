#pragma once
// TRAIN.json: what to train on and how, everything the plan does not say (the plan gives the model,
// the parallel layout, the sequence length and the batch). Keys and defaults: docs/train_config.md.
// Relative paths are relative to the directory of TRAIN.json.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "spec/gradient_buckets.h"
#include "spec/lr_schedule.h"

namespace cpt::spec {

// AdamW's hyperparameters besides the learning rate (Loshchilov & Hutter 2019; the defaults are
// those of LLaMA's pretraining).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// How documents become sequences: packed end to end (the default), or one per sequence, padded.
enum class Packing { kPacked, kPadded };

// A data set: either prepared shards (`path`, from `cpt data prepare`) or raw text (`sources`,
// prepared into OUT/data/<name>/ on first use with the run's tokenizer).
struct DataSetConfig {
  std::string name;
  std::optional<std::filesystem::path> path;
  std::vector<std::filesystem::path> sources;
  std::vector<std::string> extensions;  // filter for directories in `sources`
  double weight = 1.0;                  // training mixture share
  std::int64_t eval_sequences = 0;      // evaluation sets: sequences evaluated (the first ones, in order)
};

struct TokenizerConfig {
  std::optional<std::filesystem::path> model;  // an existing SentencePiece .model
  // Or train one into OUT/tokenizer.model on first use:
  std::int64_t train_vocab_size = 0;
  std::vector<std::filesystem::path> train_sources;
  std::vector<std::string> train_extensions;
  std::uint64_t train_max_bytes = 64ull << 20;
};

// KL distillation against the frozen base model (regularizers.h).
struct DistillConfig {
  double lambda = 0.1;
  std::optional<std::filesystem::path> teacher;  // default: init_from
  // Guard: when the step's KL stays above `guard_threshold` for `guard_patience` steps, the
  // learning rate is multiplied by `guard_lr_factor` (again after every further `patience` steps).
  std::optional<double> guard_threshold;
  double guard_lr_factor = 0.5;
  std::int64_t guard_patience = 20;
};

// Elastic weight consolidation around the starting weights (regularizers.h).
struct EwcConfig {
  double lambda = 100;
  DataSetConfig data;           // original-domain text for the Fisher estimate
  std::int64_t sequences = 64;  // sequences in the estimate
};

struct CheckpointConfig {
  std::int64_t interval_steps = 0;  // 0: only the final checkpoint
  int keep_last = 2;                // interval checkpoints kept (the newest ones)
};

struct TrainConfig {
  std::filesystem::path origin;  // the file, for messages
  std::vector<DataSetConfig> data;
  std::vector<DataSetConfig> eval;
  std::int64_t eval_interval_steps = 0;      // 0: evaluate only at the end
  bool eval_at_start = false;                // also evaluate the starting weights (step 0)
  std::optional<TokenizerConfig> tokenizer;  // required when a data set has `sources`
  std::optional<std::int64_t> steps;
  std::optional<std::int64_t> tokens;
  // Passes over the training mixture's scarcest data set (spec/token_budget.h); one of steps,
  // tokens and epochs at most.
  std::optional<double> epochs;
  LrSchedule lr;
  // "lr": {"peak_fraction": f} instead of "peak": the peak is f times the peak of the run that
  // wrote init_from (recorded in its checkpoint), as continual recipes state it ("re-warm to 1/10
  // of the pretraining peak"; docs/continual.md has the evidence for and against).
  std::optional<double> lr_peak_fraction;
  // "lr": {"warmup_fraction": w} instead of "warmup_steps": w of the run's steps (Ibrahim et al.
  // 2024 re-warm over 1%).
  std::optional<double> lr_warmup_fraction;
  AdamWOptions optimizer;
  double grad_clip = 1.0;  // max global gradient L2 norm; 0 disables clipping
  CheckpointConfig checkpoint;
  Packing packing = Packing::kPacked;
  std::uint64_t seed = 1234;
  std::optional<std::filesystem::path> init_from;  // a cpt checkpoint or a Hugging Face directory
  // "init_optimizer": "keep" continues init_from's AdamW moments and step count (a cpt checkpoint
  // with optimizer state and the same parameter shapes); "reset" (default) starts them at zero.
  bool keep_optimizer_state = false;
  std::optional<DistillConfig> distill;
  std::optional<EwcConfig> ewc;
  std::string device = "auto";     // auto | cpu | cuda
  int threads = 0;                 // intra-op CPU threads; 0 = LibTorch's default
  int collective_timeout_s = 300;  // a collective slower than this ends the job (all ranks)
  // Data-parallel gradient bucket size (replicated buckets and ZeRO-1/2's reduce-scatter buckets).
  double dp_bucket_mib = static_cast<double>(kDefaultGradientBucketBytes) / (1024 * 1024);
  std::int64_t log_interval_steps = 1;
  // Mixtures of experts: the weight of the auxiliary load-balancing loss (executor/model/moe_mlp.h)
  // in the objective; Switch Transformer's α (Fedus et al. 2022, §2.2). Unused by dense models.
  double router_aux_loss = 0.01;
  // That loss over each microbatch's tokens ("aux_loss", Switch Transformer's) or averaged over its
  // sequences ("seq_aux_loss", DeepSeek-V3's sequence-wise balance loss); Megatron-Core's
  // --moe-router-load-balancing-type names.
  bool router_aux_loss_per_sequence = false;
  // Mixtures of experts with an expert bias (spec::ExpertSpec::expert_bias): the step u by which
  // each expert's bias moves every step against its load (DeepSeek-V3's bias update speed γ,
  // arXiv:2412.19437 §2.1.2; Megatron-Core's --moe-router-bias-update-rate). Unused otherwise.
  double expert_bias_update_rate = 1e-3;
};

// Strict: unknown keys, wrong types and out-of-range values are ConfigErrors naming the file and key.
TrainConfig load_train_config(const std::filesystem::path& path);
// The same from a parsed document; relative paths resolve against `base`, errors name `origin`'s
// reader. (The fuzz harness reads documents without files.)
TrainConfig train_config_from_json(core::JsonObjectReader& reader, const std::filesystem::path& base,
                                   const std::filesystem::path& origin);

}  // namespace cpt::spec
