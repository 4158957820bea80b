#include "spec/pipeline_schedule.h"

#include <algorithm>

#include "core/check.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

std::string to_string(ActionKind k) {
  switch (k) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendActivation:
      return "SA";
    case ActionKind::kRecvActivation:
      return "RA";
    case ActionKind::kSendGrad:
      return "SG";
    case ActionKind::kRecvGrad:
      return "RG";
  }
  return "?";
}

std::string to_string(const Action& a) { return str_cat(to_string(a.kind), a.stage, ".", a.microbatch); }

namespace {

// Appends the compute action with its communication: receive before, send after.
void emit_forward(std::vector<Action>& out, int stage, int mb, int num_stages) {
  if (stage > 0) out.push_back({ActionKind::kRecvActivation, stage, mb});
  out.push_back({ActionKind::kForward, stage, mb});
  if (stage < num_stages - 1) out.push_back({ActionKind::kSendActivation, stage, mb});
}

void emit_backward(std::vector<Action>& out, int stage, int mb, int num_stages,
                   ActionKind kind = ActionKind::kBackward) {
  if (stage < num_stages - 1) out.push_back({ActionKind::kRecvGrad, stage, mb});
  out.push_back({kind, stage, mb});
  if (stage > 0) out.push_back({ActionKind::kSendGrad, stage, mb});
}

struct Unit {
  int chunk;
  int microbatch;
};

// Megatron's interleaved order: microbatches in rounds of pp; each round runs through every chunk
// (forward: chunks 0..v−1; backward: v−1..0) before the next round starts.
std::vector<Unit> interleaved_order(int pp, int v, int m, bool backward) {
  std::vector<Unit> order;
  for (int start = 0; start < m; start += pp) {
    const int round = std::min(pp, m - start);
    for (int c = 0; c < v; ++c) {
      const int chunk = backward ? v - 1 - c : c;
      for (int i = 0; i < round; ++i) order.push_back({chunk, start + i});
    }
  }
  return order;
}

}  // namespace

PipelineSchedule make_schedule(ScheduleKind kind, int pp, int v, int m) {
  CPT_CHECK(pp >= 1 && m >= 1 && v >= 1, "pp ", pp, " virtual_stages ", v, " microbatches ", m);
  CPT_CHECK(kind == ScheduleKind::kInterleaved1F1B || v == 1, to_string(kind), " takes virtual_stages 1, got ", v);
  // (ZB-H1 with pp == 1 is F, I, W per microbatch: valid, and the same work as 1F1B.)
  CPT_CHECK(kind != ScheduleKind::kInterleaved1F1B || (pp >= 2 && v >= 2 && m % pp == 0),
            "interleaved_1f1b needs pp >= 2, v >= 2, m % pp == 0; got pp ", pp, " v ", v, " m ", m);
  PipelineSchedule s{kind, pp, v, m, std::vector<std::vector<Action>>(static_cast<std::size_t>(pp))};
  const int stages = pp * v;
  for (int r = 0; r < pp; ++r) {
    auto& out = s.per_rank[static_cast<std::size_t>(r)];
    switch (kind) {
      case ScheduleKind::kGPipe:
        for (int mb = 0; mb < m; ++mb) emit_forward(out, r, mb, stages);
        for (int mb = 0; mb < m; ++mb) emit_backward(out, r, mb, stages);
        break;
      case ScheduleKind::k1F1B: {
        const int warmup = std::min(pp - r - 1, m);
        for (int mb = 0; mb < warmup; ++mb) emit_forward(out, r, mb, stages);
        for (int i = 0; i < m - warmup; ++i) {
          emit_forward(out, r, warmup + i, stages);
          emit_backward(out, r, i, stages);
        }
        for (int mb = m - warmup; mb < m; ++mb) emit_backward(out, r, mb, stages);
        break;
      }
      case ScheduleKind::kInterleaved1F1B: {
        const auto fwd = interleaved_order(pp, v, m, false);
        const auto bwd = interleaved_order(pp, v, m, true);
        const int total = m * v;
        // Megatron: all forwards first when m == pp; otherwise (pp − r − 1)·2 + (v − 1)·pp.
        const int warmup = m == pp ? total : std::min(total, (pp - r - 1) * 2 + (v - 1) * pp);
        auto stage = [&](const Unit& u) { return u.chunk * pp + r; };
        for (int i = 0; i < warmup; ++i) {
          emit_forward(out, stage(fwd[static_cast<std::size_t>(i)]), fwd[static_cast<std::size_t>(i)].microbatch, stages);
        }
        for (int i = 0; i < total - warmup; ++i) {
          const auto& f = fwd[static_cast<std::size_t>(warmup + i)];
          emit_forward(out, stage(f), f.microbatch, stages);
          const auto& b = bwd[static_cast<std::size_t>(i)];
          emit_backward(out, stage(b), b.microbatch, stages);
        }
        for (int i = total - warmup; i < total; ++i) {
          const auto& b = bwd[static_cast<std::size_t>(i)];
          emit_backward(out, stage(b), b.microbatch, stages);
        }
        break;
      }
      case ScheduleKind::kZeroBubbleH1:
        // At step x, rank r runs F(x), I(x − (pp − 1 − r)), W(x − (pp − 1)), each when its index is in
        // [0, m): 1F1B's forward/input-gradient order, with rank r's weight-gradient parts running r
        // microbatches behind its input-gradient parts (rank 0 runs W right after I, the last rank
        // pp − 1 behind), so that they fill the bubbles of the drain. Every rank has at most pp
        // microbatches whose W is pending (rank 0's 1F1B peak).
        for (int x = 0; x < m + pp - 1; ++x) {
          if (x < m) emit_forward(out, r, x, stages);
          if (const int i = x - (pp - 1 - r); i >= 0 && i < m) {
            emit_backward(out, r, i, stages, ActionKind::kBackwardInput);
          }
          if (const int w = x - (pp - 1); w >= 0 && w < m) out.push_back({ActionKind::kBackwardWeight, r, w});
        }
        break;
    }
  }
  return s;
}

