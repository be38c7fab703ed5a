#include "fit/memory.h"

#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "chat/template.h"
#include "engine/kv_cache.h"
#include "fit/system.h"
#include "model/lora.h"
#include "tokenizer/tokenizer.h"

namespace graft::fit {

namespace {

// Heap bytes in use (small blocks plus malloc's own mappings).
int64_t heap_in_use() {
  const struct mallinfo2 info = ::mallinfo2();
  return int64_t(info.uordblks) + int64_t(info.hblkhd);
}

// What a graft process holds beyond its baseline and the parts counted one
// by one: the HTTP, engine and compute threads (their stacks' used pages),
// code first run while serving, and allocator slack. Measured: graft serve
// under full load held 8.5 MiB more than the parts and the baseline
// (tests/fit/rss_test.cpp checks the whole stays within 10 %).
constexpr int64_t kRuntimeBytes = int64_t(8) << 20;
// A sampler keeps one candidate (id, logit, p) per vocabulary entry (engine/sampler.h).
constexpr int64_t kCandidateBytes = 12;

// LoRA slots: each (layer, projection) stacks A [n_in, rank] and B [n_out,
// rank] in F16, 64-byte aligned; a slot is whole 2 MiB pages (model/lora.cpp).
int64_t adapter_slot_bytes(const ModelConfig& c, int rank) {
  const int64_t in_out[] = {int64_t(c.n_embd) + c.n_embd_q(),  int64_t(c.n_embd) + c.n_embd_kv(),
                            int64_t(c.n_embd) + c.n_embd_kv(), int64_t(c.n_embd_q()) + c.n_embd,
                            int64_t(c.n_embd) + c.n_ff,        int64_t(c.n_embd) + c.n_ff,
                            int64_t(c.n_ff) + c.n_embd};
  auto align = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
  int64_t per_layer = 0;
  for (int64_t n : in_out) per_layer += align(n * rank * 2, 64);
  return align(per_layer * c.n_layer, int64_t(2) << 20);
}

std::string dominant_type(const Model& model) {
  std::map<std::string, int64_t> bytes;
  for (const GgufTensorInfo& t : model.gguf().tensors()) {
    if (t.n_dims >= 2) bytes[ggml_type_name(t.type)] += int64_t(t.size);
  }
  std::string best = "?";
  int64_t most = -1;
  for (const auto& [name, n] : bytes) {
    if (n > most) {
      best = name;
      most = n;
    }
  }
  std::transform(best.begin(), best.end(), best.begin(), [](unsigned char ch) { return std::toupper(ch); });
  return best;
}

}  // namespace

int64_t MemoryBreakdown::total() const {
  return weights_mapped + weights_repacked + weights_copied + kv + compute + adapters + requests + tokenizer +
         fixed;
}

std::string format_bytes(int64_t bytes) {
  const double b = double(bytes);
  if (bytes >= (int64_t(1) << 30)) return fmt::format("{:.2f} GiB", b / double(int64_t(1) << 30));
  if (bytes >= (int64_t(1) << 20)) return fmt::format("{:.0f} MiB", b / double(int64_t(1) << 20));
  return fmt::format("{:.0f} KiB", b / 1024.0);
}

Result<std::unique_ptr<FitModel>> FitModel::open(const std::string& path) {
  baseline_rss();  // before anything of the model is in memory
  std::unique_ptr<FitModel> m(new FitModel());
  m->path_ = path;
  const int64_t heap_before = heap_in_use();
  GRAFT_TRY(m->layout_, Model::load_layout(path));
  {
    // What serve keeps besides the weights: the file's metadata (the model
    // holds it), the tokenizer and the chat template.
    GRAFT_TRY(std::shared_ptr<const Tokenizer> tokenizer, Tokenizer::from_gguf(m->layout_->gguf()));
    std::optional<ChatTemplate> chat;
    if (auto source = m->layout_->gguf().find_string("tokenizer.chat_template")) {
      if (auto parsed = ChatTemplate::parse(*source)) chat.emplace(std::move(*parsed));
    }
    m->tokenizer_bytes_ = std::max<int64_t>(0, heap_in_use() - heap_before);
  }
  m->file_bytes_ = int64_t(m->layout_->gguf().file_size());
  m->quantization_ = dominant_type(*m->layout_);
  const ModelWeights& w = m->layout_->weights();
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& l = w.layers[il];
    for (ggml_tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) {
      if (!t) continue;
      const bool ffn = t == l.ffn_gate || t == l.ffn_up || t == l.ffn_down;
      m->matrices_.push_back({t->type, t->ne[0], t->ne[1], int64_t(ggml_nbytes(t)), int(il), ffn});
    }
  }
  if (w.output) {
    m->matrices_.push_back(
        {w.output->type, w.output->ne[0], w.output->ne[1], int64_t(ggml_nbytes(w.output)), -1, false});
  }
  return m;
}

int FitModel::max_sequences(int parallel) {
  return std::min(std::max(4 * parallel, 16), 256);
}

int FitModel::batch_rows(const ServeSettings& s) {
  return std::max(s.batch, s.parallel + 1);
}

ServeSettings FitModel::resolve(ServeSettings s) const {
  const int train = config().n_ctx_train;
  if (s.n_ctx <= 0) s.n_ctx = std::min(train > 0 ? train : 4096, 8192);
  if (train > 0) s.n_ctx = std::min(s.n_ctx, train);
  s.parallel = std::clamp(s.parallel, 1, 64);
  if (s.threads <= 0) s.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  if (s.kv_budget_tokens <= 0) s.kv_budget_tokens = int64_t(s.parallel) * s.n_ctx;
  return s;
}

