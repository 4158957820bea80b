// Model variants through the real `cpt train` (distributed_train_fixture.h). A mixture of experts:
// the catalog's tiny MoE (4 experts, top 2, shared experts) trained by one process and by
// data-parallel, ZeRO, recomputing, pipeline, expert-parallel, expert-tensor-parallel,
// tensor-parallel (sequence-parallel, the experts whole or split over the tp ranks) and
// context-parallel layouts gives the same losses and final weights, routes the same tokens
// (metrics.jsonl's expert_load), and makes the communication calls the cost model counts; expert-
// and expert-tensor-parallel checkpoints move between layouts. Qwen3's attention (q/k norms, a
// head width of its own) under tensor parallelism; DeepSeek's latent attention in every layout;
// DeepSeek-V3's expert bias moved as one process moves it.
#include "tests/integration/distributed_train_fixture.h"

namespace {

using namespace cpt::dist_testing;

class ModelVariantsTrain : public DistributedTrain {
 protected:
  // Plans of tiny-moe in DIR/moe-<name> (and of tiny-qk), made once per prepared directory.
  static void plan_once() {
    if (fs::exists(dir_ / "qk-tp2-sp" / "plan.json")) return;
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "ep=1,micro_batch=2", 1},
          std::tuple{"dp2", "dp=2,ep=1,zero=0,micro_batch=2", 2},
          std::tuple{"zero1-dp2", "dp=2,ep=1,zero=1,offload=none,micro_batch=2", 2},
          std::tuple{"zero3-dp2", "dp=2,ep=1,zero=3,offload=none,micro_batch=2", 2},
          std::tuple{"dp2-full-recompute", "dp=2,ep=1,zero=0,recompute=full,micro_batch=2", 2},
          std::tuple{"pp2", "pp=2,ep=1,schedule=1f1b,micro_batch=2", 2},
          std::tuple{"ep2", "dp=2,ep=2,zero=0,micro_batch=2", 2},
          std::tuple{"ep2-zero1", "dp=2,ep=2,zero=1,offload=none,micro_batch=2", 2},
          std::tuple{"ep2-full-recompute", "dp=2,ep=2,zero=0,recompute=full,micro_batch=2", 2},
          std::tuple{"ep2-dp4-zero2", "dp=4,ep=2,zero=2,offload=none,micro_batch=2", 4},
          std::tuple{"ep2-pp2", "dp=2,pp=2,ep=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"tp2-sp", "tp=2,sequence_parallel=true,ep=1,micro_batch=2", 2},
          std::tuple{"ep2-tp2-sp", "tp=2,sequence_parallel=true,ep=2,micro_batch=2", 2},
          std::tuple{"ep2-tp2-dp2-zero1", "tp=2,dp=2,sequence_parallel=true,ep=2,zero=1,offload=none,micro_batch=2", 4},
          std::tuple{"tp2-dp2-zero2", "tp=2,dp=2,sequence_parallel=true,ep=1,zero=2,offload=none,micro_batch=2", 4},
          std::tuple{"ep2-zero3", "dp=2,ep=2,zero=3,offload=none,micro_batch=2", 2},
          std::tuple{"ep2-dp4-zero3", "dp=4,ep=2,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"tp2-dp2-zero3", "tp=2,dp=2,sequence_parallel=true,ep=1,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"cp2", "cp=2,ep=1,micro_batch=2", 2},
          std::tuple{"ep2-cp2", "cp=2,ep=2,micro_batch=2", 2},
          std::tuple{"ep2-cp2-tp2-sp", "tp=2,cp=2,sequence_parallel=true,ep=2,micro_batch=2", 4},
          std::tuple{"ep4-cp2-dp2-zero1", "cp=2,dp=2,ep=4,zero=1,offload=none,micro_batch=2", 4},
          std::tuple{"etp2", "dp=2,ep=1,etp=2,zero=0,micro_batch=2", 2},
          std::tuple{"ep2-etp2-zero1", "dp=4,ep=2,etp=2,zero=1,offload=none,micro_batch=2", 4},
          std::tuple{"ep2-etp2-tp2-sp", "tp=2,dp=2,sequence_parallel=true,ep=2,etp=2,micro_batch=2", 4},
          std::tuple{"etp2-dp4-zero3", "dp=4,ep=1,etp=2,zero=3,offload=none,micro_batch=2", 4},
          std::tuple{"etp2-dp4-zero2", "dp=4,ep=1,etp=2,zero=2,offload=none,micro_batch=2", 4},
          std::tuple{"etp2-pp2", "dp=2,pp=2,ep=1,etp=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4}}) {
      plan_layout("tiny-moe", fix, gpus, std::string("moe-") + name);
    }
    // tiny-moe with a dense first layer: under pp 2 the first stage holds no experts.
    std::ofstream(dir_ / "tiny-moe-df.json") << R"({"name": "tiny-moe-df", "layers": 2, "hidden": 64, "heads": 4,
      "kv_heads": 2, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "max_seq_len": 128, "moe": {"experts": 4, "experts_per_token": 2,
      "expert_ffn_hidden": 64, "shared_ffn_hidden": 64, "first_dense_layers": 1}})";
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "ep=1,micro_batch=2", 1},
          std::tuple{"ep2-pp2", "dp=2,pp=2,ep=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4}}) {
      plan_layout("tiny-moe-df.json", fix, gpus, std::string("df-") + name);
    }
    // Four layers, two dense first: under pp 2 × v 2 pipeline rank 0 holds layers 0 (dense) and 2
    // (MoE), not two contiguous ones; its gradient buckets walk its chunks' layers.
    std::ofstream(dir_ / "tiny-moe-df2.json") << R"({"name": "tiny-moe-df2", "layers": 4, "hidden": 64,
      "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm",
      "position": "rope", "tied_embeddings": false, "max_seq_len": 128, "moe": {"experts": 4,
      "experts_per_token": 2, "expert_ffn_hidden": 64, "shared_ffn_hidden": 64, "first_dense_layers": 2}})";
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "ep=1,micro_batch=2", 1},
          std::tuple{"ep2-pp2-interleaved",
                     "dp=2,pp=2,vp=2,ep=2,zero=1,offload=none,schedule=interleaved_1f1b,micro_batch=2", 4}}) {
      plan_layout("tiny-moe-df2.json", fix, gpus, std::string("df2-") + name);
    }
    // tiny-moe with DeepSeek's group-limited routing: 2 groups of 2 experts, a token's 2 from its
    // best group.
    std::ofstream(dir_ / "tiny-moe-groups.json") << R"({"name": "tiny-moe-groups", "layers": 2, "hidden": 64,
      "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm",
      "position": "rope", "tied_embeddings": false, "max_seq_len": 128, "moe": {"experts": 4,
      "experts_per_token": 2, "expert_ffn_hidden": 64, "shared_ffn_hidden": 64, "expert_groups": 2,
      "groups_per_token": 1}})";
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "ep=1,micro_batch=2", 1}, std::tuple{"ep2", "dp=2,ep=2,zero=0,micro_batch=2", 2},
          std::tuple{"ep2-etp2-zero1", "dp=4,ep=2,etp=2,zero=1,offload=none,micro_batch=2", 4}}) {
      plan_layout("tiny-moe-groups.json", fix, gpus, std::string("groups-") + name);
    }
    // tiny with DeepSeek's latent attention (a query latent; widths unlike each other), and a
    // DeepSeek-V2-Lite in small (no query latent, a dense first layer, shared experts, unnormalised
    // weights scaled by 1.5).
    std::ofstream(dir_ / "tiny-mla.json") << R"({"name": "tiny-mla", "layers": 2, "hidden": 64, "heads": 4,
      "kv_heads": 4, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "max_seq_len": 128, "mla": {"q_lora_rank": 24, "kv_lora_rank": 16,
      "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10}})";
    std::ofstream(dir_ / "tiny-mla-moe.json") << R"({"name": "tiny-mla-moe", "layers": 2, "hidden": 64,
      "heads": 4, "kv_heads": 4, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm",
      "position": "rope", "tied_embeddings": false, "max_seq_len": 128, "mla": {"q_lora_rank": 0,
      "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10}, "moe": {"experts": 4,
      "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_ffn_hidden": 64, "first_dense_layers": 1,
      "normalize_top_k": false, "top_k_scale": 1.5}})";
    for (const auto& [model, name, fix, gpus] :
         {std::tuple{"tiny-mla", "single", "micro_batch=2", 1},
          std::tuple{"tiny-mla", "selective", "micro_batch=2,recompute=selective", 1},
          std::tuple{"tiny-mla", "tp2", "tp=2,micro_batch=2", 2},
          std::tuple{"tiny-mla", "tp2-sp", "tp=2,sequence_parallel=true,micro_batch=2", 2},
          std::tuple{"tiny-mla", "cp2", "cp=2,micro_batch=2", 2},
          std::tuple{"tiny-mla", "pp2", "pp=2,schedule=1f1b,micro_batch=2", 2},
          std::tuple{"tiny-mla", "zero3-dp2", "dp=2,zero=3,offload=none,micro_batch=2", 2},
          std::tuple{"tiny-mla-moe", "single", "ep=1,micro_batch=2", 1},
          std::tuple{"tiny-mla-moe", "ep2", "dp=2,ep=2,zero=0,micro_batch=2", 2}}) {
      plan_layout(std::string(model) + ".json", fix, gpus, std::string(model) + "-" + name);
    }
    std::ofstream(dir_ / "tiny-v3.json") << kTinyV3;  // DeepSeek-V3 in small (the fixture)
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "ep=1,micro_batch=2", 1}, std::tuple{"ep2", "dp=2,ep=2,zero=0,micro_batch=2", 2},
          std::tuple{"ep2-pp2", "dp=2,pp=2,ep=2,zero=1,offload=none,schedule=1f1b,micro_batch=2", 4},
          std::tuple{"tp2-sp", "tp=2,sequence_parallel=true,ep=1,micro_batch=2", 2},
          std::tuple{"cp2", "cp=2,ep=1,micro_batch=2", 2}}) {
      plan_layout("tiny-v3.json", fix, gpus, std::string("v3-") + name);
    }
    // tiny with Qwen3's attention: q/k norms over heads of 32 (not hidden / heads = 16).
    std::ofstream(dir_ / "tiny-qk.json") << R"({"name": "tiny-qk", "layers": 2, "hidden": 64, "heads": 4,
      "kv_heads": 2, "head_dim": 32, "qk_norm": true, "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu",
      "norm": "rmsnorm", "position": "rope", "tied_embeddings": false, "max_seq_len": 128})";
    for (const auto& [name, fix, gpus] :
         {std::tuple{"single", "micro_batch=2", 1}, std::tuple{"tp2", "tp=2,micro_batch=2", 2},
          std::tuple{"tp2-sp", "tp=2,sequence_parallel=true,micro_batch=2", 2}}) {
      plan_layout("tiny-qk.json", fix, gpus, std::string("qk-") + name);
    }
  }
};

