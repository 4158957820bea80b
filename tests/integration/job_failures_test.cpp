// What a distributed `cpt train` does when something goes wrong (docs/executor.md, "Failure
// behaviour"): a missing output directory, a rank that dies, the launcher killed or asked to stop,
// a second job into the same directory, who can reach the rendezvous, a device or data set that does
// not fit, a peer that never comes. Through the real binary and its launcher, on the shared
// fixture's plans and data.
#include "tests/integration/distributed_train_fixture.h"

#include <random>

namespace {

using namespace cpt::dist_testing;

class JobFailures : public DistributedTrain {
 protected:
  // tiny with a 256-token vocabulary (the fixture's data and checkpoints have 512), planned on two
  // data-parallel ranks into DIR/<out>.
  static void plan_tiny256_on_dp2(const std::string& out) {
    const auto d = dir_.string();
    std::ofstream(dir_ / "tiny256.json") << R"({"name": "tiny256", "layers": 2, "hidden": 64, "heads": 4,
      "kv_heads": 2, "ffn_hidden": 176, "vocab": 256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
      "tied_embeddings": false, "max_seq_len": 128})";
    ASSERT_EQ(sh(cpt_binary() + " plan --model " + d + "/tiny256.json --gpu h100 --gpus 2 --global-batch 8 " +
                     "--seq-len 64 --fix dp=2,zero=0,micro_batch=2 --out " + d + "/" + out,
                 dir_)
                  .exit_code,
              0);
  }
  static void expect_resume_after_a_kill(const std::vector<std::pair<std::string, int>>& layouts);
  // A shell line: `cpt train` of DIR/<plan> with DIR/<config> into DIR/<out> on `procs` local ranks
  // in the background ($L: its launcher, or the process itself), then, once the shell test `ready`
  // holds (every 0.1 s, 20 s at most), `action`. `ready` defaults to a first line in metrics.jsonl.
  static std::string once_training(const std::string& plan, const std::string& config, const std::string& out,
                                   int procs, const std::string& action, const std::string& ready = "") {
    const auto d = dir_.string();
    return cpt_binary() + " train --plan " + d + "/" + plan + "/plan.json --config " + d + "/" + config + " --out " +
           d + "/" + out + (procs > 1 ? " --nproc-per-node " + std::to_string(procs) : "") +
           " & L=$!; for i in $(seq 200); do sleep 0.1; " +
           (ready.empty() ? "[ -s " + d + "/" + out + "/metrics.jsonl ]" : ready) + " && break; done; " + action;
  }
};

// The launcher makes a missing OUT (and its parents) as the single-process run does; it used to
// fail writing the tokenizer there.
TEST_F(JobFailures, TheLauncherMakesItsOutputDirectory) {
  const auto r = train("dp2", "not/yet/there", 2, short_config(2));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "not/yet/there/measured.json"));
}

