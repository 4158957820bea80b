#include "spec/parallel_config.h"

#include <algorithm>
#include <limits>

#include "core/str_cat.h"
#include "spec/sequence_split.h"

namespace cpt::spec {

using core::str_cat;

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved_1f1b";
    case ScheduleKind::kZeroBubbleH1:
      return "zb_h1";
  }
  return "?";
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

std::string to_string(Offload o) {
  switch (o) {
    case Offload::kNone:
      return "none";
    case Offload::kOptimizer:
      return "optimizer";
    case Offload::kOptimizerAndParams:
      return "optimizer+params";
  }
  return "?";
}

std::string to_string(Axis a) {
  switch (a) {
    case Axis::kTp:
      return "tp";
    case Axis::kCp:
      return "cp";
    case Axis::kDp:
      return "dp";
    case Axis::kPp:
      return "pp";
  }
  return "?";
}

int ParallelConfig::degree(Axis a) const {
  switch (a) {
    case Axis::kTp:
      return tp;
    case Axis::kCp:
      return cp;
    case Axis::kDp:
      return dp;
    case Axis::kPp:
      return pp;
  }
  return 0;
}

int ParallelConfig::sequence_length_multiple() const {
  return spec::sequence_length_multiple(cp, sequence_parallel ? tp : 1);
}

namespace {

// Expert parallelism's rules (ParallelConfig::ep, etp).
void find_expert_parallel_errors(const ParallelConfig& c, const ModelSpec& m, std::vector<std::string>& e) {
  if (m.moe.present() && c.tp > 1 && !c.sequence_parallel) {
    e.push_back(str_cat("a mixture of experts with tp (", c.tp,
                        ") > 1 needs sequence_parallel (--sequence-parallel; its MoE layers run on the "
                        "sequence-parallel shard, as Megatron-LM requires)"));
  }
  if (m.moe.present() && c.hybrid_shard) {
    e.push_back("hybrid_shard with a mixture of experts is not modelled (experts shard over expert-dp)");
  }
  if (m.moe.present() && c.axis_order.back() != Axis::kPp) {
    // Expert groups fold over a stage's consecutive ranks, whatever ep and etp.
    e.push_back(str_cat("a mixture of experts needs pp as the outermost axis of axis_order, got ",
                        to_string(c.axis_order.back())));
  }
  if (c.ep == 1 && c.etp == 1) return;
  if (!m.moe.present()) {
    e.push_back(
        str_cat("ep (", c.ep, ") and etp (", c.etp, ") need a mixture-of-experts model; ", m.name, " is dense"));
    return;
  }
  const std::int64_t stage_ranks = std::int64_t{c.tp} * c.cp * c.dp, expert_ranks = std::int64_t{c.ep} * c.etp;
  if (stage_ranks % expert_ranks != 0) {
    e.push_back(str_cat("ep (", c.ep, ") * etp (", c.etp, ") = ", expert_ranks,
                        " must divide tp * cp * dp = ", stage_ranks, " (the ranks of a pipeline stage)"));
  }
  if (m.moe.experts % c.ep != 0) {
    e.push_back(str_cat("moe.experts (", m.moe.experts, ") must be divisible by ep (", c.ep, ")"));
  }
  if (m.moe.expert_ffn_hidden % c.etp != 0) {
    e.push_back(
        str_cat("moe.expert_ffn_hidden (", m.moe.expert_ffn_hidden, ") must be divisible by etp (", c.etp, ")"));
  }
}

}  // namespace

