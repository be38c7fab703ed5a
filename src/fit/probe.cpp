#include "fit/probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "fit/system.h"
#include "io/reserved_memory.h"
#include "model/cpu_backend.h"
#include "model/cpu_repack.h"
#include "model/kv_attention.h"
#include "model/q4_rows.h"
#include "model/q4k_rows.h"
#include "model/q6k_rows.h"
#include "model/q8_rows.h"
#include "util/log.h"

namespace graft::fit {

using json = nlohmann::json;

namespace {

constexpr ggml_type kProbedTypes[] = {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                      GGML_TYPE_Q6_K};

// Times graphs on a CPU backend with its own thread pool, as engine/forward.cpp runs them.
class Runner {
 public:
  explicit Runner(int threads) : backend_(threads) {}

  // The median of `reps` timed runs, after one untimed run. Not the best:
  // on a machine shared with other work, graft's own steps are slowed now
  // and then too, and a prediction is of what graft does here (graft bench
  // reports the mean of its runs).
  double seconds(ggml_cgraph* graph, int reps) { return seconds(std::vector<ggml_cgraph*>{graph}, reps)[0]; }

  // The same for several graphs, their runs taken in turn, so that a spell
  // of load elsewhere slows them alike.
  std::vector<double> seconds(const std::vector<ggml_cgraph*>& graphs, int reps) {
    std::vector<std::vector<double>> times(graphs.size());
    for (ggml_cgraph* graph : graphs) ggml_backend_graph_compute(backend_.get(), graph);
    for (int i = 0; i < reps; ++i) {
      for (size_t g = 0; g < graphs.size(); ++g) {
        const auto t0 = std::chrono::steady_clock::now();
        ggml_backend_graph_compute(backend_.get(), graphs[g]);
        times[g].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    std::vector<double> median;
    for (std::vector<double>& t : times) {
      std::sort(t.begin(), t.end());
      const size_t n = t.size();
      median.push_back(std::max(n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, 1e-9));
    }
    return median;
  }

 private:
  CpuBackend backend_;
};

ggml_context_ptr new_context(size_t n_tensors, size_t graph_nodes = 0) {
  ggml_init_params params{};
  params.mem_size =
      ggml_tensor_overhead() * n_tensors + (graph_nodes ? ggml_graph_overhead_custom(graph_nodes, false) : 0);
  params.no_alloc = true;
  return ggml_context_ptr(ggml_init(params));
}

// Deterministic values in [-1, 1).
void fill(std::vector<float>& v, uint32_t seed) {
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1u << 23) - 1.0f;
  }
}

// A weight matrix placed as the model loader places it (repacked where the
// CPU backend would repack it, else copied into huge pages), holding one quantized row over and over:
// the kernels' speed does not depend on the values, only on the bytes.
struct Weight {
  ggml_context_ptr ctx;
  ReservedMemory memory;  // for a matrix the loader copies as it is
  ggml_backend_buffer_ptr buffer;
  ggml_tensor* w = nullptr;
  int64_t bytes() const { return int64_t(ggml_nbytes(w)); }
};

Weight make_weight(ggml_type type, int64_t n_in, int64_t n_out) {
  Weight m;
  m.ctx = new_context(1);
  m.w = ggml_new_tensor_2d(m.ctx.get(), type, n_in, n_out);
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  if (repacks(repack, m.w)) {
    const size_t size = ggml_backend_buft_get_alloc_size(repack, m.w);
    m.buffer.reset(ggml_backend_buft_alloc_buffer(repack, size));
    advise_huge_pages(ggml_backend_buffer_get_base(m.buffer.get()), size);
  } else {
    auto memory = ReservedMemory::reserve(ggml_nbytes(m.w));
    if (memory) {
      m.memory = std::move(*memory);
      m.buffer.reset(ggml_backend_cpu_buffer_from_ptr(m.memory.data(), ggml_nbytes(m.w)));
    } else {
      m.buffer.reset(ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), ggml_nbytes(m.w)));
    }
  }
  ggml_backend_tensor_alloc(m.buffer.get(), m.w, ggml_backend_buffer_get_base(m.buffer.get()));
  std::vector<float> row(static_cast<size_t>(n_in));
  fill(row, 7);
  const size_t row_bytes = ggml_row_size(type, n_in);
  std::vector<uint8_t> data(row_bytes * size_t(n_out));
  ggml_quantize_chunk(type, row.data(), data.data(), 0, 1, n_in, nullptr);
  for (int64_t r = 1; r < n_out; ++r)
    std::copy_n(data.data(), row_bytes, data.data() + size_t(r) * row_bytes);
  ggml_backend_tensor_set(m.w, data.data(), 0, data.size());
  return m;
}