TEST_F(JobFailures, ADeadRankTakesTheJobDown) {
  // Start a long job, kill one of its two ranks, expect the launcher to stop the other and fail.
  const auto r = sh(once_training("dp2", "long.json", "o3", 2,
                                  "kill -9 $(pgrep -P $L | head -1); wait $L; echo exit=$?; pgrep -P $L | wc -l"),
                    dir_);
  EXPECT_NE(r.out.find("exit=3"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
}

// While a job trains into OUT, a second job into the same OUT is refused (exit 3, the holder's pid
// named); killing the launcher with SIGKILL takes its ranks down with it (they were re-parented
// and kept training), after which OUT can be continued again.
TEST_F(JobFailures, OneJobPerOutputAndTheRanksDieWithTheirLauncher) {
  const auto d = dir_.string();
  const auto job =
      cpt_binary() + " train --plan " + d + "/dp2/plan.json --config " + d + "/long.json --out " + d + "/o4";
  const auto r = sh(job +
                        " --nproc-per-node 2 & L=$!; for i in $(seq 100); do sleep 0.1; "
                        "[ -s " +
                        d +
                        "/o4/metrics.jsonl ] && break; done; "
                        "RANKS=$(pgrep -P $L | tr '\n' ' '); " +
                        job + " 2>" + d +
                        "/second.err; echo second=$?; "
                        "kill -9 $L; for i in $(seq 50); do alive=0; for p in $RANKS; do "
                        // running, not a zombie waiting for whoever adopted it to reap it
                        "grep -qs '^State:[[:space:]]*[^Z]' /proc/$p/status && alive=$((alive+1)); done; "
                        "[ $alive = 0 ] && break; sleep 0.1; done; "
                        "echo ranks=$(echo $RANKS | wc -w) alive=$alive",
                    dir_);
  EXPECT_NE(r.out.find("second=3"), std::string::npos) << r.out << r.err;
  const auto second = slurp(dir_ / "second.err");
  EXPECT_NE(second.find("o4: another cpt train is writing it (pid "), std::string::npos) << second;
  EXPECT_NE(r.out.find("ranks=2 alive=0"), std::string::npos) << r.out << r.err;
  // A new run into the killed run's OUT is refused (it would cut its metrics); --resume continues
  // it (from step 0 while it has no checkpoint).
  const auto fresh = train("dp2", "o4", 2, short_config(2));
  EXPECT_EQ(fresh.exit_code, 2);
  EXPECT_NE(fresh.err.find("o4: holds a training run (metrics.jsonl): --resume continues it"), std::string::npos)
      << fresh.err;
  const auto again = train("dp2", "o4", 2, short_config(2), " --resume");
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// A one-node job listens on --master-addr alone (loopback by default): the rendezvous store and
// Gloo's transport, in IPv4 and IPv6 (the store had listened on every interface).
TEST_F(JobFailures, AOneNodeJobListensOnLoopbackOnly) {
  const auto r =
      sh(once_training("dp2", "long.json", "o5", 2,
                       "for p in $(pgrep -P $L); do python3 - $p <<'PY'\n"
                       "import os, sys\n"
                       "pid = sys.argv[1]\n"
                       "inodes = set()\n"
                       "for fd in os.listdir('/proc/%s/fd' % pid):\n"
                       "    try: link = os.readlink('/proc/%s/fd/%s' % (pid, fd))\n"
                       "    except OSError: continue\n"
                       "    if link.startswith('socket:['): inodes.add(link[8:-1])\n"
                       "for table in ('tcp', 'tcp6'):\n"
                       "    for line in open('/proc/net/' + table).readlines()[1:]:\n"
                       "        f = line.split()\n"
                       "        if f[3] == '0A' and f[9] in inodes: print('listening', table, f[1].split(':')[0])\n"
                       "PY\n"
                       "done; kill $L; wait $L"),
         dir_);
  ASSERT_NE(r.out.find("listening"), std::string::npos) << r.out << r.err;  // the store at least
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("listening")) continue;
    // 127.0.0.1 in /proc/net/tcp's little-endian hex.
    EXPECT_EQ(line, "listening tcp 0100007F") << r.out;
  }
}

// SIGTERM to the launcher (a preemption, `scancel`) or to a single process: the ranks finish their
// step, agree, write a final checkpoint at it and exit 4; metrics.jsonl ends at that step, and the
// checkpoint verifies. (It used to end the ranks at once, with no checkpoint and no message.)
TEST_F(JobFailures, SigtermEndsWithAFinalCheckpointAndExitFour) {
  for (const auto& [out, procs] : {std::pair{"o6", 2}, std::pair{"o7", 1}}) {
    const auto r = sh(
        once_training(procs == 2 ? "dp2" : "single", "long.json", out, procs, "kill -TERM $L; wait $L; echo exit=$?"),
        dir_);
    EXPECT_NE(r.out.find("exit=4"), std::string::npos) << out << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("stop requested: ending at step "), std::string::npos) << r.err;
    const auto trained = losses(dir_ / out / "metrics.jsonl").size();
    std::ostringstream name;
    name << "checkpoints/step_" << std::setw(8) << std::setfill('0') << trained;
    EXPECT_TRUE(fs::exists(dir_ / out / name.str() / "manifest.json")) << out << ": " << name.str();
    EXPECT_TRUE(fs::exists(dir_ / out / "measured.json")) << out;
  }
}

