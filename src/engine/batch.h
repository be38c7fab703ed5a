// A batch: the rows one forward pass computes. Each row is one token of one
// sequence at one position, with its own adapter routing; rows of different
// sequences and different adapters share the pass.
#pragma once

#include <cstdint>
#include <vector>

#include "model/adapter_route.h"

namespace graft {

using TokenId = int32_t;
using SeqId = int32_t;

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