double max_live_weight(const PipelineSchedule& schedule, int pp_rank, std::span<const double> weight_of_stage) {
  CPT_CHECK(pp_rank >= 0 && pp_rank < schedule.pp, "pp_rank ", pp_rank, " of ", schedule.pp);
  CPT_CHECK(static_cast<int>(weight_of_stage.size()) == schedule.num_stages(), "weights for ",
            weight_of_stage.size(), " stages, schedule has ", schedule.num_stages());
  double live = 0;
  double peak = 0;
  for (const Action& a : schedule.per_rank[static_cast<std::size_t>(pp_rank)]) {
    const double w = weight_of_stage[static_cast<std::size_t>(a.stage)];
    if (a.kind == ActionKind::kForward) peak = std::max(peak, live += w);
    // Activations are released by the backward, or for a split backward by its weight part: the
    // weight gradients need the inputs of every linear layer, most of a block's activations, so
    // the whole is counted until W (an upper bound by the input gradients' share).
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) live -= w;
  }
  return peak;
}

int max_in_flight(const PipelineSchedule& schedule, int pp_rank) {
  const std::vector<double> ones(static_cast<std::size_t>(schedule.num_stages()), 1.0);
  return static_cast<int>(max_live_weight(schedule, pp_rank, ones) + 0.5);
}

int in_flight_closed_form(ScheduleKind kind, int pp, int v, int m, int r) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return m;
    case ScheduleKind::k1F1B:
      return std::min(pp - r, m);
    case ScheduleKind::kZeroBubbleH1:
      return std::min(pp, m);
    case ScheduleKind::kInterleaved1F1B: {
      const int total = m * v;
      if (m == pp) return total;
      return std::min(total, (pp - r - 1) * 2 + (v - 1) * pp + 1);
    }
  }
  return m;
}

std::string to_csv(const PipelineSchedule& schedule) {
  std::string out;
  for (const auto& rank : schedule.per_rank) {
    std::vector<std::string> row;
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kRecvActivation ||
          a.kind == ActionKind::kSendGrad || a.kind == ActionKind::kRecvGrad) {
        continue;
      }
      row.push_back(to_string(a));
    }
    out += core::join(row, ",") + "\n";
  }
  return out;
}

}  // namespace cpt::spec
