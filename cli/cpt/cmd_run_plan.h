#pragma once
// `cpt run --model M (--gpu G | --cpu) --gpus N --config TRAIN.json --global-batch GB --seq-len S
// [--fix K=V,...] [--out DIR]`: plan for the given hardware (the planner's best configuration, or
// the fixed one), write DIR/plan/plan.json, read it back, train it with N local ranks
// (DIR/train), and for this machine's CPU (--cpu: the calibrated profile, calibrated first when
// there is none) compare the prediction with the run.
#include <filesystem>
#include <string>

namespace cpt::cli {

struct PlannedRunOptions {
  std::string model, gpu, config, fix, out;
  bool cpu = false;
  int gpus = 0;
  int global_batch = 0;
  int seq_len = 0;
};

void run_planned(const PlannedRunOptions& o);

// runs/run-<local time>: where `cpt run` writes without --out.
std::filesystem::path default_run_dir();

}  // namespace cpt::cli
