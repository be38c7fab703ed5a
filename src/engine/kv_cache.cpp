#include "engine/kv_cache.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <ggml-cpu.h>

namespace graft {

// Each layer that stores keys and values, at its own width (gemma4's
// sliding layers are narrower, its shared-KV layers store none).
size_t kv_bytes_per_token(const ModelConfig& config, ggml_type type) {
  size_t n = 0;
  for (int il = 0; il < config.n_layer; ++il) {
    if (config.stores_kv(il)) n += 2 * ggml_row_size(type, config.n_embd_kv_of(il));
  }
  return n;
}

size_t sliding_kv_bytes_per_token(const ModelConfig& config, ggml_type type) {
  if (!config.has_sliding_layers()) return 0;
  size_t n = 0;
  for (int il = 0; il < config.n_layer; ++il) {
    if (config.stores_kv(il) && config.is_sliding(il)) n += 2 * ggml_row_size(type, config.n_embd_kv_of(il));
  }
  return n;
}

KvSplit split_kv_budget(const ModelConfig& config, ggml_type type, int64_t n_tokens, int n_ctx,
                        int max_sequences, int max_rows) {
  KvSplit split{n_tokens, 0, max_sequences};
  const int64_t local = int64_t(sliding_kv_bytes_per_token(config, type));
  const int64_t global = int64_t(kv_bytes_per_token(config, type)) - local;
  if (local == 0 || global == 0 || config.sliding_window <= 0 || n_tokens <= 0) return split;
  // A sequence's window there: the positions before its next row that it
  // sees (never more than a context's).
  const int64_t window = std::max<int64_t>(1, std::min<int64_t>(config.sliding_window - 1, n_ctx));
  const int64_t rows = std::max(max_rows, 1);
  // The local layers' share of the budget is n_tokens of their cells: as
  // many windows as that holds beside one batch, at least one.
  const int64_t n_seq = std::clamp<int64_t>((n_tokens - rows) / window, 1, std::max(max_sequences, 1));
  split.max_sequences = int(n_seq);
  // No more cells than the sequences have positions.
  split.local_cells = std::min(n_seq * window + rows, n_seq * std::max<int64_t>(n_ctx, 1));
  // What the local pool leaves of the budget's bytes holds global cells.
  split.global_cells = (n_tokens * (global + local) - split.local_cells * local) / global;
  return split;
}

size_t recurrent_state_bytes(const ModelConfig& config) {
  return size_t(config.n_recurrent_layers()) * sizeof(float) *
         size_t(config.ssm.conv_state_size() + config.ssm.delta_state_size());
}

Result<std::unique_ptr<KvCache>> KvCache::create(const ModelConfig& config, const KvCacheOptions& options) {
  if (options.n_cells <= 0) return errorf("invalid_argument", "the KV cache needs at least one cell");
  if (options.n_seq_max <= 0 || options.n_seq_max > kMaxSequences) {
    return errorf("invalid_argument", "n_seq_max must be 1..{}, got {}", kMaxSequences, options.n_seq_max);
  }
  if (options.type != GGML_TYPE_F16 && options.type != GGML_TYPE_Q8_0 && options.type != GGML_TYPE_Q4_0) {
    return errorf("invalid_argument", "KV cache type must be f16, q8_0 or q4_0, got {}",
                  ggml_type_name(options.type));
  }
  if (config.n_embd_kv() % ggml_blck_size(options.type) != 0 ||
      config.head_dim % ggml_blck_size(options.type) != 0 ||
      (config.head_dim_local > 0 && config.head_dim_local % ggml_blck_size(options.type) != 0)) {
    return errorf("invalid_argument", "KV cache type {} needs head widths that are multiples of {}",
                  ggml_type_name(options.type), ggml_blck_size(options.type));
  }
  if (options.n_local_cells < 0) return errorf("invalid_argument", "negative local pool size");
  const bool split = options.n_local_cells > 0;
  if (split && sliding_kv_bytes_per_token(config, options.type) == 0) {
    return errorf("invalid_argument", "a local KV pool needs sliding-window layers");
  }
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->pool_.cells.resize(size_t(options.n_cells));
  cache->pool_.seq_tail.assign(size_t(options.n_seq_max), -1);
  if (split) {
    cache->local_.cells.resize(size_t(options.n_local_cells));
    cache->local_.seq_tail.assign(size_t(options.n_seq_max), -1);
    cache->window_ = config.sliding_window;
  }
  cache->seq_len_.assign(size_t(options.n_seq_max), 0);
  cache->local_valid_.assign(size_t(options.n_seq_max), true);
  cache->n_seq_max_ = options.n_seq_max;
  cache->type_ = options.type;

  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (2 * size_t(config.n_layer) + 1);
  params.no_alloc = true;
  cache->ctx_.reset(ggml_init(params));
  for (int il = 0; il < config.n_layer; ++il) {
    AttentionInputs::Layer layer;
    // No KV cells for a recurrent layer (a recurrent state instead) nor for
    // one that reads another layer's (gemma4's shared-KV layers).
    if (!config.stores_kv(il)) {
      cache->layers_.push_back(layer);
      continue;
    }
    const int n = split && config.is_sliding(il) ? options.n_local_cells : options.n_cells;
    layer.k = ggml_new_tensor_2d(cache->ctx_.get(), options.type, config.n_embd_kv_of(il), n);
    layer.v = ggml_new_tensor_2d(cache->ctx_.get(), options.type, config.n_embd_kv_of(il), n);
    ggml_format_name(layer.k, "cache_k.%d", il);
    ggml_format_name(layer.v, "cache_v.%d", il);
    cache->layers_.push_back(layer);
  }
  if (config.n_recurrent_layers() < config.n_layer) {
    cache->buffer_.reset(
        ggml_backend_alloc_ctx_tensors_from_buft(cache->ctx_.get(), ggml_backend_cpu_buffer_type()));
    if (!cache->buffer_) {
      return errorf("out_of_memory", "cannot allocate {} MiB for the KV cache",
                    (cache->bytes_per_token() * size_t(options.n_cells) +
                     cache->local_bytes_per_cell() * size_t(options.n_local_cells)) >>
                        20);
    }
    ggml_backend_buffer_clear(cache->buffer_.get(), 0);
  }
  if (config.has_recurrent_layers()) {
    GRAFT_TRY(cache->state_,
              RecurrentState::create(config, options.n_seq_max, std::max(options.n_state_snapshots, 0)));
    cache->state_valid_.assign(size_t(options.n_seq_max), true);
  }
  return cache;
}

Result<ggml_type> KvCache::type_from_name(std::string_view name) {
  if (name == "f16") return GGML_TYPE_F16;
  if (name == "q8_0") return GGML_TYPE_Q8_0;
  if (name == "q4_0") return GGML_TYPE_Q4_0;
  return errorf("invalid_argument", "KV cache type '{}' is not supported (use f16, q8_0 or q4_0)", name);
}

KvCache::Footprint KvCache::footprint(const ModelConfig& config, ggml_type type) {
  Footprint f;
  // Attention layers only. A sliding-window model's local pool takes its
  // share of a budget of n cells' worth (split_kv_budget), so n cells cost
  // the same.
  f.bytes_per_cell = kv_bytes_per_token(config, type);
  f.bytes_per_sequence = recurrent_state_bytes(config);
  return f;
}

KvCache::~KvCache() = default;

size_t KvCache::bytes_total() const {
  const size_t states = state_ ? state_->bytes_per_state() * size_t(n_seq_max_) : 0;
  return (buffer_ ? ggml_backend_buffer_get_size(buffer_.get()) : 0) + states;
}

size_t KvCache::bytes_per_token() const {
  size_t n = 0;
  for (const auto& l : layers_) {
    if (l.k && l.k->ne[1] == pool_.total()) {
      n += ggml_row_size(l.k->type, l.k->ne[0]) + ggml_row_size(l.v->type, l.v->ne[0]);
    }
  }
  return n;
}

size_t KvCache::local_bytes_per_cell() const {
  size_t n = 0;
  for (const auto& l : layers_) {
    if (l.k && local_.total() > 0 && l.k->ne[1] == local_.total() && local_.total() != pool_.total()) {
      n += ggml_row_size(l.k->type, l.k->ne[0]) + ggml_row_size(l.v->type, l.v->ne[0]);
    }
  }
  return n;
}

int KvCache::seq_length(SeqId seq) const {
  return valid_seq(seq) ? seq_len_[size_t(seq)] : 0;
}

void KvCache::release(Pool& pool, Cell& cell, SeqId seq) {
  cell.seqs.reset(size_t(seq));
  if (cell.free()) {
    cell.pos = -1;
    --pool.n_used;
  }
}

int KvCache::keep_range(Pool& pool, SeqId seq, int lo, int hi) {
  int tail = -1;
  for (int i = 0; i < pool.used_end; ++i) {
    Cell& c = pool.cells[size_t(i)];
    if (!c.seqs.test(size_t(seq))) continue;
    if (c.pos < lo || c.pos >= hi) {
      release(pool, c, seq);
    } else if (c.pos == hi - 1) {
      tail = i;
    }
  }
  while (pool.used_end > 0 && pool.cells[size_t(pool.used_end - 1)].free()) --pool.used_end;
  return tail;
}

int KvCache::local_cells_below(SeqId seq, int n) const {
  int count = 0;
  for (int i = 0; i < local_.used_end; ++i) {
    const Cell& c = local_.cells[size_t(i)];
    if (c.seqs.test(size_t(seq)) && c.pos < n) ++count;
  }
  return count;
}

void KvCache::seq_free(SeqId seq) {
  seq_truncate(seq, 0);
}

void KvCache::seq_truncate(SeqId seq, int n_keep) {
  if (!valid_seq(seq) || n_keep >= seq_len_[size_t(seq)]) return;
  n_keep = std::max(n_keep, 0);
  if (state_) {
    // The state goes back with the cells when a snapshot holds it; otherwise
    // the sequence cannot continue (place() says so) until it is freed.
    state_->drop(seq, n_keep == 0 ? -1 : n_keep);
    const bool back = n_keep == 0 || state_->has(seq, n_keep);
    if (n_keep > 0 && back) state_->restore(seq, n_keep, seq);
    state_valid_[size_t(seq)] = back;
  }
  pool_.seq_tail[size_t(seq)] = keep_range(pool_, seq, 0, n_keep);
  if (local_.total() > 0) {
    local_.seq_tail[size_t(seq)] = keep_range(local_, seq, 0, n_keep);
    // Cut back past what it still holds there, the sequence cannot go on
    // (place() says so) until it is freed.
    local_valid_[size_t(seq)] = local_cells_below(seq, n_keep) == window_cells(n_keep);
  }
  seq_len_[size_t(seq)] = n_keep;
}

void KvCache::trim_windows(const Batch& batch) {
  if (local_.total() == 0) return;
  SeqSet done;
  for (const BatchRow& row : batch.rows) {
    if (!valid_seq(row.seq) || done.test(size_t(row.seq))) continue;
    done.set(size_t(row.seq));
    const int len = seq_len_[size_t(row.seq)];
    local_.seq_tail[size_t(row.seq)] = keep_range(local_, row.seq, len - window_cells(len), len);
  }
}

Status KvCache::seq_copy_prefix(SeqId src, SeqId dst, int n) {
  if (!valid_seq(src) || !valid_seq(dst)) {
    return errorf("invalid_argument", "sequence ids must be 0..{}, got {} and {}", n_seq_max_ - 1, src, dst);
  }
  if (src == dst) return errorf("invalid_argument", "cannot copy sequence {} onto itself", src);
  if (seq_len_[size_t(dst)] != 0) return errorf("invalid_argument", "sequence {} is not empty", dst);
  if (n < 0 || n > seq_len_[size_t(src)]) {
    return errorf("invalid_argument", "sequence {} holds {} positions, cannot copy {}", src,
                  seq_len_[size_t(src)], n);
  }
  const int from = n - window_cells(n);  // local pool: the window before position n
  if (local_.total() > 0 && n > 0 &&
      (!local_valid_[size_t(src)] || local_cells_below(src, n) - local_cells_below(src, from) != n - from)) {
    return errorf("invalid_argument",
                  "sequence {} no longer holds the sliding window before position {} (its length {})", src, n,
                  seq_len_[size_t(src)]);
  }
  if (state_ && n > 0) {
    const bool whole = n == seq_len_[size_t(src)] && state_valid_[size_t(src)];
    if (!whole && !state_->has(src, n)) {
      return errorf("invalid_argument",
                    "sequence {} has no recurrent state at position {} (its length {} or a snapshot)", src, n,
                    seq_len_[size_t(src)]);
    }
    if (whole) {
      state_->copy(src, dst);
    } else {
      state_->restore(src, n, dst);
    }
    state_valid_[size_t(dst)] = true;
  }
  auto share = [&](Pool& pool, int lo) {
    int tail = -1;
    for (int i = 0; i < pool.used_end; ++i) {
      Cell& c = pool.cells[size_t(i)];
      if (c.seqs.test(size_t(src)) && c.pos >= lo && c.pos < n) {
        c.seqs.set(size_t(dst));
        if (c.pos == n - 1) tail = i;
      }
    }
    pool.seq_tail[size_t(dst)] = tail;
  };
  share(pool_, 0);
  if (local_.total() > 0) {
    share(local_, from);
    local_valid_[size_t(dst)] = true;
  }
  seq_len_[size_t(dst)] = n;
  return {};
}

Status KvCache::seq_snapshot(SeqId seq) {
  if (!state_) return errorf("invalid_argument", "the model keeps no recurrent state to snapshot");
  if (!valid_seq(seq) || seq_len_[size_t(seq)] == 0 || !state_valid_[size_t(seq)]) {
    return errorf("invalid_argument", "sequence {} has no state to snapshot", seq);
  }
  return state_->save(seq, seq_len_[size_t(seq)]);
}

void KvCache::seq_drop_snapshots(SeqId seq) {
  if (state_ && valid_seq(seq)) state_->drop(seq, -1);
}

std::vector<int> KvCache::seq_snapshots(SeqId seq) const {
  return state_ && valid_seq(seq) ? state_->positions(seq) : std::vector<int>{};
}

void KvCache::clear() {
  if (state_) {
    state_->drop_all();
    std::fill(state_valid_.begin(), state_valid_.end(), true);
  }
  for (Pool* pool : {&pool_, &local_}) {
    for (Cell& c : pool->cells) c = Cell{};
    std::fill(pool->seq_tail.begin(), pool->seq_tail.end(), -1);
    pool->n_used = 0;
    pool->used_end = 0;
  }
  std::fill(seq_len_.begin(), seq_len_.end(), 0);
  std::fill(local_valid_.begin(), local_valid_.end(), true);
}

int KvCache::padded_n_kv() const {
  const int padded = std::max(kWindowPad, (pool_.used_end + kWindowPad - 1) / kWindowPad * kWindowPad);
  return std::min(padded, cells_total());
}

Result<KvCache::Placement> KvCache::place(const Batch& batch) {
  const int n = int(batch.size());
  if (n == 0) return errorf("invalid_argument", "empty batch");
  // Positions must continue each sequence, in row order.
  std::vector<int> next(seq_len_);
  for (int r = 0; r < n; ++r) {
    const BatchRow& row = batch.rows[size_t(r)];
    if (!valid_seq(row.seq)) {
      return errorf("invalid_argument", "row {}: sequence id {} is outside 0..{}", r, row.seq,
                    n_seq_max_ - 1);
    }
    if (row.pos != next[size_t(row.seq)]) {
      return errorf("invalid_argument", "row {}: sequence {} continues at position {}, not {}", r, row.seq,
                    next[size_t(row.seq)], row.pos);
    }
    if (!local_valid_[size_t(row.seq)]) {
      return errorf("invalid_argument",
                    "sequence {} was cut back to a position whose sliding window it no longer holds",
                    row.seq);
    }
    ++next[size_t(row.seq)];
  }
  if (n > cells_free()) {
    return errorf("kv_cache_full", "the KV cache has {} free cells, the batch needs {}", cells_free(), n);
  }
  if (!can_fit(n)) {
    return errorf("kv_cache_full", "the sliding-window KV pool has {} free cells, the batch needs {}",
                  local_.total() - local_.n_used, n);
  }
  Placement placement;
  if (state_) {
    GRAFT_TRY(placement.state_groups, state_groups_for(batch));
    for (const StateGroup& group : placement.state_groups) {
      for (SeqId seq : group.seqs) {
        if (seq_len_[size_t(seq)] == 0) {  // a new sequence starts from the zero state
          state_->reset(seq);
          state_valid_[size_t(seq)] = true;
        }
      }
    }
  }
  place_rows(pool_, batch, placement.cells);
  if (local_.total() > 0) place_rows(local_, batch, placement.local_cells);
  seq_len_ = std::move(next);
  placement.n_kv = padded_n_kv();
  placement.windows = windows_for(pool_, batch);
  if (local_.total() > 0) placement.local_windows = windows_for(local_, batch);
  return placement;
}

void KvCache::place_rows(Pool& pool, const Batch& batch, std::vector<int64_t>& cells) {
  const int n = int(batch.size());
  cells.resize(size_t(n));
  int scattered = 0;  // where the search for single free cells goes on
  for (int r = 0; r < n;) {
    // A run of rows of one sequence.
    const SeqId seq = batch.rows[size_t(r)].seq;
    int end = r + 1;
    while (end < n && batch.rows[size_t(end)].seq == seq) ++end;
    const int m = end - r;
    int start = -1;
    const int tail = pool.seq_tail[size_t(seq)];
    if (tail >= 0 && tail + m < pool.total()) {
      start = tail + 1;
      for (int i = start; i < start + m; ++i) {
        if (!pool.cells[size_t(i)].free()) {
          start = -1;
          break;
        }
      }
    }
    if (start < 0) start = tail >= 0 ? find_free_run(pool, m, tail + 1) : place_new_sequence(pool, m);
    for (int k = 0; k < m; ++k) {
      int cell = start;
      if (start >= 0) {
        cell = start + k;
      } else {  // no run long enough: any free cells
        while (!pool.cells[size_t(scattered)].free()) ++scattered;
        cell = scattered;
      }
      const BatchRow& row = batch.rows[size_t(r + k)];
      Cell& c = pool.cells[size_t(cell)];
      c.pos = row.pos;
      c.seqs.set(size_t(row.seq));
      ++pool.n_used;
      pool.used_end = std::max(pool.used_end, cell + 1);
      cells[size_t(r + k)] = cell;
      pool.seq_tail[size_t(seq)] = cell;
    }
    r = end;
  }
}

Result<std::vector<KvCache::StateGroup>> KvCache::state_groups_for(const Batch& batch) const {
  std::vector<StateGroup> groups;
  std::vector<bool> seen(size_t(n_seq_max_), false);
  const int n = int(batch.size());
  for (int r = 0; r < n;) {
    const SeqId seq = batch.rows[size_t(r)].seq;
    int end = r + 1;
    while (end < n && batch.rows[size_t(end)].seq == seq) ++end;
    if (seen[size_t(seq)]) {
      return errorf("invalid_argument",
                    "row {}: sequence {} has rows apart in the batch (a recurrent state "
                    "takes each sequence's rows as one run)",
                    r, seq);
    }
    seen[size_t(seq)] = true;
    if (!state_valid_[size_t(seq)] && seq_len_[size_t(seq)] > 0) {
      return errorf("invalid_argument",
                    "sequence {} was cut back to a position without a recurrent state snapshot", seq);
    }
    const int len = end - r;
    if (!groups.empty() && groups.back().n_tokens == len) {
      groups.back().n_seqs++;
      groups.back().seqs.push_back(seq);
    } else {
      groups.push_back(StateGroup{r, 1, len, {seq}});
    }
    r = end;
  }
  return groups;
}

int KvCache::find_free_run(const Pool& pool, int n, int from) {
  // From `from` to the end, then from the start.
  for (const auto& [begin, end] : {std::pair{from, pool.total()}, std::pair{0, from}}) {
    int run = 0;
    for (int i = begin; i < end; ++i) {
      run = pool.cells[size_t(i)].free() ? run + 1 : 0;
      if (run == n) return i - n + 1;
    }
  }
  return -1;
}

int KvCache::place_new_sequence(const Pool& pool, int n) {
  // The longest free run.
  int best_begin = -1, best_len = 0;
  for (int i = 0; i < pool.total();) {
    if (!pool.cells[size_t(i)].free()) {
      ++i;
      continue;
    }
    int j = i;
    while (j < pool.total() && pool.cells[size_t(j)].free()) ++j;
    if (j - i > best_len) {
      best_begin = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < n) return -1;
  // A run at the very start has no sequence before it that grows into it.
  if (best_begin == 0) return 0;
  // Halfway, so the sequence before it and this one both have room to grow,
  // on a window boundary (kWindowPad) when one lies close enough.
  const int mid = best_begin + (best_len - n) / 2;
  const int down = mid / kWindowPad * kWindowPad;
  if (down >= best_begin) return down;
  if (down + kWindowPad + n <= best_begin + best_len) return down + kWindowPad;
  return mid;
}

std::vector<KvCache::Window> KvCache::windows_for(const Pool& pool, const Batch& batch) const {
  constexpr int kMaxWindows = 16;
  // Each sequence's cells: [lo, hi).
  std::vector<SeqId> seqs;
  for (const BatchRow& row : batch.rows) {
    if (std::find(seqs.begin(), seqs.end(), row.seq) == seqs.end()) seqs.push_back(row.seq);
  }
  std::vector<int> lo(seqs.size(), pool.total()), hi(seqs.size(), 0);
  for (int j = 0; j < pool.used_end; ++j) {
    const Cell& c = pool.cells[size_t(j)];
    if (c.free()) continue;
    for (size_t k = 0; k < seqs.size(); ++k) {
      if (c.seqs.test(size_t(seqs[k]))) {
        lo[k] = std::min(lo[k], j);
        hi[k] = j + 1;
      }
    }
  }
  // Consecutive rows share a window unless keeping them apart scans fewer
  // cells: each window costs about as much as scanning this many
  // (row, cell) pairs more (an attention op per layer, and joining its
  // output). Decode rows of sequences far apart in the cache are thus
  // computed one window each, rather than over every cell between them
  // (bench/engine.sh measures batched decode).
  constexpr int64_t kWindowCost = 128;
  auto cost = [](int64_t rows, int64_t cells) { return rows * cells; };
  std::vector<Window> windows;
  for (int r = 0; r < int(batch.size()); ++r) {
    const size_t k = size_t(std::find(seqs.begin(), seqs.end(), batch.rows[size_t(r)].seq) - seqs.begin());
    const int begin = lo[k] / kWindowPad * kWindowPad;
    const int end = std::min(pool.total(), (hi[k] + kWindowPad - 1) / kWindowPad * kWindowPad);
    if (!windows.empty()) {
      Window& w = windows.back();
      const int merged_begin = std::min(w.cell_begin, begin);
      const int merged_end = std::max(w.cell_begin + w.n_cells, end);
      // This row's run: the rest of its sequence's rows that follow.
      int run = 1;
      while (r + run < int(batch.size()) && batch.rows[size_t(r + run)].seq == batch.rows[size_t(r)].seq)
        ++run;
      const bool same_seq = batch.rows[size_t(r - 1)].seq == batch.rows[size_t(r)].seq;
      const int64_t apart = cost(w.n_rows, w.n_cells) + cost(run, end - begin) + kWindowCost;
      const int64_t together = cost(w.n_rows + run, merged_end - merged_begin);
      if (same_seq || together <= apart || int(windows.size()) == kMaxWindows) {
        w.cell_begin = merged_begin;
        w.n_cells = merged_end - merged_begin;
        w.n_rows += run;
        r += run - 1;
        continue;
      }
    }
    windows.push_back(Window{r, 1, begin, end - begin});
  }
  return windows;
}

void KvCache::fill_mask(const Batch& batch, int n_kv, ggml_fp16_t* mask) const {
  fill_mask(batch, Window{0, int(batch.size()), 0, n_kv}, mask);
}

void KvCache::fill_mask(const Batch& batch, const Window& window, ggml_fp16_t* mask) const {
  fill_pool_mask(pool_, batch, window, 0, mask);
}

void KvCache::fill_sliding_mask(const Batch& batch, const Window& window, int sliding_window,
                                ggml_fp16_t* mask) const {
  fill_pool_mask(pool_, batch, window, sliding_window, mask);
}

void KvCache::fill_local_mask(const Batch& batch, const Window& window, ggml_fp16_t* mask) const {
  fill_pool_mask(local_, batch, window, window_, mask);
}

void KvCache::fill_pool_mask(const Pool& pool, const Batch& batch, const Window& window, int sliding_window,
                             ggml_fp16_t* mask) const {
  const ggml_fp16_t keep = ggml_fp32_to_fp16(0.0f);
  const ggml_fp16_t drop = ggml_fp32_to_fp16(-INFINITY);
  const int width = window.n_cells;
  const int first = window.cell_begin;
  // Cells [first, first + in_use) may hold something; the rest is padding.
  const int in_use = std::clamp(pool.used_end - first, 0, width);
  for (int i = 0; i < window.n_rows; ++i) {
    const int r = window.row_begin + i;
    const BatchRow& row = batch.rows[size_t(r)];
    ggml_fp16_t* m = mask + size_t(i) * size_t(width);
    // Rows of the same sequence differ only in the causal cut (and the
    // window's start): start from the previous one.
    if (i > 0 && batch.rows[size_t(r - 1)].seq == row.seq && batch.rows[size_t(r - 1)].pos < row.pos) {
      std::copy(m - width, m, m);
      const int32_t lo = batch.rows[size_t(r - 1)].pos;
      const int32_t oldest = sliding_window > 0 ? row.pos - sliding_window : INT32_MIN;
      for (int j = 0; j < in_use; ++j) {
        const Cell& c = pool.cells[size_t(first + j)];
        if (c.pos > lo && c.pos <= row.pos && c.seqs.test(size_t(row.seq))) m[j] = keep;
        if (c.pos <= oldest) m[j] = drop;
      }
      continue;
    }
    const int32_t oldest = sliding_window > 0 ? row.pos - sliding_window : INT32_MIN;
    for (int j = 0; j < in_use; ++j) {
      const Cell& c = pool.cells[size_t(first + j)];
      m[j] = (c.seqs.test(size_t(row.seq)) && c.pos <= row.pos && c.pos > oldest) ? keep : drop;
    }
    std::fill(m + in_use, m + width, drop);
  }
}

std::vector<AttentionInputs::Layer> KvCache::layer_tensors() const {
  return layers_;
}

}  // namespace graft
