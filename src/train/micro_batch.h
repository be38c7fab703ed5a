// One forward/backward pass worth of training rows: n_seqs sequences, each
// padded to seq_len tokens, laid out sequence after sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace graft {

struct MicroBatch {
  int n_seqs = 0;
  int seq_len = 0;
  std::vector<int32_t> tokens;  // [n_seqs * seq_len]; padding holds any valid token
  // The rows whose next token is a target: row index s * seq_len + i, the
  // token the row must predict, and the weight of its loss in the step's
  // objective (1 / the step's target count, so the step minimizes the mean).
  std::vector<int32_t> loss_rows;
  std::vector<int32_t> labels;
  std::vector<float> weights;
  int64_t n_tokens = 0;  // real (unpadded) tokens

  int n_rows() const { return n_seqs * seq_len; }
};

}  // namespace graft
