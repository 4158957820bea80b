#pragma once
// One evaluation set's loss through a continual pre-training run, as a function of the
// learning-rate areas (lr_areas.h) and the replay share r (the share of the training mixture that
// is not the new data):
//
//   L = L0 + A · exp(−r/ρ) · ([1 − (1 + (1 − r)·S1/σ)^(−β)] − q·[1 − exp(−r·S1/τ)]) − C·S2
//
// Wang et al. 2025 (arXiv 2505.07796) describe a continual run's loss as the base model's curve
// plus a distribution-shift term, a saturating power law of the forward area spent in continual
// training, and the annealing term C·S2 of Tissue et al. 2024. Here the shift counts only the new
// data's share of the forward area, (1 − r)·S1, and its size falls with replay the way a domain's
// loss falls with its share of the mixture in Ye et al. 2024's data mixing law (exponential in the
// proportion, arXiv 2403.16952). A > 0: the set is forgotten (the original domain); A < 0: it is
// learned (the new one). With replay the original domain's loss rises early and falls back as the
// replayed data is seen again: q is the share of the forgetting that replay wins back, τ the
// replay area (r·S1) over which it does. The base curve's own slope is left out: a continual run starts from a
// trained model whose pre-training curve is flat over a continual run's length.
//
// Fitted per evaluation set by least squares (Levenberg–Marquardt) to pilot runs' eval.jsonl:
// L0, A, σ and β always; ρ only when the pilots span at least two replay shares (with one, the
// factor exp(−r/ρ) is part of A and the law predicts at that share alone); C only when asked, from
// pilots that ran their schedule's decay to the end (the start of a decay barely separates C·S2
// from the shift's curvature, and a C fitted there extrapolates to nonsense: docs/continual.md);
// q and τ only for a forgotten set (A > 0) trained with replay, and only when Schwarz's criterion
// prefers them.
#include <array>
#include <span>
#include <string>

namespace cpt::forecast {

// Where on a run a loss is read.
struct LawInput {
  double replay_share = 0;    // r in [0, 1)
  double forward_area = 0;    // S1
  double annealing_area = 0;  // S2
};

struct LossLaw {
  double start_loss = 0;     // L0
  double shift = 0;          // A
  double replay_scale = 0;   // ρ; 0 when not fitted (exp(−r/ρ) taken as 1)
  double area_scale = 1;     // σ, in learning-rate × steps
  double exponent = 1;       // β
  double recovery = 0;       // q: the share of the forgetting replay wins back
  double recovery_area = 1;  // τ
  double annealing = 0;      // C ≥ 0: a decaying rate lowers the loss (Tissue et al.); 0 when not fitted

  [[nodiscard]] double at(const LawInput& where) const;
};

struct Observation {
  LawInput where;
  double loss = 0;
};

inline constexpr int kLawParameters = 8;

// Replay shares closer than this are one share (ρ is fitted only across distinct ones).
inline constexpr double kSameReplayShare = 1e-3;

struct LawFit {
  LossLaw law;
  bool replay_fitted = false;     // ρ was fitted (the observations span two replay shares or more)
  bool annealing_fitted = false;  // C was fitted (else 0)
  bool recovery_fitted = false;   // q and τ were fitted (else q = 0)
  double replay_share = 0;        // with ρ not fitted: the one replay share the law speaks for
  int observations = 0;
  int parameters = 0;
  double residual_sd = 0;  // of the fit, in loss (nats)
  // The fitted parameters' covariance in the fit's own coordinates (L0, A, ln ρ, ln σ, ln β, ln C, logit q, ln τ),
  // row-major, zero where a parameter was not fitted.
  std::array<double, kLawParameters * kLawParameters> covariance{};
};

// ConfigError (via `what`, which names the data) when there are fewer distinct observations than
// parameters plus one, when the observations' replay shares are not all in [0, 1) or an area is
// not finite, or when no fit is finite. C is fitted only with `fit_annealing` and some S2 > 0.
LawFit fit_loss_law(std::span<const Observation> observations, bool fit_annealing, const std::string& what);

// A prediction with its interval: the loss ± 2 standard errors (the parameters' covariance
// propagated through the law, and the fit's residual scatter).
struct LossForecast {
  double loss = 0;
  double low = 0;
  double high = 0;
};

LossForecast forecast_loss(const LawFit& fit, const LawInput& where);

// Whether the fit can speak for `replay_share`: any share when ρ was fitted, else its own.
bool speaks_for(const LawFit& fit, double replay_share);

}  // namespace cpt::forecast
