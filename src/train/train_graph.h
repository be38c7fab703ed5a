// TrainGraph: the ggml graphs of one training step on the CPU backend.
//
// The forward pass is the model's own graph code (Model::build_graph, with
// GraphContext::training set), so training computes what serving computes.
// The output head is split off: only the rows that carry a target go through
// the final norm and the output projection, in chunks of rows whose logits
// are freed as soon as their loss and gradient are known (graft's
// cross_entropy_rows op, no one-hot labels), and its gradient w.r.t. the
// last hidden states is written by hand (frozen_dx, the norm's backward) into
// a buffer. ggml's backward (ggml_build_backward_expand) then
// differentiates the layers through a stand-in loss, sum(hidden * that
// gradient), which has the same gradients. So one graph runs forward, head,
// then backward, and the LoRA gradients add up in LoraParams' accumulators.
//
// With gradient checkpointing, a forward graph keeps only each layer's input
// (and runs the head); then one graph per trained layer, from the top down,
// recomputes that layer from its input and backpropagates into the layer
// below's output gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "model/cpu_backend.h"
#include "model/model.h"
#include "train/lora_params.h"
#include "train/micro_batch.h"
#include "train/train_ops.h"
#include "util/result.h"

namespace graft {

struct TrainGraphOptions {
  float lora_scale = 1.0f;
  float dropout = 0.0f;
  bool grad_checkpoint = false;
  int n_threads = 1;
  // dx through frozen quantized weights as an int8 product over transposed
  // Q8_0 copies (FrozenTransposes); false: frozen_dx's F32 product.
  bool int8_dx = true;
};

// Per-row losses of a micro-batch (in loss_rows order).
struct BatchLosses {
  std::vector<double> loss;
};

// The AdamW hyperparameters of one optimizer step (t counts from 1).
struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t t = 1;
};

class TrainGraph {
 public:
  TrainGraph(const Model& model, LoraParams& params, const TrainGraphOptions& options);
  ~TrainGraph();
  TrainGraph(const TrainGraph&) = delete;
  TrainGraph& operator=(const TrainGraph&) = delete;

  // Forward and backward: adds the gradients of sum_r weights[r] * loss_r to
  // the parameters' accumulators. dropout_key picks this pass's dropout masks.
  Result<BatchLosses> accumulate(const MicroBatch& batch, uint64_t dropout_key);
  // The losses alone (no dropout, no gradients).
  Result<BatchLosses> evaluate(const MicroBatch& batch);
  // One AdamW update of every parameter from its accumulated gradient.
  Status adamw(const AdamWStep& step);

  // Graphs built so far (a micro-batch of the last one's shape reuses them).
  int graphs_built() const { return graphs_built_; }

 private:
  struct Shape {
    int n_seqs = 0;
    int seq_len = 0;
    int n_loss = 0;
    bool train = false;
    bool operator==(const Shape&) const = default;
  };
  struct Graph;  // one ggml graph and its context
  struct Built;  // every graph of one shape and their shared buffers

  Status build(const Shape& shape);
  void build_forward(Built& b, bool train);
  void build_segment(Built& b, int layer);
  ggml_tensor* build_head(Built& b, Graph& g, ggml_tensor* hidden, bool train);
  void set_inputs(Built& b, const MicroBatch& batch);
  Status compute(Graph& g);
  const FrozenTransposes* transposes() const { return options_.int8_dx ? &transposes_ : nullptr; }

  const Model& model_;
  LoraParams& params_;
  TrainGraphOptions options_;
  std::vector<TrainingInputs::Pair> lora_table_;
  int first_trained_layer_ = 0;
  uint64_t dropout_step_key_ = 0;
  std::vector<DropoutKey> dropout_keys_;  // per (layer, target)

  FrozenTransposes transposes_;  // made by the first training build
  bool transposes_built_ = false;
  CpuBackend backend_;
  ggml_gallocr_ptr allocator_{ggml_gallocr_new(ggml_backend_cpu_buffer_type())};
  std::unique_ptr<Built> built_;
  Shape shape_;
  int graphs_built_ = 0;

  std::unique_ptr<Graph> adamw_graph_;
  ggml_tensor* adamw_params_ = nullptr;
  ggml_gallocr_ptr adamw_allocator_{ggml_gallocr_new(ggml_backend_cpu_buffer_type())};
};

}  // namespace graft
