#include "cli/forwarded_flags.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

namespace cpt::cli {
namespace {

// The launcher's ranks get every option given, as given, and nothing withheld or left at its
// default: an option added to the command is forwarded without another list to keep.
TEST(ForwardedFlags, EveryGivenOptionButTheWithheldOnes) {
  CLI::App app;
  auto* train = app.add_subcommand("train");
  std::string plan, out = "runs/train";
  bool resume = false, quiet = false;
  long steps = 0;
  int ranks = 1;
  train->add_option("--plan", plan);
  train->add_option("--out", out)->capture_default_str();
  train->add_flag("--resume", resume);
  train->add_flag("--quiet", quiet);
  train->add_option("--steps", steps);
  train->add_option("--nproc-per-node", ranks);
  app.parse(std::vector<std::string>{"2", "--nproc-per-node", "--resume", "--steps=5", "p.json", "--plan", "train"});
  EXPECT_EQ(forwarded_arguments(*train, {"--nproc-per-node"}),
            (std::vector<std::string>{"train", "--plan", "p.json", "--resume=true", "--steps", "5"}));
  EXPECT_EQ(forwarded_arguments(*train, {}), (std::vector<std::string>{"train", "--plan", "p.json", "--resume=true",
                                                                       "--steps", "5", "--nproc-per-node", "2"}));
  // A flag given as false is forwarded as false, not by its presence.
  CLI::App again;
  auto* train2 = again.add_subcommand("train");
  bool resume2 = true;
  train2->add_flag("--resume", resume2);
  again.parse(std::vector<std::string>{"--resume=false", "train"});
  EXPECT_FALSE(resume2);
  EXPECT_EQ(forwarded_arguments(*train2, {}), (std::vector<std::string>{"train", "--resume=false"}));
}

}  // namespace
}  // namespace cpt::cli
