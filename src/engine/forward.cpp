#include "engine/forward.h"

#include <algorithm>
#include <cstring>

#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "util/log.h"

namespace graft {

Forward::Forward(Model& model, KvCache& cache, int n_threads)
    : model_(model), cache_(cache), backend_(n_threads) {
  allocator_.reset(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
}

Forward::~Forward() = default;

Status Forward::check(const Batch& batch) const {
  if (batch.rows.empty()) return errorf("invalid_argument", "empty batch");
  const int n_vocab = model_.config().n_vocab;
  const LoraSet& lora = model_.lora();
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    const BatchRow& row = batch.rows[r];
    if (row.token < 0 || row.token >= n_vocab) {
      return errorf("invalid_argument", "row {}: token {} is outside the vocabulary (0..{})", r, row.token,
                    n_vocab - 1);
    }
    const AdapterRoute& route = row.adapters;
    if (route.n < 0 || route.n > AdapterRoute::kMaxStack) {
      return errorf("invalid_argument", "row {}: {} adapters (at most {} stack)", r, route.n,
                    AdapterRoute::kMaxStack);
    }
    for (int i = 0; i < route.n; ++i) {
      if (!lora.mounted(route.slot[i])) {
        return errorf("invalid_argument", "row {}: no adapter is mounted in slot {}", r, route.slot[i]);
      }
    }
  }
  return {};
}

ggml_tensor* Forward::build_graph(const Model& model, const std::vector<AttentionInputs::Layer>& cache,
                                  const Shape& shape, std::vector<uint8_t>& memory, ggml_context_ptr& ctx,
                                  GraphContext& g, LoraInputs& lora,
                                  const std::vector<RecurrentInputs::Layer>* recurrent) {
  ctx.reset();
  const ModelConfig& c = model.config();
  const size_t max_nodes =
      size_t(c.n_layer) *
          (160 + 12 * (shape.windows.size() + shape.local_windows.size()) + 40 * shape.state_groups.size()) +
      256;
  memory.resize(ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false));
  ggml_init_params params{};
  params.mem_size = memory.size();
  params.mem_buffer = memory.data();
  params.no_alloc = true;
  ctx.reset(ggml_init(params));
  if (!ctx) return nullptr;

  g = GraphContext{};
  g.ctx = ctx.get();
  g.graph = ggml_new_graph_custom(g.ctx, max_nodes, false);
  g.n_rows = shape.n_rows;
  auto input = [&](ggml_tensor* t, const char* name) {
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
  };
  g.tokens = input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, shape.n_rows), "tokens");
  g.positions = input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, shape.n_rows), "positions");
  if (shape.n_outputs < shape.n_rows) {
    g.out_rows = input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, shape.n_outputs), "out_rows");
  }
  g.attention.layers = cache;
  g.attention.store_rows = input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I64, shape.n_rows), "store_rows");
  for (const KvCache::Window& w : shape.windows) {
    AttentionInputs::Group group{w.row_begin, w.n_rows, w.cell_begin, w.n_cells, nullptr};
    group.mask = input(ggml_new_tensor_2d(g.ctx, GGML_TYPE_F16, w.n_cells, w.n_rows), "mask");
    if (c.has_sliding_layers() && shape.local_windows.empty()) {
      group.sliding_mask =
          input(ggml_new_tensor_2d(g.ctx, GGML_TYPE_F16, w.n_cells, w.n_rows), "sliding_mask");
    }
    g.attention.groups.push_back(group);
  }
  if (!shape.local_windows.empty()) {
    g.attention.local_store_rows =
        input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I64, shape.n_rows), "local_store_rows");
    for (const KvCache::Window& w : shape.local_windows) {
      AttentionInputs::Group group{w.row_begin, w.n_rows, w.cell_begin, w.n_cells, nullptr};
      group.mask = input(ggml_new_tensor_2d(g.ctx, GGML_TYPE_F16, w.n_cells, w.n_rows), "local_mask");
      g.attention.local_groups.push_back(group);
    }
  }
  if (recurrent) {
    g.recurrent.layers = *recurrent;
    for (const auto& [row_begin, n_seqs, n_tokens] : shape.state_groups) {
      ggml_tensor* slots = input(ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, n_seqs), "state_slots");
      g.recurrent.groups.push_back(RecurrentInputs::Group{row_begin, n_seqs, n_tokens, slots});
    }
  }
  lora = LoraInputs{};
  if (shape.lora_used > 0) {
    lora.n_used = shape.lora_used;
    lora.types = shape.lora_types;
    lora.routes =
        input(ggml_new_tensor_3d(g.ctx, GGML_TYPE_I32, shape.lora_used, shape.n_rows, kLoraRoutePlanes),
              "lora_routes");
    if (g.out_rows) {
      lora.out_routes =
          input(ggml_new_tensor_3d(g.ctx, GGML_TYPE_I32, shape.lora_used, shape.n_outputs, kLoraRoutePlanes),
                "lora_out_routes");
    }
    g.lora = &lora;
  }
  ggml_tensor* logits = model.build_graph(g);
  ggml_set_name(logits, "logits");
  ggml_set_output(logits);
  ggml_build_forward_expand(g.graph, logits);
  return logits;
}

