// What a training job trains: the accepted request (OpenAI's fine-tuning
// fields plus graft's "lora" object of trainer settings), checked as
// `graft train` checks its options, and the `graft train --json` command
// line that runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config.h"
#include "util/files.h"
#include "util/result.h"

namespace graft {

using json = nlohmann::json;

struct JobSpec {
  std::string model;            // the served model's id
  fs::path model_path;          // the GGUF file the trainer loads
  std::string training_file;    // file ids
  std::string validation_file;  // "" when none
  fs::path training_path;       // where the file store keeps them
  fs::path validation_path;
  std::string suffix;  // the user's suffix ("" when none); the adapter id is decided at creation
  int64_t seed = 0;    // always set (a random one when the request gave none)
  // OpenAI's hyperparameters; absent means "auto" (the trainer's default).
  std::optional<int64_t> n_epochs;
  std::optional<int64_t> batch_size;
  std::optional<double> learning_rate_multiplier;
  json lora = json::object();  // trainer settings by TrainConfig's names (see lora_fields)
  bool auto_load = false;      // load the adapter into the server when the job succeeds
  json metadata = nullptr;     // the user's key/value pairs, echoed back
};

json to_json(const JobSpec& spec);
Result<JobSpec> job_spec_from_json(const json& j);

// The names "lora" takes: TrainConfig's settings (train/config.h, as its JSON
// names them) and "alpha", less what a job sets in other fields (model, data
// files, adapter id, seed; batch_size and epochs are OpenAI's hyperparameters).
const std::vector<std::string>& lora_fields();

// The trainer's config for a job: its defaults, then the hyperparameters,
// then "lora"; checked against the model (when given) as `graft train`
// checks it. On error, *param names the field at fault ("lora.rank",
// "hyperparameters.n_epochs") and the message speaks of it.
Result<TrainConfig> job_train_config(const JobSpec& spec, const ModelConfig* model, std::string* param);

// The `graft train` arguments (after the program and "train") for a fresh run
// that lands adapter `adapter_id` in `store_dir` and keeps its state in `job_dir`.
std::vector<std::string> fresh_run_arguments(const JobSpec& spec, const std::string& adapter_id,
                                             const fs::path& store_dir, const fs::path& job_dir);
// The arguments that continue the run kept in `job_dir` from its last checkpoint.
std::vector<std::string> resume_arguments(const fs::path& job_dir);

}  // namespace graft
