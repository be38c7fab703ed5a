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

  int n_threads() const { return n_threads_; }
  // Graphs built so far (a batch of the same shape as the last reuses its graph).
  int graphs_built() const { return graphs_built_; }

 private:
  struct Shape {
    int n_rows = 0;
    int n_outputs = 0;
    std::vector<KvCache::Window> windows;
    int lora_used = 0;
    std::array<bool, kLoraTypeCount> lora_types{};
    uint64_t lora_version = 0;
    bool operator==(const Shape&) const = default;
  };
  Status check(const Batch& batch) const;
  Status build(const Shape& shape);
  void set_inputs(const Batch& batch, const KvCache::Placement& placement);
  void set_lora_inputs(const Batch& batch);
  // Takes a batch's rows back out of the cache (after a failed pass).
  void unplace(const Batch& batch);

  Model& model_;
  KvCache& cache_;
  int n_threads_;
  struct ThreadpoolFree {
    void operator()(ggml_threadpool* pool) const { ggml_threadpool_free(pool); }
  };
  // Declared in the order they depend on each other (destroyed in reverse).
  std::unique_ptr<ggml_threadpool, ThreadpoolFree> threadpool_;
  ggml_backend_ptr backend_;  // runs on threadpool_
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
