// cpt models list|show NAME [--json]: the built-in model catalog, or any model file.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cpt/commands.h"
#include "cli/output.h"
#include "core/str_cat.h"
#include "core/text_table.h"
#include "spec/model_catalog.h"
#include "spec/model_io.h"

namespace cpt::cli {
namespace {

using core::str_cat;

struct ListOptions {
  bool json = false;
};

struct ShowOptions {
  std::string name;
  bool json = false;
};

core::Json params_json(const spec::ModelSpec& m) {
  const auto c = m.param_counts();
  return {{"total", c.total},
          {"embedding", c.embedding},
          {"position", c.position},
          {"per_layer", c.per_layer},
          {"attention_per_layer", c.attention_per_layer},
          {"mlp_per_layer", c.mlp_per_layer},
          {"norms_per_layer", c.norms_per_layer},
          {"attention_replicated_per_layer", c.attention_replicated_per_layer},
          {"final_norm", c.final_norm},
          {"lm_head", c.lm_head},
          {"active", c.active},
          {"dense_layers", c.dense_layers},
          {"moe_layers", c.moe_layers},
          {"per_moe_layer", c.per_moe_layer},
          {"router_per_layer", c.router_per_layer},
          {"shared_experts_per_layer", c.shared_experts_per_layer},
          {"routed_experts_per_layer", c.routed_experts_per_layer}};
}

void run_list(const ListOptions& o) {
  if (o.json) {
    core::Json out = core::Json::array();
    for (const auto& e : spec::model_catalog()) {
      out.push_back({{"model", spec::model_to_json(e.spec)},
                     {"aliases", e.aliases},
                     {"params", e.spec.num_params()},
                     {"source", e.source}});
    }
    print_json(out);
    return;
  }
  using core::Align;
  core::TextTable t({"name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "params"},
                    {Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight,
                     Align::kRight, Align::kLeft, Align::kRight});
  for (const auto& e : spec::model_catalog()) {
    const auto& m = e.spec;
    t.add_row({m.name, std::to_string(m.layers), std::to_string(m.hidden), std::to_string(m.heads),
               std::to_string(m.kv_heads), std::to_string(m.ffn_hidden), std::to_string(m.vocab),
               spec::to_string(m.mlp), format_count(m.num_params())});
  }
  std::cout << t.render();
}

// The mixture of experts of `m` as rows of `models show`.
template <class Row>
void add_expert_rows(const spec::ModelSpec& m, const spec::ParamCounts& c, Row& row) {
  const spec::ExpertSpec& e = m.moe;
  row("experts",
      str_cat(e.experts, " routed, top ", e.experts_per_token, ", width ", e.expert_ffn_hidden,
              e.shared_ffn_hidden > 0 ? str_cat("; shared width ", e.shared_ffn_hidden) : "", "; router ",
              spec::to_string(e.router),
              e.expert_groups > 1 ? str_cat(", top ", e.groups_per_token, " of ", e.expert_groups, " groups") : "",
              e.expert_bias ? ", expert bias" : "", e.top_k_scale != 1 ? str_cat(", weights x ", e.top_k_scale) : "",
              e.capacity_factor > 0 ? str_cat(", capacity factor ", e.capacity_factor) : ", dropless"));
  row("layers dense / MoE", str_cat(c.dense_layers, " / ", c.moe_layers));
  row("  per MoE layer", std::to_string(c.per_moe_layer));
  row("active params", std::to_string(c.active) + " (" + format_count(c.active) + ")");
}

void run_show(const ShowOptions& o) {
  const auto m = spec::load_model(o.name, "models show NAME");
  const auto entry = spec::find_catalog_model(o.name);
  if (o.json) {
    core::Json out = {{"model", spec::model_to_json(m)}, {"params", params_json(m)}};
    if (entry) {
      out["source"] = entry->source;
      if (entry->published_params > 0) out["published_params"] = entry->published_params;
    }
    print_json(out);
    return;
  }
  const auto c = m.param_counts();
  core::TextTable t({"field", "value"});
  auto row = [&](const std::string& k, const std::string& v) { t.add_row({k, v}); };
  row("name", m.name);
  row("layers", std::to_string(m.layers));
  row("hidden", std::to_string(m.hidden));
  row("heads / kv_heads", std::to_string(m.heads) + " / " + std::to_string(m.kv_heads));
  row("head_dim", m.mla.present() ? str_cat("latent: q·k ", m.mla.qk_head_dim(), ", v ", m.mla.v_head_dim)
                                  : std::to_string(m.head_dim()));
  row("ffn_hidden", std::to_string(m.ffn_hidden));
  row("vocab", std::to_string(m.vocab));
  row("mlp / norm / position",
      spec::to_string(m.mlp) + " / " + spec::to_string(m.norm) + " / " + spec::to_string(m.position));
  row("tied_embeddings", m.tied_embeddings ? "true" : "false");
  row("max_seq_len", std::to_string(m.max_seq_len));
  if (m.position == spec::PositionKind::kRoPE) {
    const auto& s = m.rope_scaling;
    std::string scaling;
    if (s.yarn()) {
      scaling = str_cat("; YaRN x", core::significant(s.factor, 3), " (betas ", core::significant(s.beta_fast, 3), ", ",
                        core::significant(s.beta_slow, 3), "; original context ", s.original_max_positions,
                        "; attention factor ", core::significant(s.yarn_attention_factor(), 4), ")");
    } else if (s.present()) {
      scaling = str_cat("; Llama 3.1 scaling x", core::significant(s.factor, 3), " (frequency factors ",
                        core::significant(s.low_freq_factor, 3), ", ", core::significant(s.high_freq_factor, 3),
                        "; original context ", s.original_max_positions, ")");
    }
    row("rope", str_cat("theta ", fixed(m.rope_theta, 0), scaling));
  }
  row("params", std::to_string(c.total) + " (" + format_count(c.total) + ")");
  if (c.dense_layers > 0) row("  per (dense) layer", std::to_string(c.per_layer));
  row("  embedding + lm_head", std::to_string(c.embedding + c.lm_head));
  if (m.moe.present()) add_expert_rows(m, c, row);
  if (m.mla.present()) {
    row("latent attention",
        str_cat("q rank ", m.mla.q_lora_rank, ", kv rank ", m.mla.kv_lora_rank, ", head widths ",
                m.mla.qk_nope_head_dim, " + ", m.mla.qk_rope_head_dim, " (rope), v ", m.mla.v_head_dim));
  }
  if (entry) {
    row("source", entry->source);
    if (entry->published_params > 0) row("published params", fixed(entry->published_params, 0));
  }
  std::cout << t.render();
}

}  // namespace

void register_models_command(CLI::App& app) {
  auto* models = app.add_subcommand("models", "List the built-in model catalog, or show one model");
  models->require_subcommand(1);

  auto list_opts = std::make_shared<ListOptions>();
  auto* list = models->add_subcommand("list", "Every catalog model with its shape and parameter count");
  list->add_flag("--json", list_opts->json, "Print JSON instead of a table");
  list->callback([list_opts] { run_list(*list_opts); });

  auto show_opts = std::make_shared<ShowOptions>();
  auto* show = models->add_subcommand("show", "One model: a catalog name, a cpt model JSON or a HF config.json");
  show->add_option("NAME", show_opts->name, "Catalog name (e.g. llama3-8b) or JSON file")->required();
  show->add_flag("--json", show_opts->json, "Print JSON instead of a table");
  show->callback([show_opts] { run_show(*show_opts); });
}

}  // namespace cpt::cli
