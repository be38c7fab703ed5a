#include "train/train_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "model/layers.h"
#include "util/log.h"

namespace graft {

namespace {

// Logits kept at once by the head: chunks of rows of about this many floats.
constexpr int64_t kHeadChunkFloats = int64_t(8) << 20;

}  // namespace

struct TrainGraph::Graph {
  std::vector<uint8_t> memory;
  ggml_context_ptr owner;
  ggml_context* ctx = nullptr;  // owner's
  ggml_cgraph* graph = nullptr;

  Graph(size_t max_nodes, bool grads) {
    memory.resize(ggml_tensor_overhead() * max_nodes * 2 + ggml_graph_overhead_custom(max_nodes, grads));
    ggml_init_params params{};
    params.mem_size = memory.size();
    params.mem_buffer = memory.data();
    params.no_alloc = true;
    owner.reset(ggml_init(params));
    ctx = owner.get();
    graph = ggml_new_graph_custom(ctx, max_nodes, grads);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
};

// The graphs of one shape share their inputs and the buffers that carry
// values from one graph to the next, all in memory of their own (not the
// graph allocator's, which each graph reuses).
struct TrainGraph::Built {
  ggml_context_ptr ctx;
  ggml_backend_buffer_ptr buffer;
  ggml_tensor* tokens = nullptr;        // I32 [rows]
  ggml_tensor* positions = nullptr;     // I32 [rows]
  ggml_tensor* mask = nullptr;          // F32 [seq_len, seq_len]
  ggml_tensor* sliding_mask = nullptr;  // F32 [seq_len, seq_len]: sliding-window models only
  ggml_tensor* loss_rows = nullptr;     // I32 [n_loss]
  ggml_tensor* loss_rows64 = nullptr;   // I64 [n_loss]
  ggml_tensor* labels = nullptr;        // I32 [n_loss]
  ggml_tensor* weights = nullptr;       // F32 [n_loss]
  ggml_tensor* loss = nullptr;          // F64 [n_loss]: the head's output
  ggml_tensor* one = nullptr;           // F32 [1] = 1: the stand-in loss's own gradient
  ggml_tensor* grad[2] = {};            // F32 [n_embd, rows]: gradients of hidden states
  std::vector<ggml_tensor*> inputs;     // F32 [n_embd, rows]: each trained layer's input (checkpointing)
  TrainingInputs training;
  std::unique_ptr<Graph> forward;                // forward and head (and, unless checkpointing, backward)
  std::vector<std::unique_ptr<Graph>> segments;  // checkpointing: one per trained layer, the lowest first
};

TrainGraph::TrainGraph(const Model& model, LoraParams& params, const TrainGraphOptions& options)
    : model_(model), params_(params), options_(options), backend_(options.n_threads) {
  const int n_layer = model.config().n_layer;
  lora_table_ = params.table(n_layer);
  first_trained_layer_ = n_layer;
  for (const LoraParams::Pair& p : params.pairs()) {
    first_trained_layer_ = std::min(first_trained_layer_, p.layer);
    ggml_set_param(p.a);
    ggml_set_param(p.b);
  }
  dropout_keys_.resize(size_t(n_layer * kLoraTargetCount));
  for (size_t i = 0; i < dropout_keys_.size(); ++i)
    dropout_keys_[i] = {&dropout_step_key_, i, options.dropout};
}

TrainGraph::~TrainGraph() = default;

Status TrainGraph::build(const Shape& shape) {
  built_.reset();
  auto b = std::make_unique<Built>();
  const ModelConfig& c = model_.config();
  const int64_t rows = int64_t(shape.n_seqs) * shape.seq_len;
  const bool checkpoint = shape.train && options_.grad_checkpoint;
  const int n_inputs = checkpoint ? c.n_layer - first_trained_layer_ : 0;

  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * size_t(17 + n_inputs);
  params.no_alloc = true;
  b->ctx.reset(ggml_init(params));
  ggml_context* ctx = b->ctx.get();
  b->tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, rows);
  b->positions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, rows);
  b->mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, shape.seq_len, shape.seq_len);
  if (c.has_sliding_layers())
    b->sliding_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, shape.seq_len, shape.seq_len);
  b->loss_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, shape.n_loss);
  b->loss_rows64 = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, shape.n_loss);
  b->labels = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, shape.n_loss);
  b->weights = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, shape.n_loss);
  b->loss = ggml_new_tensor_1d(ctx, GGML_TYPE_F64, shape.n_loss);
  b->one = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
  if (shape.train) {
    for (ggml_tensor*& g : b->grad) g = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.n_embd, rows);
  }
  for (int i = 0; i < n_inputs; ++i)
    b->inputs.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.n_embd, rows));
  b->buffer.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type()));
  if (!b->buffer) return errorf("out_of_memory", "cannot allocate the training buffers for {} rows", rows);
  ggml_backend_buffer_clear(b->buffer.get(), 0);

  TrainingInputs& t = b->training;
  t.seq_len = shape.seq_len;
  t.n_seqs = shape.n_seqs;
  t.causal_mask = b->mask;
  t.sliding_mask = b->sliding_mask;
  t.lora_scale = options_.lora_scale;
  t.lora = lora_table_;
  if (shape.train && options_.dropout > 0.0f) {
    t.dropout = [this](ggml_context* ctx, ggml_tensor* x, int layer, LoraTarget target) {
      const DropoutKey* key = &dropout_keys_[size_t(layer * kLoraTargetCount + int(target))];
      return ggml_mul(ctx, x, dropout_mask(ctx, x->ne[0], x->ne[1], key));
    };
  }

  if (shape.train && options_.int8_dx && !transposes_built_) {
    // The frozen weights whose dx the backward computes: the head's and
    // every trained layer's (the lowest one's input needs none, so neither
    // do its q, k and v).
    const ModelWeights& w = model_.weights();
    std::vector<const ggml_tensor*> weights{w.output};
    for (int l = first_trained_layer_; l < c.n_layer; ++l) {
      const LayerWeights& lw = w.layers[size_t(l)];
      if (l > first_trained_layer_) weights.insert(weights.end(), {lw.wq, lw.wk, lw.wv});
      weights.insert(weights.end(), {lw.wo, lw.ffn_gate, lw.ffn_up, lw.ffn_down});
    }
    transposes_.build(weights, options_.n_threads);
    transposes_built_ = true;
    if (transposes_.count() > 0) {
      GRAFT_LOG_DEBUG("train: {} frozen weights transposed to Q8_0 for the backward ({} MiB)",
                      transposes_.count(), transposes_.bytes() >> 20);
    }
  }

  built_ = std::move(b);
  shape_ = shape;
  build_forward(*built_, shape.train);
  if (checkpoint) {
    for (int l = first_trained_layer_; l < c.n_layer; ++l) build_segment(*built_, l);
  }
  // The forward's products, now that ggml has the backward of its own.
  use_q4_rows(built_->forward->ctx, built_->forward->graph);
  for (const std::unique_ptr<Graph>& g : built_->segments) use_q4_rows(g->ctx, g->graph);
  ++graphs_built_;
  return {};
}

