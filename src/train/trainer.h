// Trainer: one LoRA training run, from a config to an adapter in the store.
//
// prepare() does everything that can fail on bad input — loads the model and
// the data, checks every setting, the adapter id and the store — before any
// compute. run() trains, validating and checkpointing as configured, and
// publishes the finished adapter into the store as one folder, atomically
// (PEFT safetensors + adapter_config.json, a GGUF LoRA copy, and
// graft_adapter.json). Progress goes out as JSON events (the shapes are in
// docs/training.md), the one stream the CLI, the job runner and the web
// page read.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config.h"
#include "train/dataset.h"
#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

class TrainEvents {
 public:
  virtual ~TrainEvents() = default;
  // One event: {"type": "start" | "step" | "val" | "checkpoint" | "done" | "stopped", ...}.
  virtual void event(const nlohmann::json& event) = 0;
  // A line for people (warnings, the summary).
  virtual void note(const std::string& line) = 0;
};

struct TrainRequest {
  TrainConfig config;      // ignored with `resume`: the run's own config is used
  fs::path store;          // empty: the user's adapter store
  fs::path run_dir;        // empty: a new folder under graft's data folder
  fs::path resume;         // a run folder to continue from its latest checkpoint
  int threads = 0;         // 0: every core
  bool save_init = false;  // write the initial weights and the batch plan into the run folder
};

class Trainer {
 public:
  // On error, *where names the data file and line when the error is in the data.
  static Result<std::unique_ptr<Trainer>> prepare(const TrainRequest& request, DataLocation* where);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end, or until *stop becomes true (then finishes the step,
  // writes a checkpoint and emits "stopped").
  Status run(TrainEvents& events, const std::atomic<bool>& stop);

  const fs::path& run_dir() const;
  const TrainConfig& config() const;

 private:
  struct State;
  explicit Trainer(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace graft