TEST_F(ModelVariantsTrain, MixtureOfExpertsLayoutsMatchTheSingleProcessRun) {
  plan_once();
  reference("moe-single", "o-moe-1");
  const auto single_load = metric(dir_ / "o-moe-1" / "metrics.jsonl", "expert_load");
  const auto single_aux = metric(dir_ / "o-moe-1" / "metrics.jsonl", "router_aux_loss");
  ASSERT_EQ(single_load.size(), 20u);
  // Two of four experts per token: the busiest takes between its share and every token.
  for (const double load : single_load) {
    EXPECT_GE(load, 1.0);
    EXPECT_LE(load, 2.0);
  }
  for (const auto& [layout, procs] : {std::pair<std::string, int>{"dp2", 2},
                                      {"zero1-dp2", 2},
                                      {"zero3-dp2", 2},
                                      {"dp2-full-recompute", 2},
                                      {"pp2", 2},
                                      {"ep2", 2},
                                      {"ep2-zero1", 2},
                                      {"ep2-full-recompute", 2},
                                      {"ep2-dp4-zero2", 4},
                                      {"ep2-pp2", 4},
                                      {"tp2-sp", 2},
                                      {"ep2-tp2-sp", 2},
                                      {"ep2-tp2-dp2-zero1", 4},
                                      {"ep2-zero3", 2},
                                      {"ep2-dp4-zero3", 4},
                                      {"tp2-dp2-zero3", 4},
                                      {"cp2", 2},
                                      {"ep2-cp2", 2},
                                      {"ep2-cp2-tp2-sp", 4},
                                      {"ep4-cp2-dp2-zero1", 4},
                                      {"etp2", 2},
                                      {"ep2-etp2-zero1", 4},
                                      {"ep2-etp2-tp2-sp", 4},
                                      {"etp2-dp4-zero3", 4},
                                      {"etp2-dp4-zero2", 4},
                                      {"etp2-pp2", 4}}) {
    const auto out = "o-moe-" + layout;
    const auto r = train("moe-" + layout, out, procs);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-moe-1", dir_ / out, "moe " + layout);
    expect_calls_of_the_cost_model(out, "moe " + layout);
    // The first step starts from the same weights on the same tokens: the same routing, counted
    // over every rank (the auxiliary loss is a mean of fp32 sums: round-off apart).
    const auto load = metric(dir_ / out / "metrics.jsonl", "expert_load");
    const auto aux = metric(dir_ / out / "metrics.jsonl", "router_aux_loss");
    ASSERT_EQ(load.size(), single_load.size()) << layout;
    EXPECT_EQ(load[0], single_load[0]) << layout;
    EXPECT_NEAR(aux[0], single_aux[0], 1e-5 * single_aux[0]) << layout;
  }
}