Forward::Measure FitModel::measure(ggml_type kv_type, int n_cells, int n_rows, int n_outputs, int threads,
                                   const std::vector<KvCache::Window>& windows) const {
  std::string key;
  for (const KvCache::Window& w : windows)
    key += fmt::format("{},{},{},{};", w.row_begin, w.n_rows, w.cell_begin, w.n_cells);
  const auto id = std::make_tuple(int(kv_type), n_cells, n_rows, n_outputs, threads, key);
  std::lock_guard lock(mutex_);
  auto it = measured_.find(id);
  if (it != measured_.end()) return it->second;
  Forward::Measure m = Forward::measure(*layout_, kv_type, n_cells, n_rows, n_outputs, threads, windows);
  measured_[id] = m;
  return m;
}

MemoryBreakdown FitModel::memory(const ServeSettings& s) const {
  const ModelConfig& c = config();
  MemoryBreakdown m;
  m.weights_repacked = int64_t(layout_->repacked_bytes());
  m.weights_copied = int64_t(layout_->copied_bytes());
  m.weights_mapped = int64_t(layout_->weight_bytes()) - m.weights_repacked - m.weights_copied;
  const int sequences = max_sequences(s.parallel);
  const KvCache::Footprint kv = KvCache::footprint(c, s.kv_type);
  m.kv =
      s.kv_budget_tokens * int64_t(kv.bytes_per_cell) + int64_t(sequences) * int64_t(kv.bytes_per_sequence);
  const int rows = batch_rows(s);
  const Forward::Measure g = measure(s.kv_type, int(std::min<int64_t>(s.kv_budget_tokens, INT32_MAX)), rows,
                                     std::min(rows, sequences), s.threads);
  m.compute = int64_t(g.compute_bytes + g.work_bytes);
  if (s.adapters > 0) {
    // The slots, and in batches that route rows to adapters each projection's
    // delta beside its output (not in the measured graph, which has none).
    m.adapters = int64_t(s.adapters) * adapter_slot_bytes(c, s.adapter_rank) +
                 int64_t(rows) * std::max(c.n_ff, c.n_embd_q()) * int64_t(sizeof(float));
  }
  m.requests = int64_t(s.parallel) * c.n_vocab * kCandidateBytes;
  m.tokenizer = tokenizer_bytes_;
  m.fixed = baseline_rss() + kRuntimeBytes;
  return m;
}

namespace {

constexpr int kContextStep = 256;  // contexts are planned in KV blocks

bool fits_with(const FitModel& model, const ServeSettings& s, int64_t usable) {
  return model.memory(s).total() <= usable;
}

ServeSettings full_budget(ServeSettings s) {
  s.kv_budget_tokens = int64_t(s.parallel) * s.n_ctx;
  return s;
}

}  // namespace

FitAnswer solve(const FitModel& model, const ServeSettings& settings, int64_t usable) {
  FitAnswer a;
  a.usable = usable;
  a.need = model.memory(settings);
  a.fits = a.need.total() <= usable;
  const MemoryBreakdown& n = a.need;
  const std::string parts =
      fmt::format("weights {}, KV cache {} ({} tokens), compute {}, other {}",
                  format_bytes(n.weights_mapped + n.weights_repacked + n.weights_copied), format_bytes(n.kv),
                  settings.kv_budget_tokens, format_bytes(n.compute),
                  format_bytes(n.adapters + n.requests + n.tokenizer + n.fixed));
  a.reason =
      a.fits ? fmt::format("needs {} ({}) of {} usable", format_bytes(n.total()), parts, format_bytes(usable))
             : fmt::format("needs {} ({}) but only {} is usable", format_bytes(n.total()), parts,
                           format_bytes(usable));

  // The longest context at this parallel count (whole KV blocks, up to the training context).
  const int train = model.config().n_ctx_train > 0 ? model.config().n_ctx_train : (1 << 20);
  auto context_fits = [&](int ctx) {
    ServeSettings s = settings;
    s.n_ctx = ctx;
    return fits_with(model, full_budget(s), usable);
  };
  if (context_fits(train)) {
    a.max_safe_context = train;
  } else {
    int lo = 0, hi = (train - 1) / kContextStep;  // in steps; lo fits (0 = none)
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (context_fits(mid * kContextStep)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    a.max_safe_context = lo * kContextStep;
  }

  // The most parallel requests at this context.
  auto parallel_fits = [&](int p) {
    ServeSettings s = settings;
    s.parallel = p;
    return fits_with(model, full_budget(s), usable);
  };
  int lo = 0, hi = 64;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (parallel_fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  a.max_parallel = lo;

  // The budget: parallel full contexts, or as many whole blocks as fit (at least one context).
  auto budget_fits = [&](int64_t tokens) {
    ServeSettings s = settings;
    s.kv_budget_tokens = tokens;
    return fits_with(model, s, usable);
  };
  const int64_t full = int64_t(settings.parallel) * settings.n_ctx;
  if (budget_fits(full)) {
    a.kv_budget_tokens = full;
  } else if (budget_fits(settings.n_ctx)) {
    int64_t b_lo = settings.n_ctx, b_hi = full;  // b_lo fits, b_hi does not
    while (b_hi - b_lo > kContextStep) {
      const int64_t mid = (b_lo + b_hi) / 2 / kContextStep * kContextStep;
      if (mid <= b_lo) break;
      if (budget_fits(mid)) {
        b_lo = mid;
      } else {
        b_hi = mid;
      }
    }
    a.kv_budget_tokens = b_lo;
  }
  return a;
}

}  // namespace graft::fit