// One input's quantized forms, each made once for every product that reads
// it: q4_rows' and q8_rows' (shared), q4k_rows' Q4_K one, and the one of
// Q5_K (q4k_rows) and Q6_K (q6k_rows), shared.
struct QuantizedInput {
  ggml_tensor* rows = nullptr;
  ggml_tensor* q4k = nullptr;
  ggml_tensor* q5k = nullptr;
};

// w x as the model's graph computes it (model/layers.cpp mul_mat): through
// q4_rows, q8_rows, q4k_rows or q6k_rows where one takes w, through ggml
// otherwise.
ggml_tensor* model_product(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, QuantizedInput& xq) {
  if (q4k_rows_supported(w)) {
    if (!xq.q4k) xq.q4k = q4k_rows_quantize(ctx, x);
    return q4k_rows_mul_mat(ctx, w, xq.q4k);
  }
  const bool q6k = q6k_rows_supported(w);
  if (q6k || q5k_rows_supported(w)) {
    if (!xq.q5k) xq.q5k = q5k_rows_quantize(ctx, x);
    return q6k ? q6k_rows_mul_mat(ctx, w, xq.q5k) : q5k_rows_mul_mat(ctx, w, xq.q5k);
  }
  const bool q4 = q4_rows_supported(w);
  if (!q4 && !q8_rows_supported(w)) return ggml_mul_mat(ctx, w, x);
  if (!xq.rows) xq.rows = q4_rows_quantize(ctx, x);
  return q4 ? q4_rows_mul_mat(ctx, w, xq.rows) : q8_rows_mul_mat(ctx, w, xq.rows);
}

// The graph of one product of `rows` rows with w, as the model's graph does
// it (q4_rows or q8_rows where the model uses them), its input set.
struct Product {
  ggml_context_ptr ctx;
  ggml_gallocr_ptr alloc;
  ggml_cgraph* graph = nullptr;
};