TEST_F(JobFailures, CudaRanksWithoutDevicesFailAtOnceInOneLine) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "this machine has a CUDA device";
  const auto d = dir_.string();
  // The launcher checks the device before it starts the ranks: none here.
  const auto r = sh("timeout 60 " + cpt_binary() + " train --plan " + d + "/dp2/plan.json --config " + d +
                        "/train.json --out " + d + "/o5 --nproc-per-node 2 --device cuda",
                    dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("device \"cuda\": no CUDA device is visible"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // said once, by the launcher
}

// Data that does not fit the model is reported once, by the launcher, before any rank starts (not
// by rank 0 and then by every other rank as a failed barrier).
TEST_F(JobFailures, DataThatDoesNotFitTheModelIsOneLineFromTheLauncher) {
  plan_tiny256_on_dp2("dp2-v256");
  const auto r = train("dp2-v256", "o-v256", 2);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("tokenized with a 512-token vocabulary, but model tiny256 has 256"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// What every rank would find wrong is said once, by the launcher, before the tokenizer and data
// are prepared: a launch of another size than the plan's, a layout or model the executor does not
// run in a hand-edited plan, an init_from that is not there. (Each rank said it, one line per rank.)
TEST_F(JobFailures, WhatEveryRankWouldRefuseIsOneLineFromTheLauncher) {
  const auto d = dir_.string();
  const auto one_line = [](const cpt::cli_testing::Run& r, const std::string& expected) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  one_line(train("dp2", "o-three", 3, short_config(2)),
           "--nproc-per-node 3: " + d + "/dp2/plan.json needs 2 processes (tp · cp · dp · pp), got 3");
  EXPECT_FALSE(fs::exists(dir_ / "o-three/tokenizer.model"));
  auto plan = nlohmann::json::parse(slurp(dir_ / "dp2/plan.json"));
  plan["parallel"]["zero_stage"] = 3;  // parameters offloaded: planned and priced, not run
  plan["parallel"]["offload"] = "optimizer+params";
  fs::create_directories(dir_ / "dp2-edited");
  std::ofstream(dir_ / "dp2-edited/plan.json") << plan.dump(2);
  one_line(train("dp2-edited", "o-edited", 2, short_config(2)),
           d + "/dp2-edited/plan.json: $.parallel: offload optimizer+params with ZeRO 3");
  // A model the executor does not build (planned and priced: GELU).
  plan = nlohmann::json::parse(slurp(dir_ / "dp2/plan.json"));
  plan["model"]["mlp"] = "gelu";
  fs::create_directories(dir_ / "dp2-gelu");
  std::ofstream(dir_ / "dp2-gelu/plan.json") << plan.dump(2);
  one_line(train("dp2-gelu", "o-gelu", 2, short_config(2)),
           d + "/dp2-gelu/plan.json: $.model: the executor builds LLaMA-family models");
  std::ofstream(dir_ / "init-missing.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2, "seed": 5,
      "threads": 1, "log_interval_steps": 0, "init_from": "no/such/checkpoint"})";
  one_line(train("dp2", "o-init", 2, "init-missing.json"), "init-missing.json: init_from ");
  // A Hugging Face directory with its config and no weights.
  fs::create_directories(dir_ / "hf-config-only");
  std::ofstream(dir_ / "hf-config-only/config.json") << R"({"model_type": "llama"})";
  std::ofstream(dir_ / "init-no-weights.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2,
      "seed": 5, "threads": 1, "log_interval_steps": 0, "init_from": ")"
                                               << (dir_ / "hf-config-only").string() << R"("})";
  one_line(train("dp2", "o-init-hf", 2, "init-no-weights.json"), "a Hugging Face directory without weights");
  // Weights of another shape (tiny's 512-token vocabulary for a 256-token model), named once.
  ASSERT_EQ(train("single", "o-source", 1, short_config(1)).exit_code, 0);
  plan_tiny256_on_dp2("dp2-v256-init");
  std::ofstream(dir_ / "init-other.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2, "seed": 5,
      "threads": 1, "log_interval_steps": 0, "init_from": ")"
                                          << (dir_ / "o-source/checkpoints/step_00000001").string() << R"("})";
  one_line(train("dp2-v256-init", "o-init-other", 2, "init-other.json"),
           "weights of model tiny, which the plan's model tiny256 cannot load (vocab 512 against 256");
}