// The executor's weights, gradients and optimizer state with experts are the cost model's bytes
// exactly (the routed experts in their layer's buckets and ZeRO-3 units, or split over ep with
// their own buckets over expert-dp), its communication calls the cost model's, its kernels within
// 6%, in every layout it runs.
TEST_F(ModelVariantsTrain, ModelStateBytesEqualTheCostModel) {
  plan_once();
  const auto two_steps = short_config(2);
  for (const auto& [layout, procs, flags] :
       {std::tuple{"single", 1, "--gpus 1 --ep 1"}, std::tuple{"dp2", 2, "--gpus 2 --dp 2 --ep 1"},
        std::tuple{"zero1-dp2", 2, "--gpus 2 --dp 2 --zero 1 --ep 1"},
        std::tuple{"zero3-dp2", 2, "--gpus 2 --dp 2 --zero 3 --ep 1"}, std::tuple{"pp2", 2, "--gpus 2 --pp 2 --ep 1"},
        std::tuple{"ep2", 2, "--gpus 2 --dp 2 --ep 2"}, std::tuple{"ep2-zero1", 2, "--gpus 2 --dp 2 --zero 1 --ep 2"},
        std::tuple{"ep2-tp2-sp", 2, "--gpus 2 --tp 2 --sequence-parallel --ep 2"},
        std::tuple{"ep2-zero3", 2, "--gpus 2 --dp 2 --zero 3 --ep 2"},
        std::tuple{"ep2-dp4-zero3", 4, "--gpus 4 --dp 4 --zero 3 --ep 2"},
        std::tuple{"ep2-cp2", 2, "--gpus 2 --cp 2 --ep 2"},
        std::tuple{"ep2-cp2-tp2-sp", 4, "--gpus 4 --tp 2 --cp 2 --sequence-parallel --ep 2"},
        std::tuple{"etp2", 2, "--gpus 2 --dp 2 --ep 1 --etp 2"},
        std::tuple{"ep2-etp2-zero1", 4, "--gpus 4 --dp 4 --zero 1 --ep 2 --etp 2"},
        std::tuple{"ep2-etp2-tp2-sp", 4, "--gpus 4 --tp 2 --dp 2 --sequence-parallel --ep 2 --etp 2"},
        std::tuple{"etp2-dp4-zero3", 4, "--gpus 4 --dp 4 --zero 3 --ep 1 --etp 2"}}) {
    const auto out = std::string("mem-moe-") + layout;
    const auto r = train(std::string("moe-") + layout, out, procs, two_steps);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_model_state_of_the_cost_model(out, procs, "tiny-moe", flags, std::string("moe ") + layout);
  }
}