namespace {

size_t graph_size(const ModelConfig& c, int n_layers, int64_t n_chunks) {
  return size_t(n_layers) * 600 + size_t(n_chunks) * 24 + 512 + size_t(c.n_layer) * 8;
}

// Runs ggml's backward for the stand-in loss, with the LoRA gradients going
// into their accumulators, then moves products with frozen weights to frozen_dx and the other
// F32 out_prods to out_prod_f32.
void add_backward(ggml_context* ctx, ggml_cgraph* graph, ggml_tensor* loss, ggml_tensor* one,
                  const std::unordered_map<const ggml_tensor*, ggml_tensor*>& accumulators,
                  const FrozenTransposes* transposes) {
  std::vector<ggml_tensor*> grad_accs(size_t(ggml_graph_n_nodes(graph)), nullptr);
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if (node == loss) {
      grad_accs[size_t(i)] = one;
    } else if (auto it = accumulators.find(node); it != accumulators.end()) {
      grad_accs[size_t(i)] = it->second;
    }
  }
  ggml_build_backward_expand(ctx, graph, grad_accs.data());
  use_frozen_dx(ctx, graph, transposes);
  use_out_prod_f32(ctx, graph);
}

std::unordered_map<const ggml_tensor*, ggml_tensor*> accumulators_of(const LoraParams& params) {
  std::unordered_map<const ggml_tensor*, ggml_tensor*> map;
  for (const LoraParams::Pair& p : params.pairs()) {
    map[p.a] = p.grad_a;
    map[p.b] = p.grad_b;
  }
  return map;
}

}  // namespace

