#include "executor/io/vocab_extension.h"

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

CheckpointContents extend_vocabulary(const Checkpoint& base, const VocabExtension& e) {
  const auto& m = base.model();
  if (e.new_vocab < m.vocab) {
    throw core::ConfigError(core::str_cat("--vocab: expected at least the model's ", m.vocab, " tokens, got ", e.new_vocab));
  }
  CheckpointContents c;
  c.model = m;
  c.model.vocab = e.new_vocab;
  const auto st = base.weights();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(e.seed);
  for (const auto& name : st.names()) {
    auto t = st.load(name, torch::kFloat32);
    if ((name == "embed_tokens.weight" || name == "lm_head.weight") && e.new_vocab > m.vocab) {
      const auto extra = e.new_vocab - m.vocab;
      auto rows = t.mean(0, /*keepdim=*/true).expand({extra, t.size(1)}).clone();
      if (e.noise_std > 0) rows += at::normal(0.0, e.noise_std, rows.sizes(), gen, torch::TensorOptions(torch::kFloat32));
      t = torch::cat({t, rows}, 0);
    }
    c.weights.emplace_back(name, t);
  }
  c.trainer_state = {{"step", 0},
                     {"extended_from", base.dir().string()},
                     {"base_vocab", m.vocab},
                     {"new_vocab", e.new_vocab}};
  // The base run's peak learning rate travels on (lr.peak_fraction of a continual run reads it).
  if (base.trainer_state().contains("lr_peak")) c.trainer_state["lr_peak"] = base.trainer_state()["lr_peak"];
  return c;
}

}  // namespace cpt::exec