// ZeRO-2 with experts apart from their layer — over ep 2 and expert-dp 2 (dp 4), each split over
// etp 2 (dp 4: expert-dp 2), or whole on each rank of a tp group (tp 2, dp 2: expert-dp 4, the
// shared experts split over tp): each of the two optimizers keeps its gradient shard and its own
// buckets in flight, and `cpt compare` (which prices the run's 0.1 MiB buckets) predicts every
// byte of it; weights and optimizer state exact too.
TEST_F(ModelVariantsTrain, ExpertParallelZeroTwoHoldsBothOptimizersShardsAndBuckets) {
  plan_once();
  const auto d = dir_.string();
  for (const std::string layout : {"ep2-dp4-zero2", "etp2-dp4-zero2", "tp2-dp2-zero2"}) {
    const auto out = "mem-moe-" + layout;
    const auto r = train("moe-" + layout, out, 4, short_config(2));
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    const auto cmp = sh(cpt_binary() + " compare " + d + "/" + out + " --json", dir_);
    ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
    const auto f = nlohmann::json::parse(cmp.out)["fields"];
    for (const std::string key : {"weights_bytes", "grads_bytes", "optimizer_bytes"}) {
      EXPECT_EQ(f[key]["predicted"].get<double>(), f[key]["measured"].get<double>()) << layout << ": " << key;
    }
    // Below ZeRO-1's whole gradients (the weights' bytes in fp32).
    EXPECT_LT(f["grads_bytes"]["measured"].get<double>(), f["weights_bytes"]["measured"].get<double>()) << layout;
    expect_calls_of_the_cost_model(out, "moe " + layout);
  }
}