ggml_tensor* TrainGraph::build_head(Built& b, Graph& g, ggml_tensor* hidden, bool train) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  ggml_context* ctx = g.ctx;
  const int64_t n_loss = b.loss_rows->ne[0];
  const int64_t chunk = std::max<int64_t>(1, kHeadChunkFloats / c.n_vocab);
  ggml_tensor* selected = ggml_get_rows(ctx, hidden, b.loss_rows);  // [n_embd, n_loss]
  // The head writes the gradient of the top hidden states here (rows
  // without a target stay zero).
  ggml_tensor* grad_out = train ? b.grad[c.n_layer % 2] : nullptr;
  for (int64_t j0 = 0; j0 < n_loss; j0 += chunk) {
    const int64_t n = std::min(chunk, n_loss - j0);
    ggml_tensor* x = ggml_view_2d(ctx, selected, c.n_embd, n, selected->nb[1], size_t(j0) * selected->nb[1]);
    GraphContext head;
    head.ctx = ctx;
    head.graph = g.graph;
    head.n_rows = int(n);
    head.training = &b.training;  // plain ggml products: ggml_build_backward_expand checks every op here
    ggml_tensor* logits = output_logits(head, model_, x);
    auto part = [&](ggml_tensor* t) { return ggml_view_1d(ctx, t, n, size_t(j0) * t->nb[0]); };
    ggml_tensor* dlogits = cross_entropy_rows(ctx, logits, part(b.labels), part(b.weights), part(b.loss));
    if (!train) {
      ggml_build_forward_expand(g.graph, dlogits);
      continue;
    }
    // logits = W_out (rms_norm(x) * norm_weight): back through each step.
    ggml_tensor* dnormed = frozen_dx(ctx, w.output, ggml_transpose(ctx, dlogits), transposes());
    ggml_tensor* dx = ggml_rms_norm_back(ctx, ggml_mul(ctx, dnormed, w.output_norm), x, c.rms_eps);
    ggml_build_forward_expand(g.graph, ggml_set_rows(ctx, grad_out, dx, part(b.loss_rows64)));
  }
  return grad_out;
}

void TrainGraph::build_forward(Built& b, bool train) {
  const ModelConfig& c = model_.config();
  const bool checkpoint = train && options_.grad_checkpoint;
  const int64_t chunks = 1 + b.loss_rows->ne[0] * c.n_vocab / kHeadChunkFloats;
  const int n_graph_layers = train && !checkpoint ? c.n_layer * 2 : c.n_layer;
  b.forward = std::make_unique<Graph>(graph_size(c, n_graph_layers, chunks), train && !checkpoint);
  Graph& g = *b.forward;

  GraphContext gc;
  gc.ctx = g.ctx;
  gc.graph = g.graph;
  gc.n_rows = int(b.tokens->ne[0]);
  gc.tokens = b.tokens;
  gc.positions = b.positions;
  gc.training = &b.training;
  gc.hidden_out = true;
  ggml_tensor* x = nullptr;
  if (!checkpoint) {
    x = model_.build_graph(gc);
  } else {
    // Embeddings and the untrained layers below, then each trained layer,
    // keeping its input.
    gc.layer_begin = 0;
    gc.layer_end = first_trained_layer_;
    x = model_.build_graph(gc);
    for (int l = first_trained_layer_; l < c.n_layer; ++l) {
      ggml_build_forward_expand(g.graph, ggml_cpy(g.ctx, x, b.inputs[size_t(l - first_trained_layer_)]));
      gc.hidden_in = x;
      gc.layer_begin = l;
      gc.layer_end = l + 1;
      x = model_.build_graph(gc);
    }
  }
  ggml_build_forward_expand(g.graph, x);
  ggml_tensor* grad_out = build_head(b, g, x, train);
  if (!train || checkpoint) return;

  ggml_tensor* loss = ggml_sum(g.ctx, ggml_mul(g.ctx, x, grad_out));
  ggml_set_loss(loss);
  ggml_build_forward_expand(g.graph, loss);
  add_backward(g.ctx, g.graph, loss, b.one, accumulators_of(params_), transposes());
}

