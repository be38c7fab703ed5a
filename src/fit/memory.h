// The memory model: what serving a model costs, part by part, counted the
// way graft allocates it — weights as mapped (and repacked copies), KV cells
// as the engine's cache lays them out (KvCache::footprint, so families with
// per-sequence state count it there), the compute buffer measured by
// building the graph of the largest planned batch (Forward::measure), LoRA
// slots, per-request sampling state, and the tokenizer and process overhead
// measured in this process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <ggml.h>

#include "engine/forward.h"
#include "model/model.h"
#include "util/result.h"

namespace graft::fit {

// How `graft serve` would run the model; zeros take serve's defaults.
struct ServeSettings {
  int n_ctx = 0;     // longest sequence; 0: the training context, at most 8192
  int parallel = 4;  // requests generated at once
  ggml_type kv_type = GGML_TYPE_F16;
  int64_t kv_budget_tokens = 0;  // KV cells; 0: a full context per parallel request
  int batch = 512;               // most rows in one step (--batch)
  int threads = 0;               // compute threads; 0: all cores
  int adapters = 0;              // LoRA slots to plan for
  int adapter_rank = 16;         // their rank (every projection of every layer)
};

// Bytes, part by part.
struct MemoryBreakdown {
  int64_t weights_mapped = 0;    // read in place from the file's mapping (resident once read)
  int64_t weights_repacked = 0;  // copies in a repacked layout (their mapped pages are released)
  int64_t weights_copied = 0;    // copies as they are in huge-page memory (their mapped pages are released)
  int64_t kv = 0;                // KV cells and per-sequence state
  int64_t compute = 0;           // ggml's allocator buffer for the largest batch, plus the CPU work buffer
  int64_t adapters = 0;          // mounted LoRA slots
  int64_t requests = 0;          // per running request: its sampler's candidates
  int64_t tokenizer = 0;         // the file's metadata, tokenizer and chat template (measured)
  int64_t fixed = 0;             // the process: code, libraries, runtime (measured)
  int64_t total() const;
};

// "1.50 GiB", "320 MiB", "12 KiB".
std::string format_bytes(int64_t bytes);

class FitModel {
 public:
  // Reads the file's header and weight layout without reading weights, and
  // loads its tokenizer and chat template to measure what they hold.
  static Result<std::unique_ptr<FitModel>> open(const std::string& path);

  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return layout_->config(); }
  const Model& layout() const { return *layout_; }
  int64_t file_bytes() const { return file_bytes_; }
  // The weight type holding most of the weights' bytes ("Q4_0", "F16").
  const std::string& quantization() const { return quantization_; }
  int64_t tokenizer_bytes() const { return tokenizer_bytes_; }

  // Fills serve's defaults: context, threads, KV budget.
  ServeSettings resolve(ServeSettings settings) const;
  // What serving with these (resolved) settings takes.
  MemoryBreakdown memory(const ServeSettings& settings) const;
  // The graph measure for a batch shape (memoized).
  Forward::Measure measure(ggml_type kv_type, int n_cells, int n_rows, int n_outputs, int threads,
                           const std::vector<KvCache::Window>& windows = {}) const;

  // The weight matrices the graph multiplies with, for speed predictions.
  struct Matrix {
    ggml_type type;
    int64_t n_in = 0, n_out = 0;
    int64_t bytes = 0;
    int layer = -1;    // -1: the output projection
    bool ffn = false;  // an MLP matrix (the last layer's run on the output rows only)
  };
  const std::vector<Matrix>& matrices() const { return matrices_; }

  // Serve's derived sizes, as server/served_model.cpp sets them.
  static int max_sequences(int parallel);
  static int batch_rows(const ServeSettings& s);

 private:
  FitModel() = default;
  std::string path_;
  std::unique_ptr<Model> layout_;
  int64_t file_bytes_ = 0;
  std::string quantization_;
  int64_t tokenizer_bytes_ = 0;
  std::vector<Matrix> matrices_;
  mutable std::mutex mutex_;
  mutable std::map<std::tuple<int, int, int, int, int, std::string>, Forward::Measure> measured_;
};

// The answers for one amount of usable memory.
struct FitAnswer {
  int64_t usable = 0;
  MemoryBreakdown need;  // for the settings asked
  bool fits = false;
  std::string reason;            // why (or why not), with the numbers
  int max_safe_context = 0;      // the longest context that fits at settings.parallel; 0: none
  int max_parallel = 0;          // the most requests that fit at settings.n_ctx; 0: none
  int64_t kv_budget_tokens = 0;  // the --kv-budget to use: at most parallel full contexts; 0: none fits
};

// settings must be resolved (FitModel::resolve).
FitAnswer solve(const FitModel& model, const ServeSettings& settings, int64_t usable);

}  // namespace graft::fit