// A checkpoint holds whole tensors whatever the layout: the experts split over two ranks are
// gathered into it, and one process resumes from it where the single-process run would be, also
// from experts and shared experts split over a tp group; a one-process checkpoint resumes with the
// experts split over two ranks, each loading its own.
TEST_F(ModelVariantsTrain, ExpertParallelCheckpointsMoveBetweenLayouts) {
  plan_once();
  reference("moe-single", "o-moe-1");
  expect_resume("moe-ep2-zero1", 2, "moe-single", 1, "o-moe-1");
  expect_resume("moe-single", 1, "moe-ep2", 2, "o-moe-1");
  // The experts split over the two ranks of a tp group (the shared experts split by tp too).
  expect_resume("moe-ep2-tp2-sp", 2, "moe-single", 1, "o-moe-1");
  // Each expert's MLP split over etp 2 (and the experts over ep 2): joined into the checkpoint,
  // and cut again when a run resumes in that layout.
  expect_resume("moe-ep2-etp2-zero1", 4, "moe-single", 1, "o-moe-1");
  expect_resume("moe-single", 1, "moe-etp2", 2, "o-moe-1");
}

// A dense first layer under pp 2 × ep 2: the first stage holds no experts (its expert optimizer
// is none, its norm still joins the pipeline's sum) and the run is the single process's.
TEST_F(ModelVariantsTrain, ExpertParallelStageWithoutExpertsMatchesTheSingleProcessRun) {
  plan_once();
  reference("df-single", "o-df-1");
  const auto r = train("df-ep2-pp2", "o-df-ep2-pp2", 4);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_as_reference("o-df-1", dir_ / "o-df-ep2-pp2", "dense-first ep2-pp2");
}

// Interleaved stages of dense and MoE layers (pp 2 × v 2): the single process's run, model state,
// the cost model's calls and bytes (ZeRO-1's buckets per chunk's layers), kernels within 6%.
TEST_F(ModelVariantsTrain, InterleavedStagesOfDenseAndExpertLayersMatchTheSingleProcessRun) {
  plan_once();
  // Peak lr 0.001: at train.json's 0.003 this model's routing flips under round-off alone.
  std::ofstream(dir_ / "gentle.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20, "threads": 1,
    "lr": {"schedule": "cosine", "peak": 0.001, "warmup_steps": 4}, "seed": 5, "dp_bucket_mib": 0.1,
    "log_interval_steps": 0})";
  reference("df2-single", "o-df2-1", "gentle.json");
  const auto r = train("df2-ep2-pp2-interleaved", "o-df2-interleaved", 4, "gentle.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_as_reference("o-df2-1", dir_ / "o-df2-interleaved", "dense-first interleaved");
  expect_model_state_of_the_cost_model("o-df2-interleaved", 4, (dir_ / "tiny-moe-df2.json").string(),
                                       "--gpus 4 --dp 2 --pp 2 --vp 2 --ep 2 --zero 1 --offload none",
                                       "dense-first interleaved");
}

// Group-limited routing routes each token where the single process does, whichever rank holds its
// experts or their halves: the same run, the cost model's calls and bytes, kernels within 6%.
TEST_F(ModelVariantsTrain, GroupLimitedRoutingMatchesTheSingleProcessRun) {
  plan_once();
  reference("groups-single", "o-groups-1");
  for (const auto& [layout, procs] : {std::pair{"ep2", 2}, std::pair{"ep2-etp2-zero1", 4}}) {
    const auto out = std::string("o-groups-") + layout;
    const auto r = train(std::string("groups-") + layout, out, procs);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-groups-1", dir_ / out, std::string("groups ") + layout);
    expect_calls_of_the_cost_model(out, std::string("groups ") + layout);
    expect_kernels_of_the_cost_model(out, std::string("groups ") + layout);
  }
}

