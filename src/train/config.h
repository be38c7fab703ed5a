// TrainConfig: every setting of a training run, with mlx-lm's `lora`
// defaults, as the CLI takes them and as a job folder and the finished
// adapter's graft_adapter.json record them (JSON both ways).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/lora.h"
#include "model/model.h"
#include "util/result.h"

namespace graft {

struct TrainConfig {
  // What to train on and where the result goes.
  std::string model;                // the base GGUF
  std::string data;                 // a .jsonl file or a folder with train.jsonl (+ valid.jsonl, test.jsonl)
  std::string valid;                // a validation .jsonl ("": the folder's valid.jsonl, if any)
  std::string adapter_id;           // "": made from the model and the time
  std::optional<bool> mask_prompt;  // unset: on (loss on assistant turns / completions only)
  int max_seq_length = 2048;        // longer examples are cut (to the model's context if that is shorter)

  // The adapter.
  int rank = 8;
  double scale = 20.0;  // the LoRA delta's factor (alpha / rank); mlx-lm's default
  double dropout = 0.0;
  int num_layers = 16;              // the last N layers (all when the model has fewer); -1: all
  std::vector<LoraTarget> targets;  // empty: all seven projections

  // The optimizer.
  double learning_rate = 1e-5;
  std::string lr_schedule = "constant";  // "constant" or "cosine" (to min_lr at the last step)
  int warmup_steps = 0;                  // linear from 0 before the schedule
  double min_lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 0.0;  // the gradient's global norm is clipped to this (0: off)

  // Steps.
  int batch_size = 4;
  int grad_accumulation = 1;  // micro-batches per optimizer step
  int iters = 1000;           // optimizer steps (ignored when epochs > 0)
  int epochs = 0;             // > 0: as many steps as this many passes over the data take
  int val_every = 200;        // validation every N steps (and before the first and after the last)
  int val_batches = 25;       // batches per validation (-1: the whole set)
  int save_every = 100;       // checkpoint every N steps (0: only at the end)
  uint64_t seed = 0;
  bool grad_checkpoint = false;

  // Checks every field on its own and against the model (rank <= n_embd,
  // layers), naming the first bad one.
  Status validate(const ModelConfig& model) const;
  // The length examples are cut to: max_seq_length, or the model's context if shorter.
  int seq_limit(const ModelConfig& model) const;
  // The trained layers: the last num_layers (all for -1).
  std::vector<int> layers(const ModelConfig& model) const;
  std::vector<LoraTarget> target_list() const;
  // The learning rate at step (1-based) of total.
  double lr_at(int step, int total) const;
};

nlohmann::json to_json(const TrainConfig& config);
// Every key must be known; missing keys keep their defaults.
Result<TrainConfig> train_config_from_json(const nlohmann::json& json);

}  // namespace graft
