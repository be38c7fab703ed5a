// The trainable LoRA pairs of a run, with their gradients and AdamW moments,
// all F32 in one CPU buffer. A pair on projection W [n_in, n_out] is
// A [n_in, rank] and B [rank, n_out] in ggml's shapes (PEFT's lora_A is
// rank x n_in, lora_B n_out x rank: the same memory), and adds
// scale * B (A x) to W x.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml.h>

#include "adapters/lora_adapter.h"
#include "model/graph.h"
#include "model/model.h"
#include "util/result.h"

namespace graft {

class LoraParams {
 public:
  struct Pair {
    int layer = 0;
    LoraTarget target = LoraTarget::attn_q;
    int64_t n_in = 0;
    int64_t n_out = 0;
    ggml_tensor* a = nullptr;
    ggml_tensor* b = nullptr;
    ggml_tensor* grad_a = nullptr;
    ggml_tensor* grad_b = nullptr;
    ggml_tensor* m_a = nullptr;  // AdamW first and second moments
    ggml_tensor* v_a = nullptr;
    ggml_tensor* m_b = nullptr;
    ggml_tensor* v_b = nullptr;
  };

  // Pairs on `targets` of each of `layers`, shaped for the model.
  static Result<std::unique_ptr<LoraParams>> create(const ModelConfig& config, int rank,
                                                    const std::vector<int>& layers,
                                                    const std::vector<LoraTarget>& targets);
  ~LoraParams();
  LoraParams(const LoraParams&) = delete;
  LoraParams& operator=(const LoraParams&) = delete;

  int rank() const { return rank_; }
  const std::vector<Pair>& pairs() const { return pairs_; }
  int64_t n_params() const;  // A and B elements
  size_t bytes() const;      // the buffer: weights, gradients and moments

  // A uniform in +-1/sqrt(n_in) (PEFT's and mlx-lm's LoRA init), B zero, from
  // the seed alone; gradients and moments zero.
  void init(uint64_t seed);

  // The per-(layer, target) table a training graph reads.
  std::vector<TrainingInputs::Pair> table(int n_layer) const;

  void zero_grads();
  double grad_norm() const;  // over every gradient element
  void scale_grads(float factor);

  // The weights as an adapter (float copies), with alpha = scale * rank.
  LoraAdapter to_adapter(float scale) const;

  // The whole state (weights, moments) to and from a safetensors file. A
  // file for other shapes is an error that says which tensor differs.
  Status save_state(const std::string& path, bool with_moments) const;
  Status load_state(const std::string& path, bool with_moments);

 private:
  LoraParams() = default;
  std::vector<ggml_tensor*> all_tensors() const;

  int rank_ = 0;
  std::vector<Pair> pairs_;
  ggml_context_ptr ctx_;
  ggml_backend_buffer_ptr buffer_;
};

}  // namespace graft