Product make_product(const Weight& weight, int rows) {
  Product p;
  p.ctx = new_context(8, 16);
  ggml_tensor* x = ggml_new_tensor_2d(p.ctx.get(), GGML_TYPE_F32, weight.w->ne[0], rows);
  ggml_set_input(x);
  QuantizedInput xq;
  ggml_tensor* y = model_product(p.ctx.get(), weight.w, x, xq);
  ggml_set_output(y);
  p.graph = ggml_new_graph_custom(p.ctx.get(), 16, false);
  ggml_build_forward_expand(p.graph, y);
  p.alloc.reset(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
  ggml_gallocr_alloc_graph(p.alloc.get(), p.graph);
  std::vector<float> input(size_t(ggml_nelements(x)));
  fill(input, 11);
  ggml_backend_tensor_set(x, input.data(), 0, ggml_nbytes(x));
  return p;
}

struct Sizes {
  int64_t stream_bytes;   // the weight streamed at 1 and 8 rows
  int64_t prefill_bytes;  // the weight multiplied by many rows
  int prefill_rows;
  int reps;
  int attention_cells;
  int nodes;  // in the graph that times a node's fixed cost
  bool quick;
};

// The last-level cache, bytes (32 MiB when the system does not say).
int64_t last_level_cache() {
  for (int index = 4; index >= 2; --index) {
    const fs::path dir = fs::path("/sys/devices/system/cpu/cpu0/cache") / ("index" + std::to_string(index));
    auto size = read_file(dir / "size");
    if (!size || size->empty()) continue;
    char* end = nullptr;
    const long long n = std::strtoll(size->c_str(), &end, 10);
    if (n <= 0) continue;
    const int64_t unit = *end == 'K' ? 1024 : *end == 'M' ? (int64_t(1) << 20) : 1;
    return int64_t(n) * unit;
  }
  return int64_t(32) << 20;
}

// A weight a dozen times the last-level cache (256 MiB - 1 GiB, and at most
// an eighth of the free memory): too big to be re-read from the cache,
// which a model's weights never are from one step to the next.
int64_t stream_bytes() {
  const int64_t free = read_system_memory().free();
  int64_t bytes = std::clamp(12 * last_level_cache(), int64_t(256) << 20, int64_t(1) << 30);
  if (free > 0) bytes = std::min(bytes, free / 8);
  return std::max(bytes, int64_t(64) << 20);
}

TypeRate probe_type(Runner& runner, ggml_type type, const Sizes& sizes) {
  constexpr int64_t n_in = 4096;
  auto rows_for = [&](int64_t bytes) {
    return std::max<int64_t>(8, bytes / int64_t(ggml_row_size(type, n_in)) / 8 * 8);
  };
  TypeRate rate;
  {
    // Each rate as measured: a decode product's time is not the sum of a
    // streaming and an arithmetic part (they overlap, and the kernels for 1,
    // 2-4 and 8 rows differ), so none is derived from another.
    Weight w = make_weight(type, n_in, rows_for(sizes.stream_bytes));
    Product one = make_product(w, 1), eight = make_product(w, 8);
    const std::vector<double> t = runner.seconds({one.graph, eight.graph}, sizes.reps);
    rate.bytes_per_s = double(w.bytes()) / t[0];
    rate.bytes_per_s_8 = double(w.bytes()) / std::max(t[1], t[0]);
  }
  {
    // Many rows: arithmetic bound; the time beyond streaming the weight
    // once is the arithmetic's (speed.cpp adds the two back).
    Weight w = make_weight(type, n_in, rows_for(sizes.prefill_bytes));
    const double flops = 2.0 * double(w.w->ne[0]) * double(w.w->ne[1]) * sizes.prefill_rows;
    Product many = make_product(w, sizes.prefill_rows);
    const double t = runner.seconds(many.graph, std::max(2, sizes.reps / 2));
    const double stream = double(w.bytes()) / rate.bytes_per_s;
    rate.prefill_flops = flops / std::max(t - stream, t * 0.1);
  }
  return rate;
}

// The seven matrices of one reference layer (a 1B-class llama block,
// Llama 3.2 1B's widths): q, k, v (sharing their input), o, gate and up
// (sharing theirs) and down, and which input each reads.
struct RefMatrix {
  int64_t n_in, n_out;
  int input;  // 0: the layer's normed input, 1: attention's output, 2: the FFN's normed input, 3: SwiGLU's
};
constexpr RefMatrix kRefLayer[] = {{2048, 2048, 0}, {2048, 512, 0},  {2048, 512, 0}, {2048, 2048, 1},
                                   {2048, 8192, 2}, {2048, 8192, 2}, {8192, 2048, 3}};
constexpr int kQuickShrink = 8;
constexpr int kRefWindow = 256, kRefSeen = 192;  // a decode row's window of cells, and those it sees  //
                                                 // --quick: the reference widths divided by this

// A stack of reference layers' matrices, each with weights of its own
// (together too big for the last-level cache, as a model's are).
struct MatrixStack {
  std::vector<Weight> weights;  // layer by layer, in kRefLayer's order
  int64_t bytes = 0;
  int shrink = 1;
};

MatrixStack make_matrix_stack(ggml_type type, int64_t stream_bytes, int shrink) {
  MatrixStack stack;
  stack.shrink = shrink;
  int64_t layer_bytes = 0;
  for (const RefMatrix& m : kRefLayer)
    layer_bytes += int64_t(ggml_row_size(type, m.n_in / shrink)) * m.n_out / shrink;
  const int64_t n_layers = std::max<int64_t>(2, (stream_bytes + layer_bytes - 1) / layer_bytes);
  for (int64_t il = 0; il < n_layers; ++il) {
    for (const RefMatrix& m : kRefLayer) {
      stack.weights.push_back(make_weight(type, m.n_in / shrink, m.n_out / shrink));
      stack.bytes += stack.weights.back().bytes();
    }
  }
  return stack;
}

// One decode step's products through the stack, `rows` rows, as a model's
// layers run them: one node after another (each waits for the one before,
// as in a model's graph), each product quantizing its input as graft's
// kernel for the type does (once per shared input and form).
Product make_stack_step(const MatrixStack& stack, int rows) {
  Product p;
  const size_t nodes = stack.weights.size() * 2 + 16;
  p.ctx = new_context(nodes + 8, nodes);
  ggml_context* ctx = p.ctx.get();
  ggml_tensor* inputs[4];
  for (int i = 0; i < 4; ++i) {
    inputs[i] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, (i == 3 ? 8192 : 2048) / stack.shrink, rows);
    ggml_set_input(inputs[i]);
  }
  p.graph = ggml_new_graph_custom(ctx, nodes, false);
  constexpr size_t n_ref = std::size(kRefLayer);
  for (size_t il = 0; il * n_ref < stack.weights.size(); ++il) {
    QuantizedInput quantized[4];
    for (size_t j = 0; j < n_ref; ++j) {
      const Weight& w = stack.weights[il * n_ref + j];
      const int in = kRefLayer[j].input;
      ggml_tensor* y = model_product(ctx, w.w, inputs[in], quantized[in]);
      ggml_set_output(y);
      ggml_build_forward_expand(p.graph, y);
    }
  }
  p.alloc.reset(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
  ggml_gallocr_alloc_graph(p.alloc.get(), p.graph);
  for (ggml_tensor* x : inputs) {
    std::vector<float> input(size_t(ggml_nelements(x)));
    fill(input, 11);
    ggml_backend_tensor_set(x, input.data(), 0, ggml_nbytes(x));
  }
  return p;
}

// A type's layer rates: the stack's bytes over the time of its products at
// 1 and 8 rows. What a model's layers cost beyond one large product's rate
// lands here: matrices of several shapes (small k and v among them), the
// input quantized for each, a barrier after each.
void probe_layer_matrices(Runner& runner, ggml_type type, const Sizes& sizes, TypeRate& rate) {
  const MatrixStack stack = make_matrix_stack(type, sizes.stream_bytes, sizes.quick ? kQuickShrink : 1);
  Product one = make_stack_step(stack, 1), eight = make_stack_step(stack, 8);
  const std::vector<double> t = runner.seconds({one.graph, eight.graph}, sizes.reps);
  rate.layer_bytes_per_s = double(stack.bytes) / t[0];
  rate.layer_bytes_per_s_8 = double(stack.bytes) / std::max(t[1], t[0]);
}

constexpr int kAttentionHeads = 32, kAttentionKvHeads = 8;

// Attention units (row x cell x head x head-dim) of `rows` rows over `cells` cells.
double attention_units(int rows, int cells, int head_dim) {
  return double(rows) * cells * kAttentionHeads * head_dim;
}

// Seconds of one op of attention of `rows` rows over `cells` cells of an F16
// cache, heads `head_dim` wide, laid out as the KV cache is (each cell's KV
// heads side by side, viewed per head). Timed over ops on separate caches
// (decode: one row per op, as each sequence has its own window), as many
// as together hold `footprint` bytes of cache (at least one), so that they
// are read from memory as a step's are. Each row sees the first `visible`
// cells (causal: up to its own).
double probe_attention(Runner& runner, int rows, int cells, int visible, int head_dim, int64_t footprint,
                       bool causal, int reps) {
  const int64_t op_bytes = int64_t(2) * cells * kAttentionKvHeads * head_dim * int64_t(sizeof(ggml_fp16_t));
  const int ops = int(std::clamp<int64_t>(footprint / op_bytes, 1, 4096));
  const size_t n_tensors = size_t(ops) * 8 + 8;
  ggml_context_ptr ctx = new_context(n_tensors, n_tensors);
  ggml_cgraph* graph = ggml_new_graph_custom(ctx.get(), n_tensors, false);
  std::vector<ggml_tensor*> masks;
  for (int i = 0; i < ops; ++i) {
    ggml_tensor* q = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, head_dim, kAttentionHeads, rows);
    ggml_tensor* k = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F16, head_dim, kAttentionKvHeads, cells);
    ggml_tensor* v = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F16, head_dim, kAttentionKvHeads, cells);
    ggml_tensor* mask = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F16, cells, rows);
    for (ggml_tensor* t : {q, k, v, mask}) ggml_set_input(t);
    masks.push_back(mask);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    ggml_tensor* out = nullptr;
    if (kv_attention_supported(k, v, rows)) {  // as model/layers.cpp's attention takes it
      out = kv_attention(ctx.get(), q, k, v, mask, scale);
    } else {
      out = ggml_flash_attn_ext(ctx.get(), ggml_permute(ctx.get(), q, 0, 2, 1, 3),
                                ggml_permute(ctx.get(), k, 0, 2, 1, 3),
                                ggml_permute(ctx.get(), v, 0, 2, 1, 3), mask, scale, 0.0f, 0.0f);
      ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    }
    ggml_set_output(out);
    ggml_build_forward_expand(graph, out);
  }
  ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
  ggml_gallocr_alloc_graph(alloc.get(), graph);
  // Inputs: zeros, and the mask (causal for a prompt).
  for (ggml_tensor* t = ggml_get_first_tensor(ctx.get()); t; t = ggml_get_next_tensor(ctx.get(), t)) {
    if (t->data && !t->view_src && (t->flags & GGML_TENSOR_FLAG_INPUT))
      std::memset(t->data, 0, ggml_nbytes(t));
  }
  const ggml_fp16_t drop = ggml_fp32_to_fp16(-INFINITY);
  for (ggml_tensor* mask : masks) {
    auto* m = static_cast<ggml_fp16_t*>(mask->data);
    for (int r = 0; r < rows; ++r) {
      for (int c = causal ? r + 1 : visible; c < cells; ++c) m[size_t(r) * size_t(cells) + size_t(c)] = drop;
    }
  }
  return runner.seconds(graph, reps) / ops;
}

