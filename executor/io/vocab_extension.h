#pragma once
// Vocabulary extension of a model for continual pre-training (executor-reference.md §3.6): the
// embedding and an untied LM head grow to `new_vocab` rows; existing rows are copied bit for bit,
// new rows are the mean of the existing rows (plus optional Gaussian noise), so the extended model
// gives the base model's logits on text without the new tokens (its extra logit columns aside).
#include <cstdint>

#include "executor/checkpoint/checkpoint.h"

namespace cpt::exec {

struct VocabExtension {
  std::int64_t new_vocab = 0;  // >= the checkpoint's vocabulary
  double noise_std = 0;        // added to the mean rows
  std::uint64_t seed = 0;
};

// A weights-only checkpoint (step 0) of the extended model. ConfigError when new_vocab is smaller
// than the checkpoint's vocabulary.
CheckpointContents extend_vocabulary(const Checkpoint& base, const VocabExtension& extension);

}  // namespace cpt::exec
