#include "train/batches.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace graft {

BatchPlan::BatchPlan(const std::vector<TrainExample>& examples, int batch_size, uint64_t seed) : seed_(seed) {
  std::vector<int> ids(examples.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
    return examples[size_t(a)].tokens.size() < examples[size_t(b)].tokens.size();
  });
  for (size_t i = 0; i < ids.size(); i += size_t(batch_size)) {
    batches_.emplace_back(ids.begin() + long(i),
                          ids.begin() + long(std::min(ids.size(), i + size_t(batch_size))));
  }
}

const std::vector<int>& BatchPlan::batch(int64_t k) const {
  const int64_t n = int64_t(batches_.size());
  const int64_t epoch = k / n;
  if (epoch != epoch_) {
    order_.resize(size_t(n));
    std::iota(order_.begin(), order_.end(), 0);
    // Fisher-Yates with a generator seeded by (seed, epoch): the same on every platform.
    std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + uint64_t(epoch) + 1);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[size_t(rng() % uint64_t(i + 1))]);
    epoch_ = epoch;
  }
  return batches_[size_t(order_[size_t(k % n)])];
}

std::vector<std::vector<int>> BatchPlan::in_order(int n) const {
  const size_t count = n < 0 ? batches_.size() : std::min(batches_.size(), size_t(n));
  return {batches_.begin(), batches_.begin() + long(count)};
}

int64_t count_targets(const std::vector<TrainExample>& examples, const std::vector<int>& ids) {
  int64_t n = 0;
  for (int id : ids) n += examples[size_t(id)].n_targets();
  return n;
}

MicroBatch make_micro_batch(const std::vector<TrainExample>& examples, const std::vector<int>& ids,
                            float weight) {
  MicroBatch b;
  b.n_seqs = int(ids.size());
  for (int id : ids) b.seq_len = std::max(b.seq_len, int(examples[size_t(id)].tokens.size()));
  b.tokens.assign(size_t(b.n_seqs) * size_t(b.seq_len), 0);
  for (int s = 0; s < b.n_seqs; ++s) {
    const TrainExample& e = examples[size_t(ids[size_t(s)])];
    std::copy(e.tokens.begin(), e.tokens.end(), b.tokens.begin() + long(s) * b.seq_len);
    for (size_t i = 1; i < e.tokens.size(); ++i) {
      if (!e.target[i]) continue;
      b.loss_rows.push_back(s * b.seq_len + int(i) - 1);
      b.labels.push_back(e.tokens[i]);
      b.weights.push_back(weight);
    }
    b.n_tokens += int64_t(e.tokens.size());
  }
  return b;
}

}  // namespace graft
