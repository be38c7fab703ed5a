// A training run's folder: the run's config (config.json), optionally its
// initial weights and batch plan (--save-init), and its checkpoints.
//
//   config.json                    TrainConfig + adapter store + data files (name, sha256, counts)
//   init.safetensors               the LoRA weights before the first step (--save-init)
//   batches.jsonl                  each step's micro-batches: tokens and target flags (--save-init)
//   checkpoints/step-000100/       state.safetensors (A, B, AdamW moments) + state.json
//   checkpoints/latest             the name of the newest complete checkpoint
//
// A checkpoint is written into a hidden folder and renamed into place, then
// `latest` is replaced atomically: a kill at any moment leaves the previous
// checkpoint usable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/lora_params.h"
#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

// What a checkpoint records beside the weights and moments. The data order
// and the dropout masks are functions of (seed, step), so the step is the
// whole position in the data and the random state.
struct CheckpointState {
  int step = 0;  // optimizer steps done
  int total_steps = 0;
  int64_t tokens = 0;              // tokens trained so far
  double wall_s = 0.0;             // training time so far (all sessions)
  double train_loss = 0.0;         // the last step's
  std::optional<double> val_loss;  // the last validation's
};

class RunFolder {
 public:
  explicit RunFolder(fs::path dir) : dir_(std::move(dir)) {}
  const fs::path& path() const { return dir_; }

  // A new folder for a run (created, with its checkpoints folder).
  static Result<RunFolder> create(const fs::path& dir);
  // A default location for a new run: $XDG_DATA_HOME/graft/train/<name>[-N].
  static fs::path default_path(const std::string& name);

  Status write_config(const nlohmann::json& config) const;
  Result<nlohmann::json> read_config() const;

  // Writes the checkpoint of state.step and makes it the latest; older ones
  // but the previous are removed. Returns its folder.
  Result<fs::path> save_checkpoint(const LoraParams& params, const CheckpointState& state) const;
  // The latest checkpoint (nullopt when there is none yet).
  Result<std::optional<CheckpointState>> load_latest(LoraParams& params) const;

  fs::path init_weights_path() const { return dir_ / "init.safetensors"; }
  fs::path batches_path() const { return dir_ / "batches.jsonl"; }

 private:
  fs::path checkpoints() const { return dir_ / "checkpoints"; }
  fs::path dir_;
};

}  // namespace graft