TEST_F(JobFailures, AMissingPeerEndsInATimeoutNotAHang) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "timeout.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2,
    "collective_timeout_s": 3})";
  // Rank 0 of a two-rank job whose rank 1 never starts.
  const auto r = sh("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 timeout 60 " + cpt_binary() +
                        " train --plan " + d + "/dp2/plan.json --config " + d + "/timeout.json --out " + d + "/o4",
                    dir_);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 0: rendezvous at 127.0.0.1:29731 failed"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line, no backtrace
}

// The pid of rank R among the children of the launcher whose pid is in $L (a shell fragment).
std::string pid_of_rank(int rank) {
  return "$(for p in $(pgrep -P $L); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx RANK=" + std::to_string(rank) +
         " && echo $p; done)";
}

// The lines of `err` that are errors (the ranks also log information).
std::vector<std::string> error_lines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.find("error:") != std::string::npos || line.find("because of it") != std::string::npos)
      lines.push_back(line);
  }
  return lines;
}

// A rank that stops (SIGSTOP: a frozen process) is named by the launcher, not the rank that timed
// out waiting for it; the job ends at the collective timeout, not at timeout plus a grace period.
TEST_F(JobFailures, AHungRankIsNamedNotTheOneThatTimedOut) {
  std::ofstream(dir_ / "long-timeout.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 100000,
    "seed": 5, "threads": 1, "log_interval_steps": 0, "collective_timeout_s": 3})";
  const auto r = sh(once_training("dp2", "long-timeout.json", "o8", 2,
                                  "kill -STOP " + pid_of_rank(1) +
                                      "; S=$(date +%s); wait $L; echo exit=$? after=$(($(date +%s) - S))"),
                    dir_);
  EXPECT_NE(r.out.find("exit=3"), std::string::npos) << r.out << r.err;
  const auto errors = error_lines(r.err);
  ASSERT_FALSE(errors.empty()) << r.err;
  EXPECT_NE(errors[0].find("error: rank 1 stopped running at step "), std::string::npos) << r.err;
  EXPECT_NE(errors[0].find("(the process was stopped or frozen)"), std::string::npos) << r.err;
  ASSERT_GE(errors.size(), 2u) << r.err;
  EXPECT_NE(errors[1].find("because of it, rank 0: "), std::string::npos) << r.err;
  const auto after = std::stoi(r.out.substr(r.out.find("after=") + 6));
  EXPECT_LE(after, 3 + 5) << r.out;  // the timeout, and the launcher's teardown
}

