// Publishing a finished adapter into the store: one folder, written under a
// hidden name and renamed into place, so the store never shows half an
// adapter (a full disk or a kill leaves at most a hidden folder, which
// store scans skip and the next publish of that id clears).
//   adapter_model.safetensors + adapter_config.json   PEFT, F32
//   <id>.gguf                                         GGUF LoRA, F32
//   graft_adapter.json                                base identity, training config, data, results
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "adapters/base_model.h"
#include "train/lora_params.h"
#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

struct PublishInfo {
  std::string id;
  fs::path store;
  nlohmann::json config;  // the training config
  nlohmann::json data;    // the data files: name, sha256, counts
  double train_loss = 0.0;
  std::optional<double> val_loss;
  std::optional<double> test_loss;
  int64_t tokens = 0;
  int steps = 0;
  double wall_s = 0.0;
};

// Removes what publishes of `id` that died (a crash, a kill) left in the
// store: hidden folders ".<id>.tmp-<pid>" whose process is gone.
void clear_dead_publishes(const fs::path& store, const std::string& id);

// Returns the adapter's folder. GRAFT_TRAIN_PUBLISH_FAULT (tests only): with
// half the adapter written, "enospc" fails as a full disk does, "kill" ends
// the process by SIGKILL.
Result<fs::path> publish_adapter(const LoraParams& params, float scale, const BaseModel& base,
                                 const PublishInfo& info);

}  // namespace graft
