// --save-init: what a reference trainer needs to repeat a run exactly (the
// LoRA weights before the first step, and every step's micro-batches), so
// bench/train_reference.py can train the same adapter from the same start
// on the same batches.
//   init.safetensors  lora_a / lora_b per pair ("blk.N.attn_q.lora_a": rank x n_in, F32)
//   batches.jsonl     one line per step: {"step": s, "micro_batches": [{"tokens": [[...]...],
//                     "targets": [[0/1...]...]}]}: tokens padded to the longest with 0,
//                     targets[i] = 1 where token i counts in the loss
#pragma once

#include <vector>

#include "train/batches.h"
#include "train/config.h"
#include "train/lora_params.h"
#include "train/run_folder.h"

namespace graft {

Status write_init(const RunFolder& run, const LoraParams& params, const std::vector<TrainExample>& examples,
                  const BatchPlan& plan, const TrainConfig& config, int total_steps);

}  // namespace graft