// One rank's own failure (its checkpoint directory is gone: an I/O error like a full disk's) comes
// first, before the other rank's failed collective it caused, whichever rank printed first.
TEST_F(JobFailures, TheRootCauseIsTheFirstLine) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "checkpointing.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 100000,
    "seed": 5, "threads": 1, "log_interval_steps": 0, "checkpoint": {"interval_steps": 5}})";
  const auto r =
      sh(once_training("zero2-dp2", "checkpointing.json", "o9", 2,
                       "rm -rf " + d + "/o9/checkpoints; touch " + d + "/o9/checkpoints; wait $L; echo exit=$?",
                       "[ -d " + d + "/o9/checkpoints ]"),
         dir_);
  EXPECT_NE(r.out.find("exit=3"), std::string::npos) << r.out << r.err;
  const auto errors = error_lines(r.err);
  ASSERT_FALSE(errors.empty()) << r.err;
  EXPECT_NE(errors[0].find("error: rank "), std::string::npos) << r.err;
  EXPECT_NE(errors[0].find("checkpoints"), std::string::npos) << r.err;
  for (std::size_t i = 1; i < errors.size(); ++i) {
    EXPECT_NE(errors[i].find("because of it, rank "), std::string::npos) << r.err;
  }
}

// SIGKILL of a random rank at a random step of a 40-step run that checkpoints every 4 steps, then
// `--resume`: the run ends bit-identical to the same layout's uninterrupted run (every loss, every
// final weight), in each layout of `layouts` (plan name, ranks).
void JobFailures::expect_resume_after_a_kill(const std::vector<std::pair<std::string, int>>& layouts) {
  const auto d = dir_.string();
  auto config = nlohmann::json::parse(slurp(dir_ / "train.json"));
  config["steps"] = 40;
  config["checkpoint"] = {{"interval_steps", 4}, {"keep_last", 2}};
  std::ofstream(dir_ / "resumable.json") << config.dump();
  std::random_device entropy;
  int kills = 0;
  for (const auto& [plan, procs] : layouts) {
    const int rank = static_cast<int>(entropy() % static_cast<unsigned>(procs));
    const int step = 5 + static_cast<int>(entropy() % 24);  // after the first checkpoint, well before the end
    SCOPED_TRACE(plan + ": rank " + std::to_string(rank) + " killed after step " + std::to_string(step));
    const auto whole = train(plan, "whole-" + plan, procs, "resumable.json");
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    const auto out = d + "/killed-" + plan;
    const auto killed =
        sh(cpt_binary() + " train --plan " + d + "/" + plan + "/plan.json --config " + d + "/resumable.json --out " +
               out + " --nproc-per-node " + std::to_string(procs) + " & L=$!; for i in $(seq 3000); do [ \"$(wc -l < " +
               out + "/metrics.jsonl 2>/dev/null)\" -ge " + std::to_string(step) +
               " ] 2>/dev/null && break; sleep 0.01; done; kill -9 " + pid_of_rank(rank) + "; wait $L; echo exit=$?",
           dir_);
    if (killed.out.find("exit=0") != std::string::npos) continue;  // finished before the kill: nothing to resume
    ASSERT_NE(killed.out.find("exit=3"), std::string::npos) << killed.out << killed.err;
    ++kills;
    const auto resumed = train(plan, "killed-" + plan, procs, "resumable.json", " --resume");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_EQ(losses(dir_ / ("whole-" + plan) / "metrics.jsonl"), losses(fs::path(out) / "metrics.jsonl"));
    EXPECT_EQ(largest_relative_difference(dir_ / ("whole-" + plan), out, 40), 0.0);
  }
  EXPECT_GT(kills, 0) << "every run finished before its rank was killed";
}

TEST_F(JobFailures, DataParallelLayoutsResumeBitIdenticallyAfterARankIsKilled) {
  expect_resume_after_a_kill({{"dp2", 2}, {"zero1-dp2", 2}, {"zero2-dp2", 2}, {"zero3-dp2", 2}, {"hsdp-dp4", 4}});
}

TEST_F(JobFailures, ModelParallelLayoutsResumeBitIdenticallyAfterARankIsKilled) {
  expect_resume_after_a_kill({{"tp2-sp", 2}, {"cp2", 2}, {"pp2", 2}, {"pp2-interleaved", 2}});
}

}  // namespace
