// The body of POST /v1/fine_tuning/jobs: OpenAI's fields (model,
// training_file, validation_file, suffix, seed, hyperparameters or
// method.supervised.hyperparameters, metadata, integrations) and graft's own
// (lora: the trainer's settings, train/job_spec.h; auto_load). An unknown field or a wrong value
// is a 400 naming it (lora fields as "lora.<name>"); an unknown file id is a 404.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "server/http.h"
#include "server/openai_params.h"
#include "train/job_store.h"

namespace graft::server {

struct FineTuningContext {
  std::string served_model;  // the only model jobs may name
  fs::path model_path;
  const ModelConfig* model_config = nullptr;  // to check settings against (rank <= width, ...)
  std::function<Result<FileRecord>(const std::string& id)> find_file;
  std::function<bool(const std::string& adapter_id)> adapter_exists;  // in the store already
};

// Fills `spec` (the adapter id is spec.suffix, or "" to let graft pick one).
std::optional<ApiError> read_fine_tuning_request(const RequestJson& body, const FineTuningContext& context,
                                                 JobSpec& spec);

}  // namespace graft::server
