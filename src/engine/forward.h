// Forward: runs one batch through the model — builds (or reuses) the ggml
// graph for the batch's shape, places its rows in the KV cache, computes on
// the CPU backend and hands back the logits of the rows that asked for them.
// One row or many, prompt chunks or decode tokens, any mix of sequences and
// adapter routes: it is the same path (DESIGN.md invariant 6).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "engine/batch.h"
#include "engine/kv_cache.h"
#include "model/cpu_backend.h"
#include "model/graph.h"
#include "model/model.h"
#include "util/result.h"

namespace graft {

// The logits of the rows with logits=true, in row order; valid until the next run.
struct LogitsView {
  const float* data = nullptr;
  int n_vocab = 0;
  int n_rows = 0;
  const float* row(int i) const { return data + int64_t(i) * n_vocab; }
};

class Forward {
 public:
  Forward(Model& model, KvCache& cache, int n_threads);
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  // Errors (bad token, unknown sequence, position gap, no room, unmounted
  // adapter) leave the cache as it was; so does "out_of_memory" (the compute
  // buffer for the batch cannot be allocated), after which smaller batches
  // still run.
  Result<LogitsView> run(const Batch& batch);

  // Sizes the compute buffer for batches of up to n_rows rows and n_outputs
  // logits rows over the whole cache, so that such batches never grow it.
  // Errors: "out_of_memory", naming the size.
  Status reserve(int n_rows, int n_outputs);

  // The memory one batch shape needs, measured by building its graph over a
  // cache of n_cells cells of kv_type, allocating and computing nothing:
  // ggml's allocator buffer (inputs, activations, logits) and the CPU
  // backend's work buffer for n_threads. fit/ plans memory and speed with it;
  // the model may be one whose weights have no data (Model::load_layout).
  struct Measure {
    size_t compute_bytes = 0;
    size_t work_bytes = 0;
    int n_nodes = 0;  // those that compute (not views of memory)
  };
  // windows: the row groups and their cells, as KvCache::place gives them;
  // empty: one window of every row over all cells, as reserve() builds.
  static Measure measure(const Model& model, ggml_type kv_type, int n_cells, int n_rows, int n_outputs,
                         int n_threads, std::vector<KvCache::Window> windows = {});

  int n_threads() const { return backend_.n_threads(); }
  // Bytes of the compute buffer ggml's allocator holds now.
  size_t compute_buffer_bytes() const { return ggml_gallocr_get_buffer_size(allocator_.get(), 0); }
  // Graphs built so far (a batch of the same shape as the last reuses its graph).
  int graphs_built() const { return graphs_built_; }

 private:
  struct Shape {
    int n_rows = 0;
    int n_outputs = 0;
    std::vector<KvCache::Window> windows;
    std::vector<KvCache::Window> local_windows;  // a cache with a local pool: its windows
    int lora_used = 0;
    std::array<bool, kLoraTypeCount> lora_types{};
    uint64_t lora_version = 0;
    std::vector<std::array<int, 3>> state_groups;  // hybrid models: row_begin, n_seqs, n_tokens
    bool operator==(const Shape&) const = default;
  };
  Status check(const Batch& batch) const;
  Status build(const Shape& shape);
  // Creates the graph of a batch of this shape in `memory` (resized as
  // needed) over the cache tensors and, for hybrid models, the recurrent
  // state tensors (null otherwise); returns the logits tensor, or null when
  // the graph's context cannot be made. Its LoRA inputs are laid out for the
  // model's mounted adapters (see set_lora_inputs).
  static ggml_tensor* build_graph(const Model& model, const std::vector<AttentionInputs::Layer>& cache,
                                  const Shape& shape, std::vector<uint8_t>& memory, ggml_context_ptr& ctx,
                                  GraphContext& g, LoraInputs& lora,
                                  const std::vector<RecurrentInputs::Layer>* recurrent);
  void set_inputs(const Batch& batch, const KvCache::Placement& placement);
  void set_lora_inputs(const Batch& batch);
  // Takes a batch's rows back out of the cache (after a failed pass).
  void unplace(const Batch& batch);

  Model& model_;
  KvCache& cache_;
  CpuBackend backend_;
  ggml_gallocr_ptr allocator_;

  // The current graph and its inputs.
  Shape shape_;
  bool have_graph_ = false;
  std::vector<uint8_t> graph_memory_;
  ggml_context_ptr ctx_;  // in graph_memory_
  GraphContext graph_;
  LoraInputs lora_inputs_;
  ggml_tensor* logits_ = nullptr;
  int graphs_built_ = 0;
  std::vector<int32_t> scratch_i32_;
  std::vector<int64_t> scratch_i64_;
  std::vector<float> scratch_f32_;
  std::vector<ggml_fp16_t> scratch_mask_;
};

}  // namespace graft
