// Inputs shared by the tests of graft's own weight products (q4_rows,
// q8_rows): a random weight and random rows, each row with an outlier in its
// first block so that block's scale is coarse.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace graft::testing {

struct RowsTestData {
  std::vector<float> w;  // [n_in, n_out]
  std::vector<float> x;  // [n_in, n_rows]
};

inline RowsTestData rows_test_data(int64_t n_in, int64_t n_out, int64_t n_rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RowsTestData d;
  d.w.resize(size_t(n_in * n_out));
  d.x.resize(size_t(n_in * n_rows));
  for (float& v : d.w) v = normal(rng) * 0.05f;
  for (float& v : d.x) v = normal(rng);
  for (int64_t r = 0; r < n_rows; ++r) d.x[size_t(r * n_in)] = 40.0f * float(r % 3);
  return d;
}

}  // namespace graft::testing