void TrainGraph::build_segment(Built& b, int layer) {
  const ModelConfig& c = model_.config();
  auto graph = std::make_unique<Graph>(graph_size(c, 2, 0), true);
  Graph& g = *graph;
  ggml_tensor* input = b.inputs[size_t(layer - first_trained_layer_)];
  // The lowest trained layer needs no gradient for its input.
  const bool input_grad = layer > first_trained_layer_;
  if (input_grad) ggml_set_param(input);

  GraphContext gc;
  gc.ctx = g.ctx;
  gc.graph = g.graph;
  gc.n_rows = int(b.tokens->ne[0]);
  gc.positions = b.positions;
  gc.training = &b.training;
  gc.hidden_in = input;
  gc.layer_begin = layer;
  gc.layer_end = layer + 1;
  gc.hidden_out = true;
  ggml_tensor* x = model_.build_graph(gc);
  ggml_tensor* loss = ggml_sum(g.ctx, ggml_mul(g.ctx, x, b.grad[(layer + 1) % 2]));
  ggml_set_loss(loss);
  ggml_build_forward_expand(g.graph, loss);
  add_backward(g.ctx, g.graph, loss, b.one, accumulators_of(params_), transposes());
  if (input_grad) {
    ggml_tensor* dx = ggml_graph_get_grad(g.graph, input);
    ggml_build_forward_expand(g.graph, ggml_cpy(g.ctx, dx, b.grad[layer % 2]));
  }
  b.segments.push_back(std::move(graph));
}

void TrainGraph::set_inputs(Built& b, const MicroBatch& batch) {
  const int64_t rows = batch.n_rows();
  std::memcpy(b.tokens->data, batch.tokens.data(), size_t(rows) * sizeof(int32_t));
  auto* pos = static_cast<int32_t*>(b.positions->data);
  for (int64_t r = 0; r < rows; ++r) pos[r] = int32_t(r % batch.seq_len);
  auto* mask = static_cast<float*>(b.mask->data);
  for (int q = 0; q < batch.seq_len; ++q) {
    for (int k = 0; k < batch.seq_len; ++k) mask[q * batch.seq_len + k] = k <= q ? 0.0f : -INFINITY;
  }
  if (b.sliding_mask) {
    const int window = model_.config().sliding_window;
    auto* sliding = static_cast<float*>(b.sliding_mask->data);
    for (int q = 0; q < batch.seq_len; ++q) {
      for (int k = 0; k < batch.seq_len; ++k)
        sliding[q * batch.seq_len + k] = k <= q && q - k < window ? 0.0f : -INFINITY;
    }
  }
  const size_t n_loss = batch.loss_rows.size();
  std::memcpy(b.loss_rows->data, batch.loss_rows.data(), n_loss * sizeof(int32_t));
  auto* rows64 = static_cast<int64_t*>(b.loss_rows64->data);
  for (size_t i = 0; i < n_loss; ++i) rows64[i] = batch.loss_rows[i];
  std::memcpy(b.labels->data, batch.labels.data(), n_loss * sizeof(int32_t));
  std::memcpy(b.weights->data, batch.weights.data(), n_loss * sizeof(float));
  *static_cast<float*>(b.one->data) = 1.0f;
  for (ggml_tensor* g : b.grad) {
    if (g) std::memset(g->data, 0, ggml_nbytes(g));
  }
}

