// A batch: the rows one forward pass computes. Each row is one token of one
// sequence at one position, with its own adapter routing; rows of different
// sequences and different adapters share the pass.
#pragma once

#include <cstdint>
#include <vector>

namespace graft {

using TokenId = int32_t;
using SeqId = int32_t;

// The mounted adapters a row uses, each with its scale (a stack is the sum of
// their deltas). Slots index the model's LoRA slots (model/lora.h); n == 0 is
// the base model.
struct AdapterRoute {
  static constexpr int kMaxStack = 4;
  int n = 0;
  int slot[kMaxStack] = {};
  float scale[kMaxStack] = {};

  bool empty() const { return n == 0; }
  bool operator==(const AdapterRoute&) const = default;
};

struct BatchRow {
  TokenId token = 0;
  int32_t pos = 0;      // position of this token within its sequence
  SeqId seq = 0;        // the KV sequence this row attends to and appends to
  bool logits = false;  // return this row's logits
  AdapterRoute adapters;
};

struct Batch {
  std::vector<BatchRow> rows;

  void clear() { rows.clear(); }
  size_t size() const { return rows.size(); }
  int n_logits() const {
    int n = 0;
    for (const auto& r : rows) n += r.logits ? 1 : 0;
    return n;
  }
};

}  // namespace graft
