// A job's settings: OpenAI's hyperparameters and graft's "lora" object become
// the trainer's config and `graft train` arguments; a bad setting names its
// field.
#include <gtest/gtest.h>

#include <algorithm>

#include "train/job_spec.h"

namespace graft {
namespace {

JobSpec spec_with(json lora) {
  JobSpec spec;
  spec.model = "tiny";
  spec.model_path = "/models/tiny.gguf";
  spec.training_file = "file-1";
  spec.training_path = "/data/files/file-1.jsonl";
  spec.seed = 3;
  spec.lora = std::move(lora);
  return spec;
}

// The value after `flag` in args ("" if the flag is absent).
std::string value_of(const std::vector<std::string>& args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it == args.end() || it + 1 == args.end() ? "" : *(it + 1);
}

TEST(JobSpec, LoraSettingsBecomeTheTrainersConfigAndArguments) {
  JobSpec spec = spec_with({{"rank", 4},
                            {"alpha", 16},
                            {"targets", {"q", "v"}},
                            {"warmup", 5},
                            {"grad_accum", 2},
                            {"learning_rate", 1e-3},
                            {"mask_prompt", false},
                            {"grad_checkpoint", true}});
  spec.batch_size = 2;
  spec.learning_rate_multiplier = 0.5;
  std::string param;
  auto config = job_train_config(spec, nullptr, &param);
  ASSERT_TRUE(config) << param << ": " << config.error().message;
  EXPECT_EQ(config->rank, 4);
  EXPECT_DOUBLE_EQ(config->scale, 4.0);  // alpha / rank
  EXPECT_EQ(config->warmup_steps, 5);
  EXPECT_EQ(config->grad_accumulation, 2);
  EXPECT_EQ(config->batch_size, 2);
  EXPECT_DOUBLE_EQ(config->learning_rate, 5e-4);
  EXPECT_EQ(config->seed, 3u);

  const auto args = fresh_run_arguments(spec, "my-id", "/store", "/jobs/j1");
  EXPECT_EQ(args.front(), "/models/tiny.gguf");
  EXPECT_EQ(value_of(args, "--data"), "/data/files/file-1.jsonl");
  EXPECT_EQ(value_of(args, "--id"), "my-id");
  EXPECT_EQ(value_of(args, "--store"), "/store");
  EXPECT_EQ(value_of(args, "--job-dir"), "/jobs/j1");
  EXPECT_EQ(value_of(args, "--seed"), "3");
  EXPECT_EQ(value_of(args, "--rank"), "4");
  EXPECT_EQ(value_of(args, "--alpha"), "16");
  EXPECT_EQ(value_of(args, "--targets"), "q,v");
  EXPECT_EQ(value_of(args, "--warmup"), "5");
  EXPECT_EQ(value_of(args, "--grad-accumulation"), "2");
  EXPECT_EQ(value_of(args, "--batch-size"), "2");
  EXPECT_EQ(value_of(args, "--learning-rate"), "0.0005");
  EXPECT_NE(std::find(args.begin(), args.end(), "--no-mask-prompt"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--grad-checkpoint"), args.end());
  EXPECT_EQ(resume_arguments("/jobs/j1"), (std::vector<std::string>{"--resume", "/jobs/j1"}));
}

TEST(JobSpec, ABadSettingNamesItsField) {
  ModelConfig model;
  model.n_embd = 64;
  model.n_layer = 2;
  model.n_ctx_train = 256;
  auto refused = [&](json lora, const std::string& expected) {
    std::string param;
    auto config = job_train_config(spec_with(std::move(lora)), &model, &param);
    EXPECT_FALSE(config) << expected;
    EXPECT_EQ(param, expected);
    if (!config) {
      EXPECT_NE(config.error().message.find(expected), std::string::npos) << config.error().message;
    }
  };
  refused({{"rnak", 4}}, "lora.rnak");
  refused({{"rank", "four"}}, "lora.rank");
  refused({{"rank", 4.5}}, "lora.rank");
  refused({{"dropout", true}}, "lora.dropout");
  refused({{"targets", {"q", "nose"}}}, "lora.targets");
  refused({{"targets", json::array()}}, "lora.targets");
  refused({{"lr_schedule", "sawtooth"}}, "lora.lr_schedule");
  refused({{"alpha", 16}, {"scale", 2}}, "lora.scale");
  refused({{"warmup", 2}, {"warmup_steps", 3}}, "lora.warmup_steps");
  refused({{"batch_size", 2}}, "lora.batch_size");
  refused({{"model", "x"}}, "lora.model");
  refused({{"rank", 65}}, "lora.rank");  // wider than the model
  refused({{"warmup", -1}}, "lora.warmup");
  std::string param;
  JobSpec epochs = spec_with(json::object());
  epochs.n_epochs = -1;
  EXPECT_FALSE(job_train_config(epochs, &model, &param));
  EXPECT_EQ(param, "hyperparameters.n_epochs");
}

}  // namespace
}  // namespace graft