// The q/k norms' weights are replicated over tp while each rank normalises its own heads: their
// gradients are summed over the group, and the run is the single-process one.
TEST_F(ModelVariantsTrain, QkNormsAndTheirOwnHeadWidthMatchTheSingleProcessRunUnderTensorParallelism) {
  plan_once();
  reference("qk-single", "o-qk-1");
  for (const std::string layout : {"tp2", "tp2-sp"}) {
    const auto out = "o-qk-" + layout;
    const auto r = train("qk-" + layout, out, 2);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-qk-1", dir_ / out, "qk " + layout);
    expect_calls_of_the_cost_model(out, "qk " + layout);
  }
}

// DeepSeek's latent attention trains as one process does in every layout: the replicated down
// projections and latent norms have their gradients summed over tp (with and without sequence
// parallelism), context parallelism gathers the per-head keys and values, ZeRO-3 shards the
// block's seven tensors, and a DeepSeek-V2-Lite in small runs its experts over ep; the calls and
// bytes are the cost model's, the kernels within 6%. (That model under ep2 × tp2 + SP routes one
// token of its last step to another expert: its second and third scores tie to round-off, which
// the sequence shards' other summation order breaks the other way. The layout is right, the
// comparison ill-posed, so the test runs it without tp.)
TEST_F(ModelVariantsTrain, LatentAttentionLayoutsMatchTheSingleProcessRun) {
  plan_once();
  reference("tiny-mla-single", "o-mla-1");
  for (const auto& [layout, procs] : {std::pair{"selective", 1}, std::pair{"tp2", 2}, std::pair{"tp2-sp", 2},
                                      std::pair{"cp2", 2}, std::pair{"pp2", 2}, std::pair{"zero3-dp2", 2}}) {
    const auto out = std::string("o-mla-") + layout;
    const auto r = train(std::string("tiny-mla-") + layout, out, procs);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-mla-1", dir_ / out, std::string("mla ") + layout);
    expect_calls_of_the_cost_model(out, std::string("mla ") + layout);
    expect_kernels_of_the_cost_model(out, std::string("mla ") + layout);
  }
  reference("tiny-mla-moe-single", "o-mla-moe-1");
  const auto r = train("tiny-mla-moe-ep2", "o-mla-moe-ep2", 2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_as_reference("o-mla-moe-1", dir_ / "o-mla-moe-ep2", "mla moe ep2");
  expect_calls_of_the_cost_model("o-mla-moe-ep2", "mla moe ep2");
  expect_kernels_of_the_cost_model("o-mla-moe-ep2", "mla moe ep2");
}

// Evaluation under expert-tp: every rank evaluates (the etp group's gathers span dp, as the ep
// group's all-to-all does), and each evaluation's loss is the single process's.
TEST_F(ModelVariantsTrain, EvaluationUnderExpertTensorParallelismMatchesTheSingleProcessRun) {
  plan_once();
  std::ofstream(dir_ / "eval-moe.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 4,
    "seed": 5, "threads": 1, "dp_bucket_mib": 0.1, "log_interval_steps": 0, "collective_timeout_s": 60,
    "eval_interval_steps": 2, "eval": [{"name": "held", "path": "data", "sequences": 6}]})";
  const auto single = train("moe-single", "o-moe-eval-1", 1, "eval-moe.json");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const auto expected = metric(dir_ / "o-moe-eval-1" / "eval.jsonl", "loss");
  ASSERT_EQ(expected.size(), 2u);  // steps 2 and 4
  for (const auto& [layout, procs] : {std::pair{"etp2", 2}, std::pair{"etp2-pp2", 4}}) {
    const auto out = std::string("o-moe-eval-") + layout;
    const auto r = train(std::string("moe-") + layout, out, procs, "eval-moe.json");
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    const auto losses = metric(dir_ / out / "eval.jsonl", "loss");
    ASSERT_EQ(losses.size(), expected.size()) << layout;
    // The runs' weights agree to round-off (below 1e-4 relative: reference()'s floor), and so do
    // their losses on the same tokens.
    for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i] / expected[i], 1.0, 1e-4) << layout;
  }
}