// The fixed cost of a graph node: a chain of a decode step's small ops
// (adding one 2048-wide row to another, as a residual does).
double probe_node(Runner& runner, int nodes, int reps) {
  ggml_context_ptr ctx = new_context(size_t(nodes) + 4, size_t(nodes) + 4);
  ggml_cgraph* graph = ggml_new_graph_custom(ctx.get(), size_t(nodes) + 4, false);
  ggml_tensor* x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 2048);
  ggml_set_input(x);
  ggml_tensor* y = x;
  for (int i = 0; i < nodes; ++i) y = ggml_add(ctx.get(), y, x);
  ggml_set_output(y);
  ggml_build_forward_expand(graph, y);
  ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
  ggml_gallocr_alloc_graph(alloc.get(), graph);
  std::memset(x->data, 0, ggml_nbytes(x));
  return runner.seconds(graph, reps) / nodes;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string cache_key(const std::string& cpu, int threads) {
  return cpu + " / " + std::to_string(threads) + " threads";
}

Result<double> positive(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !(it->get<double>() > 0)) {
    return errorf("invalid_argument", "probe result: '{}' must be a positive number", key);
  }
  return it->get<double>();
}

}  // namespace

namespace {

// Seconds for `bytes` at `rows` rows: between the rates at 1 and 8 rows;
// beyond, each further row as dear as the 2nd to 8th.
double between(int64_t bytes, int rows, double per_s, double per_s_8) {
  const double one = double(bytes) / per_s;
  const double eight = std::max(one, double(bytes) / per_s_8);
  return one + (eight - one) * double(std::max(rows, 1) - 1) / 7.0;
}

}  // namespace

