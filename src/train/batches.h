// The order a run reads its examples in, as mlx-lm orders them: examples
// sorted by length and cut into batches of batch_size neighbours (little
// padding), the batches shuffled anew each epoch. Batch k of the run is a
// function of (examples, batch_size, seed, k) alone, so a resumed run needs
// only its step count to continue where it stopped.
#pragma once

#include <cstdint>
#include <vector>

#include "train/dataset.h"
#include "train/micro_batch.h"

namespace graft {

class BatchPlan {
 public:
  BatchPlan(const std::vector<TrainExample>& examples, int batch_size, uint64_t seed);

  int batches_per_epoch() const { return int(batches_.size()); }
  // The example indices of the run's batch k (k counts on across epochs).
  const std::vector<int>& batch(int64_t k) const;
  // The first n batches in length order, unshuffled (validation); n < 0: all.
  std::vector<std::vector<int>> in_order(int n) const;

 private:
  std::vector<std::vector<int>> batches_;  // in length order
  uint64_t seed_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int> order_;  // the cached epoch's batch order
};

// The examples as one micro-batch: padded to the longest, each target's
// loss weighted by weight.
MicroBatch make_micro_batch(const std::vector<TrainExample>& examples, const std::vector<int>& ids,
                            float weight);

// Targets in these examples (for the 1 / count weights of a step).
int64_t count_targets(const std::vector<TrainExample>& examples, const std::vector<int>& ids);

}  // namespace graft