// DeepSeek-V3's expert bias and sequence-wise balance loss: each step moves each expert's bias by
// the rate against the load the step's tokens put on it over every replica, so every layout moves
// it as one process does (the same losses and weights; the biases bitwise, sums of ±0.01), across
// pipeline stages (the first holds no experts: the cost model prices each stage's own layers), over
// sequence and context shards (whose ranks gather each sequence's counts and probability sums; in
// every layout the cost model's calls and bytes) and
// through a checkpoint moved to another layout. The bias changes the
// routing: frozen (rate 0), the expert load differs. (A rate of 0.01, ten times DeepSeek-V3's, so that 20 steps
// move the biases far enough to change many tokens' experts.)
TEST_F(ModelVariantsTrain, ExpertBiasMovesAgainstTheLoadAsInTheSingleProcessRun) {
  plan_once();
  for (const auto& [name, rate] : {std::pair{"bias.json", "0.01"}, std::pair{"frozen-bias.json", "0"}}) {
    std::ofstream(dir_ / name) << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
      "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
      "dp_bucket_mib": 0.1, "log_interval_steps": 0, "router_aux_loss_type": "seq_aux_loss",
      "expert_bias_update_rate": )"
                               << rate << "}";
  }
  reference("v3-single", "o-v3-1", "bias.json");
  const auto bias = expert_bias_of(dir_ / "o-v3-1");
  ASSERT_EQ(bias.size(), 8u);
  float moved = 0;
  for (const float b : bias) {
    moved = std::max(moved, std::abs(b));
    // A whole number of steps of 0.01, at most 20 of them (fp32 sums of ±0.01: round-off ~1e-8).
    EXPECT_NEAR(b * 100, std::round(b * 100), 1e-4) << b;
    EXPECT_LE(std::abs(b), 0.2 + 1e-6) << b;
  }
  EXPECT_GT(moved, 0.0f) << "no expert's bias moved in 20 steps";
  for (const auto& [layout, procs] :
       {std::pair{"ep2", 2}, std::pair{"ep2-pp2", 4}, std::pair{"tp2-sp", 2}, std::pair{"cp2", 2}}) {
    const auto out = std::string("o-v3-") + layout;
    const auto r = train(std::string("v3-") + layout, out, procs, "bias.json");
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-v3-1", dir_ / out, std::string("v3 ") + layout);
    EXPECT_EQ(expert_bias_of(dir_ / out), bias) << layout;
    expect_calls_of_the_cost_model(out, std::string("v3 ") + layout);
    expect_kernels_of_the_cost_model(out, std::string("v3 ") + layout);
  }
  expect_resume("v3-ep2", 2, "v3-single", 1, "o-v3-1", "bias.json");
  const auto frozen = train("v3-single", "o-v3-frozen", 1, "frozen-bias.json");
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  EXPECT_EQ(expert_bias_of(dir_ / "o-v3-frozen"), std::vector<float>(8, 0.0f));
  // The moved bias sends tokens to other experts: the busiest expert's load parts from step 1 on
  // (the losses hardly: this model's experts are near their initial weights and alike).
  const auto with_bias = metric(dir_ / "o-v3-1" / "metrics.jsonl", "expert_load");
  const auto without = metric(dir_ / "o-v3-frozen" / "metrics.jsonl", "expert_load");
  ASSERT_EQ(with_bias.size(), 20u);
  ASSERT_EQ(without.size(), 20u);
  EXPECT_EQ(with_bias[0], without[0]) << "step 0 routes before any update";
  int differing = 0;
  for (std::size_t i = 1; i < with_bias.size(); ++i) differing += with_bias[i] != without[i] ? 1 : 0;
  EXPECT_GE(differing, 10) << "the bias sent few tokens to other experts";
}