double TypeRate::decode_seconds(int64_t bytes, int rows) const {
  return between(bytes, rows, bytes_per_s, bytes_per_s_8);
}

double TypeRate::layer_decode_seconds(int64_t bytes, int rows) const {
  return between(bytes, rows, layer_bytes_per_s, layer_bytes_per_s_8);
}

double ProbeResult::attention_seconds(double row_cell_heads, int head_dim, bool prefill) const {
  const double at_128 = prefill ? attention_prefill : attention_decode;
  const double at_64 = prefill ? attention_prefill_64 : attention_decode_64;
  const double cost_128 = 128.0 / at_128;
  const double cost_64 = at_64 > 0 ? 64.0 / at_64 : cost_128 / 2;
  const double cost = cost_64 + (cost_128 - cost_64) * double(head_dim - 64) / 64.0;
  return row_cell_heads * std::max(cost, 0.25 * std::min(cost_64, cost_128));
}

TypeRate ProbeResult::rate(int type) const {
  const ggml_type t = ggml_type(type);
  if (auto it = types.find(ggml_type_name(t)); it != types.end()) return it->second;
  auto bits = [](ggml_type x) { return 8.0 * double(ggml_type_size(x)) / double(ggml_blck_size(x)); };
  TypeRate best;
  double gap = 1e9;
  for (ggml_type probed : kProbedTypes) {
    auto it = types.find(ggml_type_name(probed));
    if (it == types.end()) continue;
    const double d = std::abs(bits(probed) - bits(t));
    if (d < gap) {
      gap = d;
      best = it->second;
    }
  }
  return best;
}

