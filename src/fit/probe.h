// The speed probe: a few seconds of graft's own kernels on this machine —
// weight products of each common type at 1, 8 and many rows, the products
// of a stack of layers' matrices at 1 and 8 rows, attention over
// an F16 cache, and the fixed cost of a graph node — from which speed.h
// predicts prefill and decode rates. Decode products are timed on weights
// several times larger than the CPU's last-level cache, so they stream from
// memory as a model's weights do from one step to the next (a matrix that
// fits in the cache is re-read from it, and its rate says nothing about
// memory). Results are cached in ~/.cache/graft/probe.json, keyed by CPU
// model and thread count.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/files.h"
#include "util/result.h"

namespace graft::fit {

// One weight type's rates, as graft's kernels for it achieve them.
struct TypeRate {
  double bytes_per_s = 0;    // weight bytes per second of a 1-row product, from memory
  double bytes_per_s_8 = 0;  // the same for an 8-row product (the weights read once for all rows)
  double prefill_flops = 0;  // arithmetic per second of a product of many rows
  // The same two for the matrices of a model's layers, one product after
  // another (a 1B-class llama layer's seven shapes, stacked past the cache):
  // their bytes over their time, which carries what a layer's products cost
  // beyond one large product's rate (small matrices, the input quantized
  // for each, the barrier after each).
  double layer_bytes_per_s = 0;
  double layer_bytes_per_s_8 = 0;

  // Seconds of a product of `rows` rows (1 - 8: between the two measured
  // rates; beyond: each further row as dear as the 2nd to 8th) with a
  // matrix of `bytes` bytes.
  double decode_seconds(int64_t bytes, int rows) const;
  // The same for a matrix of a layer, at the layer rates.
  double layer_decode_seconds(int64_t bytes, int rows) const;
};

// Bumped when what the probe measures changes; older cached results are
// measured anew.
inline constexpr int kProbeVersion = 7;

struct ProbeResult {
  int version = kProbeVersion;
  std::string cpu;
  int threads = 0;
  std::string measured_at;                // UTC, ISO 8601
  bool quick = false;                     // a --quick probe (small sizes: rough)
  std::map<std::string, TypeRate> types;  // by ggml type name ("f16", "q8_0", "q4_0", ...)
  // Attention over an F16 cache laid out as the KV cache is (a cell's heads
  // side by side), in (row x cell x head x head-dim) per second, at head
  // width 128: one row per op over a long window (decode; the ops' caches
  // together past the last-level cache, as a step's are), and a causal
  // prompt (prefill).
  double attention_decode = 0;
  double attention_prefill = 0;
  // The same at head width 64 (0: not measured; taken as at 128). A cell
  // costs more than its width says (its score's softmax, the mask), so a
  // narrow head's units run slower.
  double attention_decode_64 = 0;
  double attention_prefill_64 = 0;
  // What one decode row's attention op costs beyond its units at that rate
  // (setting up, the barrier after it): paid once per sequence and layer.
  double attention_op_seconds = 0;
  double node_seconds = 0;  // the fixed cost of one graph node (dispatch, thread sync)

  // Seconds of attention over `row_cell_heads` (row x cell x head) of heads
  // `head_dim` wide: the cost of a row-cell-head is taken as linear in the
  // width, through the two widths measured.
  double attention_seconds(double row_cell_heads, int head_dim, bool prefill) const;

  // The rates for a type, or those of the probed type nearest in bits per weight.
  TypeRate rate(int ggml_type) const;
  // Headline figures: weight streaming of F16 at one row (memory bandwidth
  // as the kernels see it), and the many-row rates of Q8_0 (int8) and F16.
  double memory_bandwidth() const;
  double int8_flops() const;
  double f16_flops() const;

  nlohmann::json to_json() const;
  static Result<ProbeResult> from_json(const nlohmann::json& j);
};

struct ProbeOptions {
  int threads = 0;     // 0: all cores
  bool quick = false;  // tiny sizes: well under a second, for tests
};

Result<ProbeResult> run_probe(const ProbeOptions& options);

// cache_dir()/probe.json
fs::path probe_cache_file();
// The cached result for this CPU and thread count, if any (none when it is
// from an older probe).
Result<std::optional<ProbeResult>> load_cached_probe(const fs::path& file, const std::string& cpu,
                                                     int threads);
// Adds (or replaces) the result's entry in the cache file, atomically.
Status save_probe(const fs::path& file, const ProbeResult& result);
// A file holding one result (what `graft fit --probe --json` prints), or a
// cache file with exactly one entry: for injecting measured rates.
Result<ProbeResult> read_probe_file(const fs::path& file);

}  // namespace graft::fit