Status TrainGraph::compute(Graph& g) {
  if (!ggml_gallocr_alloc_graph(allocator_.get(), g.graph)) {
    return errorf("out_of_memory", "cannot allocate the training graph's memory");
  }
  const ggml_status status = ggml_backend_graph_compute(backend_.get(), g.graph);
  if (status != GGML_STATUS_SUCCESS) {
    return errorf("compute_failed", "the training step failed ({})", ggml_status_to_string(status));
  }
  return {};
}

Result<BatchLosses> TrainGraph::accumulate(const MicroBatch& batch, uint64_t dropout_key) {
  BatchLosses out;
  if (batch.loss_rows.empty()) return out;
  const Shape shape{batch.n_seqs, batch.seq_len, int(batch.loss_rows.size()), true};
  if (!built_ || !(shape == shape_)) GRAFT_TRY_STATUS(build(shape));
  dropout_step_key_ = dropout_key;
  set_inputs(*built_, batch);
  GRAFT_TRY_STATUS(compute(*built_->forward));
  // Checkpointing: the trained layers from the top down.
  for (auto it = built_->segments.rbegin(); it != built_->segments.rend(); ++it)
    GRAFT_TRY_STATUS(compute(**it));
  const auto* loss = static_cast<const double*>(built_->loss->data);
  out.loss.assign(loss, loss + batch.loss_rows.size());
  return out;
}

Result<BatchLosses> TrainGraph::evaluate(const MicroBatch& batch) {
  BatchLosses out;
  if (batch.loss_rows.empty()) return out;
  const Shape shape{batch.n_seqs, batch.seq_len, int(batch.loss_rows.size()), false};
  if (!built_ || !(shape == shape_)) GRAFT_TRY_STATUS(build(shape));
  set_inputs(*built_, batch);
  GRAFT_TRY_STATUS(compute(*built_->forward));
  const auto* loss = static_cast<const double*>(built_->loss->data);
  out.loss.assign(loss, loss + batch.loss_rows.size());
  return out;
}

Status TrainGraph::adamw(const AdamWStep& step) {
  if (!adamw_graph_) {
    const size_t n =
        params_.pairs().size() * 2 * 5 + 16;  // per update: the node, the weight, its gradient and moments
    adamw_graph_ = std::make_unique<Graph>(n, false);
    Graph& g = *adamw_graph_;
    adamw_params_ = ggml_new_tensor_1d(g.ctx, GGML_TYPE_F32, 7);
    ggml_set_input(adamw_params_);
    for (const LoraParams::Pair& p : params_.pairs()) {
      ggml_build_forward_expand(g.graph,
                                ggml_opt_step_adamw(g.ctx, p.a, p.grad_a, p.m_a, p.v_a, adamw_params_));
      ggml_build_forward_expand(g.graph,
                                ggml_opt_step_adamw(g.ctx, p.b, p.grad_b, p.m_b, p.v_b, adamw_params_));
    }
    if (!ggml_gallocr_alloc_graph(adamw_allocator_.get(), g.graph)) {
      return errorf("out_of_memory", "cannot allocate the optimizer's graph");
    }
  }
  auto* v = static_cast<float*>(adamw_params_->data);
  v[0] = step.lr;
  v[1] = step.beta1;
  v[2] = step.beta2;
  v[3] = step.eps;
  v[4] = step.weight_decay;
  v[5] = float(1.0 / (1.0 - std::pow(double(step.beta1), double(step.t))));
  v[6] = float(1.0 / (1.0 - std::pow(double(step.beta2), double(step.t))));
  const ggml_status status = ggml_backend_graph_compute(backend_.get(), adamw_graph_->graph);
  if (status != GGML_STATUS_SUCCESS) {
    return errorf("compute_failed", "the optimizer step failed ({})", ggml_status_to_string(status));
  }
  return {};
}

}  // namespace graft
