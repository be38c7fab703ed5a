// What a training job trains: the accepted request (OpenAI's fine-tuning
// fields plus graft's "lora" object), with every value checked, and how it
// becomes a `graft train --json` command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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
  json lora = json::object();  // graft's trainer options, names and values checked
  bool auto_load = false;      // load the adapter into the server when the job succeeds
  json metadata = nullptr;     // the user's key/value pairs, echoed back
};

json to_json(const JobSpec& spec);
Result<JobSpec> job_spec_from_json(const json& j);

// One trainer option a job may set in its "lora" object.
struct TrainerParam {
  enum class Kind { integer, number, boolean, choice, list };
  std::string name;  // the field in "lora"
  std::string flag;  // the `graft train` option
  Kind kind;
  double min = 0;  // integer and number: the accepted range
  double max = 0;
  std::vector<std::string> choices;  // choice: the accepted values; list: the accepted items
  std::string help;
};

const std::vector<TrainerParam>& trainer_params();
// Why a "lora" field is refused (unknown name, wrong type, out of range), or nullopt.
std::optional<std::string> check_trainer_param(std::string_view name, const json& value);

// The `graft train` arguments (after the program and "train") for a fresh run
// that lands adapter `adapter_id` in `store_dir` and keeps its state in `job_dir`.
std::vector<std::string> fresh_run_arguments(const JobSpec& spec, const std::string& adapter_id,
                                             const fs::path& store_dir, const fs::path& job_dir);
// The arguments that continue the run kept in `job_dir` from its last checkpoint.
std::vector<std::string> resume_arguments(const fs::path& job_dir);

}  // namespace graft