std::vector<std::string> find_parallel_config_errors(const ParallelConfig& c, const ModelSpec& m, int seq_len,
                                                     int world_size) {
  std::vector<std::string> e;
  auto positive = [&](const char* name, int v) {
    if (v < 1) e.push_back(str_cat(name, " must be >= 1, got ", v));
  };
  positive("tp", c.tp);
  positive("cp", c.cp);
  positive("dp", c.dp);
  positive("pp", c.pp);
  positive("virtual_stages", c.virtual_stages);
  positive("micro_batch", c.micro_batch);
  positive("global_batch", c.global_batch);
  positive("ep", c.ep);
  positive("etp", c.etp);
  if (!e.empty()) return e;  // the checks below divide by these
  const std::int64_t world = std::int64_t{c.tp} * c.cp * c.dp * c.pp;
  if (world > std::numeric_limits<int>::max()) {
    return {str_cat("tp (", c.tp, ") * cp (", c.cp, ") * dp (", c.dp, ") * pp (", c.pp, ") = ", world,
                    " GPUs: more than any cluster")};
  }

  if (world_size > 0 && c.world_size() != world_size) {
    e.push_back(str_cat("tp (", c.tp, ") * cp (", c.cp, ") * dp (", c.dp, ") * pp (", c.pp, ") = ", c.world_size(),
                        " != number of GPUs (", world_size, ")"));
  }
  if (m.heads % c.tp != 0) e.push_back(str_cat("heads (", m.heads, ") must be divisible by tp (", c.tp, ")"));
  if (m.kv_heads % c.tp != 0) {
    e.push_back(str_cat("kv_heads (", m.kv_heads, ") must be divisible by tp (", c.tp, ")"));
  }
  if (m.ffn_hidden % c.tp != 0) {
    e.push_back(str_cat("ffn_hidden (", m.ffn_hidden, ") must be divisible by tp (", c.tp, ")"));
  }
  if (c.cp > 1 && seq_len > 0) {
    if (auto split = find_sequence_split_error(seq_len, c.cp)) e.push_back(*split);
  }
  if (seq_len > m.max_seq_len && seq_len > 0) {
    e.push_back(str_cat("seq_len (", seq_len, ") exceeds the model's max_seq_len (", m.max_seq_len, ")"));
  }
  if (c.num_stages() > m.layers) {
    e.push_back(str_cat("pp (", c.pp, ") * virtual_stages (", c.virtual_stages, ") = ", c.num_stages(),
                        " stages exceed layers (", m.layers, ")"));
  }
  if (c.virtual_stages > 1 && c.schedule != ScheduleKind::kInterleaved1F1B) {
    e.push_back(str_cat("virtual_stages (", c.virtual_stages, ") > 1 needs schedule interleaved_1f1b, got ",
                        to_string(c.schedule)));
  }
  if (c.schedule == ScheduleKind::kInterleaved1F1B) {
    if (c.pp < 2) e.push_back(str_cat("schedule interleaved_1f1b needs pp >= 2, got pp = ", c.pp));
    if (c.virtual_stages < 2) {
      e.push_back(str_cat("schedule interleaved_1f1b needs virtual_stages >= 2, got ", c.virtual_stages));
    }
  }
  if (c.global_batch > kMaxGlobalBatch) {
    e.push_back(str_cat("global_batch must be at most ", kMaxGlobalBatch, " sequences, got ", c.global_batch));
  } else if (c.global_batch % c.sequences_per_microbatch() != 0) {
    e.push_back(str_cat("global_batch (", c.global_batch, ") must be divisible by micro_batch (", c.micro_batch,
                        ") * dp (", c.dp, ") = ", c.sequences_per_microbatch()));
  } else if (c.schedule == ScheduleKind::kInterleaved1F1B && c.pp >= 2 && c.grad_accum() % c.pp != 0) {
    // Megatron's interleaved schedule groups microbatches in rounds of pp.
    e.push_back(str_cat("schedule interleaved_1f1b needs microbatches per step (", c.grad_accum(),
                        ") divisible by pp (", c.pp, ")"));
  }
  if (c.zero_stage < 0 || c.zero_stage > 3) e.push_back(str_cat("zero_stage must be 0..3, got ", c.zero_stage));
  if (c.hybrid_shard && c.zero_stage != 3) {
    e.push_back(str_cat("hybrid_shard needs zero_stage 3, got zero_stage ", c.zero_stage));
  }
  if (c.sequence_parallel && c.tp < 2) e.push_back(str_cat("sequence_parallel needs tp >= 2, got tp = ", c.tp));
  if (c.offload == Offload::kOptimizerAndParams && c.zero_stage != 3) {
    e.push_back(str_cat("offload optimizer+params needs zero_stage 3, got zero_stage ", c.zero_stage));
  }
  auto order = c.axis_order;
  std::sort(order.begin(), order.end());
  if (order != std::array<Axis, kNumAxes>{Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp}) {
    e.push_back("axis_order must name each of tp, cp, dp, pp exactly once");
  }
  find_expert_parallel_errors(c, m, e);
  return e;
}

}  // namespace cpt::spec