double ProbeResult::memory_bandwidth() const {
  return rate(GGML_TYPE_F16).bytes_per_s;
}

double ProbeResult::int8_flops() const {
  return rate(GGML_TYPE_Q8_0).prefill_flops;
}

double ProbeResult::f16_flops() const {
  return rate(GGML_TYPE_F16).prefill_flops;
}

json ProbeResult::to_json() const {
  json t = json::object();
  for (const auto& [name, r] : types) {
    t[name] = {{"bytes_per_s", r.bytes_per_s},
               {"bytes_per_s_8", r.bytes_per_s_8},
               {"prefill_flops", r.prefill_flops},
               {"layer_bytes_per_s", r.layer_bytes_per_s},
               {"layer_bytes_per_s_8", r.layer_bytes_per_s_8}};
  }
  return json{{"version", version},
              {"cpu", cpu},
              {"threads", threads},
              {"measured_at", measured_at},
              {"quick", quick},
              {"memory_bandwidth_bytes_per_s", memory_bandwidth()},
              {"int8_flops", int8_flops()},
              {"f16_flops", f16_flops()},
              {"types", t},
              {"attention_decode", attention_decode},
              {"attention_prefill", attention_prefill},
              {"attention_decode_64", attention_decode_64},
              {"attention_prefill_64", attention_prefill_64},
              {"attention_op_seconds", attention_op_seconds},
              {"node_seconds", node_seconds}};
}

Result<ProbeResult> ProbeResult::from_json(const json& j) {
  if (!j.is_object()) return make_error("invalid_argument", "probe result: not a JSON object");
  ProbeResult r;
  if (auto it = j.find("version"); it != j.end() && it->is_number_integer()) {
    r.version = it->get<int>();
  } else {
    r.version = 1;
  }
  if (r.version != kProbeVersion) {
    return errorf(
        "invalid_argument",
        "probe result: from another graft (probe version {}, this graft's is {}): run graft fit --probe",
        r.version, kProbeVersion);
  }
  auto text = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : "";
  };
  r.cpu = text("cpu");
  r.measured_at = text("measured_at");
  if (auto it = j.find("threads"); it != j.end() && it->is_number_integer()) r.threads = it->get<int>();
  if (auto it = j.find("quick"); it != j.end() && it->is_boolean()) r.quick = it->get<bool>();
  GRAFT_TRY(r.attention_decode, positive(j, "attention_decode"));
  GRAFT_TRY(r.attention_prefill, positive(j, "attention_prefill"));
  GRAFT_TRY(r.attention_decode_64, positive(j, "attention_decode_64"));
  GRAFT_TRY(r.attention_prefill_64, positive(j, "attention_prefill_64"));
  GRAFT_TRY(r.node_seconds, positive(j, "node_seconds"));
  if (auto it = j.find("attention_op_seconds");
      it == j.end() || !it->is_number() || !(it->get<double>() >= 0)) {
    return make_error("invalid_argument",
                      "probe result: 'attention_op_seconds' must be a number of 0 or more");
  } else {
    r.attention_op_seconds = it->get<double>();
  }
  auto types = j.find("types");
  if (types == j.end() || !types->is_object() || types->empty()) {
    return make_error("invalid_argument", "probe result: 'types' must be an object of weight types");
  }
  for (const auto& [name, v] : types->items()) {
    TypeRate t;
    GRAFT_TRY(t.bytes_per_s, positive(v, "bytes_per_s"));
    GRAFT_TRY(t.bytes_per_s_8, positive(v, "bytes_per_s_8"));
    GRAFT_TRY(t.prefill_flops, positive(v, "prefill_flops"));
    GRAFT_TRY(t.layer_bytes_per_s, positive(v, "layer_bytes_per_s"));
    GRAFT_TRY(t.layer_bytes_per_s_8, positive(v, "layer_bytes_per_s_8"));
    r.types[name] = t;
  }
  return r;
}