Status Forward::build(const Shape& shape) {
  have_graph_ = false;
  const RecurrentState* state = cache_.recurrent();
  logits_ = build_graph(model_, cache_.layer_tensors(), shape, graph_memory_, ctx_, graph_, lora_inputs_,
                        state ? &state->layer_tensors() : nullptr);
  if (!logits_)
    return errorf("out_of_memory", "cannot allocate the graph of a batch of {} rows", shape.n_rows);
  if (!ggml_gallocr_alloc_graph(allocator_.get(), graph_.graph)) {
    size_t needed = 0;
    ggml_gallocr_reserve_n_size(allocator_.get(), graph_.graph, nullptr, nullptr, &needed);
    // A failed allocator keeps the failed graph's plan: start afresh.
    allocator_.reset(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    ctx_.reset();
    return errorf("out_of_memory",
                  "cannot allocate {} MiB of compute memory for a batch of {} rows ({} with logits)",
                  (needed + (size_t(1) << 20) - 1) >> 20, shape.n_rows, shape.n_outputs);
  }
  shape_ = shape;
  have_graph_ = true;
  ++graphs_built_;
  GRAFT_LOG_DEBUG(
      "graph built: {} rows, {} outputs, {} attention windows, {} adapters per row, {} q4_rows inputs",
      shape.n_rows, shape.n_outputs, shape.windows.size(), shape.lora_used, graph_.quantized.size());
  return {};
}

Forward::Measure Forward::measure(const Model& model, ggml_type kv_type, int n_cells, int n_rows,
                                  int n_outputs, int n_threads, std::vector<KvCache::Window> windows) {
  const ModelConfig& c = model.config();
  // The cache's tensors without memory: a zero-size buffer marks them as
  // placed, so ggml's allocator leaves them out as it does the real ones.
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (4 * size_t(c.n_layer) + 1);
  params.no_alloc = true;
  ggml_context_ptr cache_ctx(ggml_init(params));
  ggml_backend_buffer_ptr none(ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 0));
  Measure m;
  if (!cache_ctx || !none) return m;
  std::vector<AttentionInputs::Layer> cache;
  for (int il = 0; il < c.n_layer; ++il) {
    AttentionInputs::Layer layer;
    if (c.stores_kv(il)) {  // as KvCache lays them out
      layer.k = ggml_new_tensor_2d(cache_ctx.get(), kv_type, c.n_embd_kv_of(il), n_cells);
      layer.v = ggml_new_tensor_2d(cache_ctx.get(), kv_type, c.n_embd_kv_of(il), n_cells);
      layer.k->buffer = layer.v->buffer = none.get();
    }
    cache.push_back(layer);
  }
  // Hybrid models: one recurrent state slot, also without memory.
  std::vector<RecurrentInputs::Layer> recurrent(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer && c.has_recurrent_layers(); ++il) {
    if (!c.is_recurrent(il)) continue;
    RecurrentInputs::Layer& l = recurrent[size_t(il)];
    l.conv = ggml_new_tensor_2d(cache_ctx.get(), GGML_TYPE_F32, c.ssm.conv_state_size(), 1);
    l.delta = ggml_new_tensor_2d(cache_ctx.get(), GGML_TYPE_F32, c.ssm.delta_state_size(), 1);
    l.conv->buffer = l.delta->buffer = none.get();
  }
  Shape shape;
  shape.n_rows = std::max(1, n_rows);
  shape.n_outputs = std::clamp(n_outputs, 1, shape.n_rows);
  shape.windows =
      windows.empty() ? std::vector<KvCache::Window>{{0, shape.n_rows, 0, n_cells}} : std::move(windows);
  if (c.has_recurrent_layers()) shape.state_groups = {{0, 1, shape.n_rows}};
  std::vector<uint8_t> memory;
  ggml_context_ptr ctx;
  GraphContext g;
  LoraInputs lora;
  if (!build_graph(model, cache, shape, memory, ctx, g, lora,
                   c.has_recurrent_layers() ? &recurrent : nullptr)) {
    return m;
  }
  ggml_gallocr_ptr allocator(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
  ggml_gallocr_reserve_n_size(allocator.get(), g.graph, nullptr, nullptr, &m.compute_bytes);
  m.work_bytes = ggml_graph_plan(g.graph, std::max(1, n_threads), nullptr).work_size;
  for (int i = 0; i < ggml_graph_n_nodes(g.graph); ++i) {
    switch (ggml_graph_node(g.graph, i)->op) {
      case GGML_OP_NONE:
      case GGML_OP_RESHAPE:
      case GGML_OP_VIEW:
      case GGML_OP_PERMUTE:
      case GGML_OP_TRANSPOSE:
        break;  // ggml skips these: they only describe memory
      default:
        ++m.n_nodes;
    }
  }
  return m;
}

Status Forward::reserve(int n_rows, int n_outputs) {
  if (n_rows <= 0) return {};
  Shape shape;
  shape.n_rows = n_rows;
  shape.n_outputs = std::clamp(n_outputs, 1, n_rows);
  shape.windows = {KvCache::Window{0, n_rows, 0, cache_.cells_total()}};
  if (cache_.local_cells_total() > 0) {
    shape.local_windows = {KvCache::Window{0, n_rows, 0, cache_.local_cells_total()}};
  }
  if (cache_.recurrent()) shape.state_groups = {{0, 1, n_rows}};
  GRAFT_TRY_STATUS(build(shape));
  --graphs_built_;  // not a batch's graph
  // Fault the compute buffer in now, not in the first batch: on VMs the
  // first write to fresh memory is slow, and a server's first request would
  // pay for it. The nodes' tensors, which the allocator packs into the
  // buffer, cover all of it that batches use.
  for (int i = 0; i < ggml_graph_n_nodes(graph_.graph); ++i) {
    ggml_tensor* t = ggml_graph_node(graph_.graph, i);
    if (t->data && !t->view_src) std::memset(t->data, 0, ggml_nbytes(t));
  }
  return {};
}

void Forward::set_inputs(const Batch& batch, const KvCache::Placement& placement) {
  const GraphContext& g = graph_;
  const int n = int(batch.size());
  auto* tokens = static_cast<int32_t*>(g.tokens->data);
  auto* positions = static_cast<int32_t*>(g.positions->data);
  auto* store = static_cast<int64_t*>(g.attention.store_rows->data);
  for (int r = 0; r < n; ++r) {
    tokens[r] = batch.rows[size_t(r)].token;
    positions[r] = batch.rows[size_t(r)].pos;
    store[r] = placement.cells[size_t(r)];
  }
  if (g.attention.local_store_rows) {
    std::copy(placement.local_cells.begin(), placement.local_cells.end(),
              static_cast<int64_t*>(g.attention.local_store_rows->data));
  }
  if (g.out_rows) {
    auto* out = static_cast<int32_t*>(g.out_rows->data);
    int k = 0;
    for (int r = 0; r < n; ++r) {
      if (batch.rows[size_t(r)].logits) out[k++] = r;
    }
    if (k == 0) out[k++] = n - 1;  // nothing asked for: compute one row, return none
  }
  for (size_t i = 0; i < placement.windows.size(); ++i) {
    const AttentionInputs::Group& group = g.attention.groups[i];
    // (Either is unallocated when no layer reads it.)
    if (group.mask->data) {
      cache_.fill_mask(batch, placement.windows[i], static_cast<ggml_fp16_t*>(group.mask->data));
    }
    if (group.sliding_mask && group.sliding_mask->data) {
      cache_.fill_sliding_mask(batch, placement.windows[i], model_.config().sliding_window,
                               static_cast<ggml_fp16_t*>(group.sliding_mask->data));
    }
  }
  for (size_t i = 0; i < placement.local_windows.size(); ++i) {
    const AttentionInputs::Group& group = g.attention.local_groups[i];
    if (group.mask->data) {
      cache_.fill_local_mask(batch, placement.local_windows[i], static_cast<ggml_fp16_t*>(group.mask->data));
    }
  }
  for (size_t i = 0; i < placement.state_groups.size(); ++i) {
    const std::vector<SeqId>& seqs = placement.state_groups[i].seqs;
    std::copy(seqs.begin(), seqs.end(), static_cast<int32_t*>(g.recurrent.groups[i].slots->data));
  }
  if (g.lora) set_lora_inputs(batch);
}

void Forward::set_lora_inputs(const Batch& batch) {
  const LoraSet& lora = model_.lora();
  const LoraInputs& in = lora_inputs_;
  const int n = int(batch.size());
  const int n_used = in.n_used;
  auto* routes = static_cast<int32_t*>(in.routes->data);
  const size_t plane = size_t(n_used) * size_t(n);
  std::fill_n(routes, plane * kLoraRoutePlanes, 0);  // padding: scale 0
  for (int r = 0; r < n; ++r) {
    const AdapterRoute& route = batch.rows[size_t(r)].adapters;
    for (int u = 0; u < route.n && u < n_used; ++u) {
      const size_t e = size_t(r * n_used + u);
      const LoraSet::Place place = lora.place(route.slot[u]);
      routes[e] = int32_t(place.type);
      routes[(1 + size_t(place.type)) * plane + e] = place.index;
      const float scale = route.scale[u] * lora.scale(route.slot[u]);
      std::memcpy(&routes[(kLoraRoutePlanes - 1) * plane + e], &scale, sizeof(float));
    }
  }
  // Unallocated when no layer reads them: a model that selects its output
  // rows only after the last layer adds no delta to output rows alone.
  if (in.out_routes && in.out_routes->data) {
    const auto* out = static_cast<const int32_t*>(graph_.out_rows->data);
    auto* out_routes = static_cast<int32_t*>(in.out_routes->data);
    const size_t out_plane = size_t(n_used) * size_t(shape_.n_outputs);
    for (int k = 0; k < shape_.n_outputs; ++k) {
      for (int p = 0; p < kLoraRoutePlanes; ++p) {
        std::copy_n(routes + size_t(p) * plane + size_t(out[k] * n_used), n_used,
                    out_routes + size_t(p) * out_plane + size_t(k * n_used));
      }
    }
  }
}

void Forward::unplace(const Batch& batch) {
  // Each sequence's rows continue it: dropping its positions from its first
  // row on restores it.
  std::vector<std::pair<SeqId, int32_t>> firsts;
  for (const BatchRow& row : batch.rows) {
    auto it = std::find_if(firsts.begin(), firsts.end(), [&](const auto& f) { return f.first == row.seq; });
    if (it == firsts.end()) firsts.emplace_back(row.seq, row.pos);
  }
  for (const auto& [seq, pos] : firsts) cache_.seq_truncate(seq, pos);
}

Result<LogitsView> Forward::run(const Batch& batch) {
  GRAFT_TRY_STATUS(check(batch));
  GRAFT_TRY(KvCache::Placement placement, cache_.place(batch));

  Shape shape;
  shape.n_rows = int(batch.size());
  const int n_logits = batch.n_logits();
  shape.n_outputs = std::max(1, n_logits);
  shape.windows = placement.windows;
  shape.local_windows = placement.local_windows;
  for (const KvCache::StateGroup& sg : placement.state_groups) {
    shape.state_groups.push_back({sg.row_begin, sg.n_seqs, sg.n_tokens});
  }
  const LoraSet& lora = model_.lora();
  for (const BatchRow& row : batch.rows) {
    shape.lora_used = std::max(shape.lora_used, row.adapters.n);
    for (int i = 0; i < row.adapters.n; ++i)
      shape.lora_types[size_t(lora.place(row.adapters.slot[i]).type)] = true;
  }
  shape.lora_version = shape.lora_used > 0 ? lora.version() : 0;
  if (!have_graph_ || !(shape == shape_)) {
    if (Status built = build(shape); !built) {
      unplace(batch);
      return built.error();
    }
  }

  set_inputs(batch, placement);
  const ggml_status status = ggml_backend_graph_compute(backend_.get(), graph_.graph);
  if (status != GGML_STATUS_SUCCESS) {
    unplace(batch);
    return errorf("compute_failed", "the forward pass failed ({})", ggml_status_to_string(status));
  }
  cache_.trim_windows(batch);
  LogitsView view;
  view.data = static_cast<const float*>(logits_->data);
  view.n_vocab = model_.config().n_vocab;
  view.n_rows = n_logits;
  return view;
}

}  // namespace graft