// KL distillation on a mixture of experts with the teacher split like the student — its experts
// over ep, under ZeRO-3 with the experts as units of their own over expert-dp (of one: used in
// place; of two: gathered), under context and sequence parallelism (its routing over the shards),
// pipelined (its hidden states riding with the student's):
// the same losses, KL and weights as one process; the teacher's storage on each rank is the cost
// model's teacher memory exactly, the calls and bytes the step inventory's, the kernels within 6%.
TEST_F(ModelVariantsTrain, KlDistillationOfExpertsMatchesTheSingleProcessRun) {
  plan_once();
  reference("moe-single", "o-moe-1");
  std::ofstream(dir_ / "kl-moe.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0, "init_from": ")" +
                                             (dir_ / "o-moe-1/checkpoints/step_00000020").string() + R"(",
    "distill": {"lambda": 0.5}})";
  reference("moe-single", "o-moe-kl-1", "kl-moe.json");
  const auto kl = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "kl"); };
  const auto single = kl("o-moe-kl-1");
  ASSERT_EQ(single.size(), 20u);
  EXPECT_GT(single.back(), 0.0);
  for (const auto& [layout, procs] :
       {std::pair{"ep2", 2}, std::pair{"ep2-zero3", 2}, std::pair{"ep2-dp4-zero3", 4}, std::pair{"ep2-cp2-tp2-sp", 4},
        std::pair{"ep2-pp2", 4}, std::pair{"ep2-etp2-tp2-sp", 4}, std::pair{"etp2-dp4-zero3", 4}}) {
    const auto out = std::string("o-moe-kl-") + layout;
    const auto r = train(std::string("moe-") + layout, out, procs, "kl-moe.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    expect_same_as_reference("o-moe-kl-1", dir_ / out, std::string("moe kl ") + layout);
    expect_recipe_bytes_of_the_cost_model(out, "teacher", std::string("moe kl ") + layout);
    expect_calls_of_the_cost_model(out, std::string("moe kl ") + layout);
    expect_kernels_of_the_cost_model(out, std::string("moe kl ") + layout);
    const auto k = kl(out);
    ASSERT_EQ(k.size(), single.size()) << layout;
    for (std::size_t i = 1; i < k.size(); ++i) EXPECT_NEAR(k[i] / single[i], 1.0, 1e-4) << layout << ": step " << i;
  }
}

// EWC with the routed experts apart from their layer: every replica estimates the Fisher on the same
// sequences (the dispatch spans the replicas), each expert's gradient summed over expert-dp (not
// over cp, whose ranks may hold other experts) and divided by the data-parallel replicas, and each
// rank's penalty holds its experts' share once (summed over expert-dp with the gradients; its value
// over ep). The same losses, penalties and weights as the single process; the Fisher and anchor
// bytes and the calls are the cost model's.
TEST_F(ModelVariantsTrain, EwcWithExpertsApartMatchesTheSingleProcessRun) {
  plan_once();
  std::ofstream(dir_ / "ewc-moe.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0,
    "ewc": {"lambda": 5000, "data": {"name": "py", "path": "data"}, "sequences": 8}})";
  reference("moe-single", "o-moe-ewc-1", "ewc-moe.json");
  const auto penalties = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "ewc_penalty"); };
  const auto single = penalties("o-moe-ewc-1");
  ASSERT_EQ(single.size(), 20u);
  EXPECT_GT(single.back(), 0.0);
  for (const auto& [layout, procs] :
       {std::pair{"ep2", 2}, std::pair{"tp2-sp", 2}, std::pair{"ep2-tp2-sp", 2}, std::pair{"ep2-dp4-zero2", 4},
        std::pair{"ep2-pp2", 4}, std::pair{"ep2-dp4-zero3", 4}, std::pair{"ep2-cp2", 2}, std::pair{"ep2-cp2-tp2-sp", 4},
        std::pair{"ep4-cp2-dp2-zero1", 4}, std::pair{"ep2-etp2-zero1", 4}, std::pair{"etp2-dp4-zero3", 4}}) {
    const auto out = std::string("o-moe-ewc-") + layout;
    const auto r = train(std::string("moe-") + layout, out, procs, "ewc-moe.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    expect_same_as_reference("o-moe-ewc-1", dir_ / out, std::string("moe ewc ") + layout);
    expect_recipe_bytes_of_the_cost_model(out, "ewc", std::string("moe ewc ") + layout);
    expect_calls_of_the_cost_model(out, std::string("moe ewc ") + layout);
    const auto p = penalties(out);
    ASSERT_EQ(p.size(), single.size()) << layout;
    for (std::size_t i = 1; i < p.size(); ++i) EXPECT_NEAR(p[i] / single[i], 1.0, 1e-3) << layout << ": step " << i;
  }
}

}  // namespace