Result<ProbeResult> run_probe(const ProbeOptions& options) {
  // ggml's own messages (one line per repacked weight) go to graft's debug log.
  ggml_log_set(
      [](ggml_log_level, const char* text, void*) {
        std::string line(text);
        while (!line.empty() && line.back() == '\n') line.pop_back();
        if (!line.empty()) GRAFT_LOG_DEBUG("ggml: {}", line);
      },
      nullptr);
  ProbeResult r;
  r.threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  r.cpu = cpu_model();
  r.quick = options.quick;
  const Sizes sizes = options.quick ? Sizes{int64_t(2) << 20, int64_t(1) << 20, 32, 2, 256, 64, true}
                                    : Sizes{stream_bytes(), int64_t(12) << 20, 256, 7, 2048, 512, false};
  Runner runner(r.threads);
  for (ggml_type type : kProbedTypes) {
    TypeRate& rate = r.types[ggml_type_name(type)];
    rate = probe_type(runner, type, sizes);
    probe_layer_matrices(runner, type, sizes, rate);
  }
  const int cells = sizes.attention_cells, rows = sizes.prefill_rows;
  const int prefill_reps = std::max(2, sizes.reps / 2);
  auto decode_rate = [&](int head_dim) {
    return attention_units(1, cells, head_dim) /
           probe_attention(runner, 1, cells, cells, head_dim, sizes.stream_bytes, false, sizes.reps);
  };
  // A prompt's attention reads the cache it has just written: one op.
  auto prefill_rate = [&](int head_dim) {
    return attention_units(rows, rows, head_dim) /
           probe_attention(runner, rows, rows, rows, head_dim, 0, true, prefill_reps);
  };
  r.attention_decode = decode_rate(128);
  r.attention_decode_64 = decode_rate(64);
  r.attention_prefill = prefill_rate(128);
  r.attention_prefill_64 = prefill_rate(64);
  // A decode row's op over a short window (the KV cache's 256 cells, 192 of
  // them seen): what it takes beyond its units at the long window's rate is
  // the op's own cost, which a step pays once per sequence and layer.
  const double short_op =
      probe_attention(runner, 1, kRefWindow, kRefSeen, 128, sizes.stream_bytes, false, sizes.reps);
  r.attention_op_seconds = std::max(0.0, short_op - attention_units(1, kRefSeen, 128) / r.attention_decode);
  r.node_seconds = probe_node(runner, sizes.nodes, sizes.reps);
  r.measured_at = utc_now();
  return r;
}

fs::path probe_cache_file() {
  return cache_dir() / "probe.json";
}

Result<std::optional<ProbeResult>> load_cached_probe(const fs::path& file, const std::string& cpu,
                                                     int threads) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::optional<ProbeResult>();
  GRAFT_TRY(std::string text, read_file(file));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries") || !j["entries"].is_object()) {
    return errorf("invalid_argument", "{}: not a probe cache (delete it and run graft fit --probe)",
                  file.string());
  }
  auto it = j["entries"].find(cache_key(cpu, threads));
  if (it == j["entries"].end()) return std::optional<ProbeResult>();
  if (!it->is_object() || it->value("version", 1) != kProbeVersion) return std::optional<ProbeResult>();
  auto result = ProbeResult::from_json(*it);
  if (!result) return errorf("invalid_argument", "{}: {}", file.string(), result.error().message);
  return std::optional<ProbeResult>(std::move(*result));
}

Status save_probe(const fs::path& file, const ProbeResult& result) {
  json j = {{"entries", json::object()}};
  std::error_code ec;
  if (fs::exists(file, ec)) {
    if (auto text = read_file(file)) {
      json old = json::parse(*text, nullptr, false);
      if (!old.is_discarded() && old.is_object() && old.contains("entries") && old["entries"].is_object())
        j = old;
    }
  }
  j["entries"][cache_key(result.cpu, result.threads)] = result.to_json();
  fs::create_directories(file.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", file.parent_path().string(), ec.message());
  return write_file_atomic(file, j.dump(2) + "\n");
}

Result<ProbeResult> read_probe_file(const fs::path& file) {
  GRAFT_TRY(std::string text, read_file(file));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return errorf("invalid_argument", "{}: not JSON", file.string());
  if (j.is_object() && j.contains("entries") && j["entries"].is_object()) {
    if (j["entries"].size() != 1) {
      return errorf("invalid_argument", "{}: holds {} probe results; give a file with one", file.string(),
                    j["entries"].size());
    }
    j = j["entries"].begin().value();
  }
  auto result = ProbeResult::from_json(j);
  if (!result) return errorf("invalid_argument", "{}: {}", file.string(), result.error().message);
  return result;
}

}  // namespace graft::fit
