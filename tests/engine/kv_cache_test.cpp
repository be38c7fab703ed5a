#include "engine/kv_cache.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "testing/test_models.h"

namespace graft {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 32;
  c.n_embd = 128;
  return c;
}

std::unique_ptr<KvCache> make_cache(int n_cells, int n_seq = 4, ggml_type type = GGML_TYPE_F16) {
  KvCacheOptions o;
  o.n_cells = n_cells;
  o.n_seq_max = n_seq;
  o.type = type;
  auto cache = KvCache::create(small_config(), o);
  EXPECT_TRUE(cache.ok());
  return cache.ok() ? std::move(*cache) : nullptr;
}

Batch rows(SeqId seq, int from, int n) {
  Batch b;
  for (int i = 0; i < n; ++i) b.rows.push_back({1, from + i, seq, false, {}});
  return b;
}

TEST(KvCache, SizesFollowTheModelAndType) {
  auto f16 = make_cache(100);
  EXPECT_EQ(f16->bytes_per_token(), size_t(2 * 2 * 64 * 2));  // layers x (K+V) x n_embd_kv x 2 bytes
  EXPECT_GE(f16->bytes_total(), 100 * f16->bytes_per_token());
  auto q8 = make_cache(100, 4, GGML_TYPE_Q8_0);
  auto q4 = make_cache(100, 4, GGML_TYPE_Q4_0);
  // 34 and 18 bytes per block of 32 against 64.
  EXPECT_EQ(q8->bytes_per_token() * 64, f16->bytes_per_token() * 34);
  EXPECT_EQ(q4->bytes_per_token() * 64, f16->bytes_per_token() * 18);
  EXPECT_EQ(f16->cells_total(), 100);
}

TEST(KvCache, PlacesRowsAndTracksSequences) {
  auto cache = make_cache(64);
  ASSERT_TRUE(cache->place(rows(0, 0, 5)).ok());
  ASSERT_TRUE(cache->place(rows(1, 0, 3)).ok());
  EXPECT_EQ(cache->seq_length(0), 5);
  EXPECT_EQ(cache->seq_length(1), 3);
  EXPECT_EQ(cache->cells_used(), 8);
  EXPECT_TRUE(cache->can_fit(56));
  EXPECT_FALSE(cache->can_fit(57));
}

TEST(KvCache, RejectsPositionGapsUnknownSequencesAndOverflow) {
  auto cache = make_cache(8, 2);
  ASSERT_TRUE(cache->place(rows(0, 0, 3)).ok());
  auto gap = cache->place(rows(0, 4, 1));
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.error().message.find("continues at position 3"), std::string::npos) << gap.error().message;
  EXPECT_FALSE(cache->place(rows(2, 0, 1)).ok());
  auto full = cache->place(rows(1, 0, 6));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, "kv_cache_full");
  // Failed placements changed nothing.
  EXPECT_EQ(cache->cells_used(), 3);
  EXPECT_EQ(cache->seq_length(1), 0);
}

TEST(KvCache, FreeAndTruncateReturnCells) {
  auto cache = make_cache(32);
  ASSERT_TRUE(cache->place(rows(0, 0, 10)).ok());
  cache->seq_truncate(0, 4);
  EXPECT_EQ(cache->seq_length(0), 4);
  EXPECT_EQ(cache->cells_used(), 4);
  ASSERT_TRUE(cache->place(rows(0, 4, 2)).ok());  // continues at the kept length
  cache->seq_free(0);
  EXPECT_EQ(cache->seq_length(0), 0);
  EXPECT_EQ(cache->cells_used(), 0);
}

TEST(KvCache, CopyPrefixSharesCells) {
  auto cache = make_cache(32);
  ASSERT_TRUE(cache->place(rows(0, 0, 10)).ok());
  ASSERT_TRUE(cache->seq_copy_prefix(0, 1, 6).ok());
  EXPECT_EQ(cache->seq_length(1), 6);
  EXPECT_EQ(cache->cells_used(), 10);  // shared, not copied
  cache->seq_free(0);
  EXPECT_EQ(cache->cells_used(), 6);  // sequence 1 still holds its prefix
  cache->seq_free(1);
  EXPECT_EQ(cache->cells_used(), 0);
  EXPECT_FALSE(cache->seq_copy_prefix(0, 1, 3).ok());  // source too short now
}

TEST(KvCache, MaskLetsRowsSeeOnlyTheirSequenceUpToTheirPosition) {
  auto cache = make_cache(16);
  Batch a = rows(0, 0, 3);
  ASSERT_TRUE(cache->place(a).ok());
  Batch b = rows(1, 0, 2);
  auto placement = cache->place(b);
  ASSERT_TRUE(placement.ok());
  std::vector<ggml_fp16_t> mask(size_t(placement->n_kv) * 2);
  cache->fill_mask(b, placement->n_kv, mask.data());
  auto visible = [&](int row, int cell) {
    return ggml_fp16_to_fp32(mask[size_t(row * placement->n_kv + cell)]) == 0.0f;
  };
  // Sequence 0 holds cells 0-2; sequence 1 starts halfway into the free
  // cells after them, at positions 0 and 1.
  const int c0 = int(placement->cells[0]), c1 = int(placement->cells[1]);
  EXPECT_EQ(c0, 8);
  EXPECT_EQ(c1, 9);
  for (int cell = 0; cell < placement->n_kv; ++cell) {
    EXPECT_EQ(visible(0, cell), cell == c0) << cell;  // causal: not its own position 1
    EXPECT_EQ(visible(1, cell), cell == c0 || cell == c1) << cell;
  }
}

// Sliding-window layers: each row sees the last W positions of its own
// sequence only, in a batch mixing a prompt chunk of one sequence with a
// decode row of another.
TEST(KvCache, SlidingMaskKeepsTheLastWindowOfEachRowsSequence) {
  constexpr int kWindow = 3;
  auto cache = make_cache(64);
  ASSERT_TRUE(cache->place(rows(0, 0, 6)).ok());
  Batch b = rows(1, 0, 5);
  b.rows.push_back({1, 6, 0, true, {}});  // sequence 0's next position
  auto placement = cache->place(b);
  ASSERT_TRUE(placement.ok());
  const int n_kv = placement->n_kv;
  const KvCache::Window all{0, int(b.size()), 0, n_kv};
  std::vector<ggml_fp16_t> full(size_t(n_kv) * b.size()), sliding(full.size());
  cache->fill_mask(b, all, full.data());
  cache->fill_sliding_mask(b, all, kWindow, sliding.data());
  // The cell of each (sequence, position): sequence 0 at positions 0..5 in
  // cells 0..5 and 6 where its decode row went; sequence 1 where placed.
  auto seq_pos = [&](int cell, SeqId& seq, int& pos) {
    for (size_t r = 0; r < b.size(); ++r) {
      if (placement->cells[r] == cell) {
        seq = b.rows[r].seq;
        pos = b.rows[r].pos;
        return true;
      }
    }
    if (cell < 6) {
      seq = 0;
      pos = cell;
      return true;
    }
    return false;
  };
  for (size_t r = 0; r < b.size(); ++r) {
    const BatchRow& row = b.rows[r];
    for (int cell = 0; cell < n_kv; ++cell) {
      SeqId seq = -1;
      int pos = -1;
      const bool held = seq_pos(cell, seq, pos);
      const bool causal = held && seq == row.seq && pos <= row.pos;
      const bool windowed = causal && row.pos - pos < kWindow;
      const size_t i = r * size_t(n_kv) + size_t(cell);
      EXPECT_EQ(ggml_fp16_to_fp32(full[i]) == 0.0f, causal) << "row " << r << " cell " << cell;
      EXPECT_EQ(ggml_fp16_to_fp32(sliding[i]) == 0.0f, windowed) << "row " << r << " cell " << cell;
    }
  }
}

// Rows attend over windows of cells around their own sequences, so a long
// sequence that is not in the batch (a cached prefix) costs them nothing.
TEST(KvCache, WindowsLeaveOutCellsOfOtherSequences) {
  auto cache = make_cache(2048);
  ASSERT_TRUE(cache->place(rows(0, 0, 10)).ok());  // cells 0-9
  auto cached = cache->place(rows(1, 0, 600));     // not in the batches below
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(cached->cells[0], 512);  // halfway into 10-2047, on a window boundary
  Batch b = rows(2, 0, 10);
  auto alone = cache->place(b);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->cells[0], 1536);  // halfway into 1112-2047
  ASSERT_EQ(alone->windows.size(), 1u);
  EXPECT_EQ(alone->windows[0], (KvCache::Window{0, 10, 1536, 256}));

  // One decode row of sequence 0 (right after its last cell) and a prompt
  // chunk of sequence 3 (halfway into the longest free run, 1546-2047): two
  // windows of 256 cells instead of one over all 2048.
  Batch mixed;
  mixed.rows.push_back({1, 10, 0, true, {}});
  for (int i = 0; i < 20; ++i) mixed.rows.push_back({1, i, 3, i == 19, {}});
  auto placement = cache->place(mixed);
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(placement->cells[0], 10);
  EXPECT_EQ(placement->cells[1], 1792);
  ASSERT_EQ(placement->windows.size(), 2u);
  EXPECT_EQ(placement->windows[0], (KvCache::Window{0, 1, 0, 256}));
  EXPECT_EQ(placement->windows[1], (KvCache::Window{1, 20, 1792, 256}));
  // Every row sees exactly what it sees over all cells.
  const int n_kv = placement->n_kv;
  std::vector<ggml_fp16_t> whole(size_t(n_kv) * mixed.size());
  cache->fill_mask(mixed, n_kv, whole.data());
  for (const KvCache::Window& w : placement->windows) {
    std::vector<ggml_fp16_t> part(size_t(w.n_cells) * size_t(w.n_rows));
    cache->fill_mask(mixed, w, part.data());
    for (int i = 0; i < w.n_rows; ++i) {
      for (int cell = 0; cell < n_kv; ++cell) {
        const bool inside = cell >= w.cell_begin && cell < w.cell_begin + w.n_cells;
        const float want = ggml_fp16_to_fp32(whole[size_t(w.row_begin + i) * size_t(n_kv) + size_t(cell)]);
        if (!inside) {
          EXPECT_EQ(want, -INFINITY) << "row " << w.row_begin + i << " would miss cell " << cell;
          continue;
        }
        EXPECT_EQ(ggml_fp16_to_fp32(part[size_t(i) * size_t(w.n_cells) + size_t(cell - w.cell_begin)]), want);
      }
    }
  }
}

TEST(KvCache, ASequenceContinuesRightAfterItsLastCell) {
  auto cache = make_cache(64);
  // The cell a batch's first row goes to.
  auto first_cell = [&](const Batch& batch) {
    auto placement = cache->place(batch);
    EXPECT_TRUE(placement.ok());
    return placement.ok() ? placement->cells[0] : -1;
  };
  EXPECT_EQ(first_cell(rows(0, 0, 4)), 0);   // an empty cache fills from the start
  EXPECT_EQ(first_cell(rows(1, 0, 4)), 32);  // halfway into 4-63
  cache->seq_free(0);
  EXPECT_EQ(first_cell(rows(1, 4, 1)), 36);  // right after its last cell, not in the hole at 0
  // A new prompt takes the longest free run: 0-31, which nothing before it grows into.
  EXPECT_EQ(first_cell(rows(2, 0, 6)), 0);
  EXPECT_EQ(first_cell(rows(3, 0, 3)), 49);  // halfway into 37-63
  // Sequence 1 grows into cells 37-48; 13 more rows do not fit there and go
  // to the next free run long enough, wrapping around: 6-31.
  EXPECT_EQ(first_cell(rows(1, 5, 12)), 37);
  EXPECT_EQ(first_cell(rows(1, 17, 13)), 6);
}

// Sequences placed one after another each grow inside their own window, as
// llama.cpp's per-sequence cache streams do: 8 decode rows over 128-token
// prompts scan 256 cells each, not the whole cache.
TEST(KvCache, NewSequencesLeaveEachOtherRoomToGrow) {
  auto cache = make_cache(4096, 16);
  for (int n_seq : {8, 16}) {
    cache->clear();
    for (SeqId s = 0; s < n_seq; ++s) ASSERT_TRUE(cache->place(rows(s, 0, 128)).ok());
    for (int step = 0; step < 128; ++step) {
      Batch b;
      for (SeqId s = 0; s < n_seq; ++s) b.rows.push_back({1, 128 + step, s, true, {}});
      auto placement = cache->place(b);
      ASSERT_TRUE(placement.ok());
      int scanned = 0;
      for (const KvCache::Window& w : placement->windows) scanned += w.n_rows * w.n_cells;
      ASSERT_EQ(scanned, n_seq * 256) << n_seq << " sequences, step " << step;
    }
  }
}

// A batch whose rows attend over two windows gives the logits each row gets alone.
TEST(KvCache, WindowedBatchEqualsEachRowAlone) {
  const std::string model = testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16"));
  const std::vector<TokenId> p0 = {128000, 791, 4062, 14198, 39935};
  const std::vector<TokenId> p1 = {128000, 12805, 5304, 264, 892, 11, 304};
  auto single = testing::open_engine(model, 2048, 4);
  ASSERT_TRUE(single.forward);
  std::vector<std::vector<float>> want0, want1;
  const auto t0 = testing::greedy(single, p0, 2, 0, &want0);
  single.cache->clear();
  testing::greedy(single, p1, 1, 1, &want1);

  auto e = testing::open_engine(model, 2048, 4);
  std::vector<std::vector<float>> first;
  ASSERT_EQ(testing::greedy(e, p0, 1, 0, &first)[0], t0[0]);
  Batch filler;  // 600 cells of a sequence the batch below leaves out
  for (int i = 0; i < 600; ++i) filler.rows.push_back({TokenId(1000 + i % 50), i, 2, false, {}});
  ASSERT_TRUE(e.forward->run(filler).ok());
  Batch mixed;
  mixed.rows.push_back({t0[0], int(p0.size()), 0, true, {}});
  for (size_t i = 0; i < p1.size(); ++i) mixed.rows.push_back({p1[i], int(i), 1, i + 1 == p1.size(), {}});
  auto out = e.forward->run(mixed);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->n_rows, 2);
  auto worst = [&](const float* got, const std::vector<float>& want) {
    float top = 0, diff = 0;
    for (size_t v = 0; v < want.size(); ++v) {
      top = std::max(top, std::fabs(want[v]));
      diff = std::max(diff, std::fabs(want[v] - got[v]));
    }
    return diff / top;
  };
  EXPECT_LE(worst(out->row(0), want0[1]), 1e-3f);
  EXPECT_LE(worst(out->row(1), want1[0]), 1e-3f);
}

// Generation after copying a prefix equals generation from scratch.
TEST(KvCache, PrefixCopyContinuesLikeAFreshSequence) {
  auto e =
      testing::open_engine(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")), 512, 4);
  ASSERT_TRUE(e.forward);
  const std::vector<TokenId> prefix = {128000, 791, 4062, 14198, 39935, 35308, 927};
  const std::vector<TokenId> tail = {279, 16053};
  std::vector<TokenId> full = prefix;
  full.insert(full.end(), tail.begin(), tail.end());
  const auto fresh = testing::greedy(e, full, 8, 0);
  testing::greedy(e, prefix, 1, 1);  // sequence 1 holds the prefix (+1 generated token)
  ASSERT_TRUE(e.cache->seq_copy_prefix(1, 2, int(prefix.size())).ok());
  const auto reused = testing::greedy(e, tail, 8, 2);  // continues after the shared prefix
  EXPECT_EQ(reused, fresh);
}

class QuantizedKv : public ::testing::TestWithParam<ggml_type> {};

TEST_P(QuantizedKv, CacheGenerates) {
  auto model = Model::load(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")));
  ASSERT_TRUE(model.ok());
  KvCacheOptions o;
  o.n_cells = 256;
  o.type = GetParam();
  auto cache = KvCache::create((*model)->config(), o);
  ASSERT_TRUE(cache.ok()) << cache.error().message;
  Forward forward(**model, **cache, 2);
  Batch b;
  for (int i = 0; i < 4; ++i) b.rows.push_back({TokenId(100 + i), i, 0, i == 3, {}});
  auto r = forward.run(b);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->n_rows, 1);
}
INSTANTIATE_TEST_SUITE_P(KvCache, QuantizedKv, ::testing::Values(GGML_TYPE_Q8_0, GGML_TYPE_Q4_0),
                         [](const ::testing::TestParamInfo<ggml_type>& info) {
                           return std::string(ggml_type_name(info.param));
                         });

TEST(KvCache, TypeNames) {
  EXPECT_EQ(*KvCache::type_from_name("f16"), GGML_TYPE_F16);
  EXPECT_EQ(*KvCache::type_from_name("q8_0"), GGML_TYPE_Q8_0);
  EXPECT_EQ(*KvCache::type_from_name("q4_0"), GGML_TYPE_Q4_0);
  auto bad = KvCache::type_from_name("f32");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'f32'"), std::string::npos) << bad.error().message;
}

TEST(ForwardErrors, BadBatchesAreRejectedAndChangeNothing) {
  auto e =
      testing::open_engine(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")), 256, 2);
  ASSERT_TRUE(e.forward);
  Batch empty;
  auto r = e.forward->run(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("empty batch"), std::string::npos);
  Batch bad_token;
  bad_token.rows.push_back({-1, 0, 0, true, {}});
  bad_token.rows.push_back({1 << 30, 1, 0, true, {}});
  r = e.forward->run(bad_token);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("outside the vocabulary"), std::string::npos);
  Batch bad_adapter;
  BatchRow row{5, 0, 0, true, {}};
  row.adapters.n = 1;
  row.adapters.slot[0] = 3;
  row.adapters.scale[0] = 1.0f;
  bad_adapter.rows.push_back(row);
  r = e.forward->run(bad_adapter);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no adapter is mounted in slot 3"), std::string::npos);
  EXPECT_EQ(e.cache->cells_used(), 0);
  EXPECT_EQ(testing::greedy(e, {128000, 9906}, 2).size(), 2u);  // still works
}

// Sliding-window layers in a pool of their own: a model of a local and a
// global layer, window 4 (a row sees its position and the 3 before).
ModelConfig sliding_config() {
  ModelConfig c = small_config();
  c.sliding_window = 4;
  c.sliding = {true, false};
  return c;
}

std::unique_ptr<KvCache> make_split_cache(int n_cells, int n_local, int n_seq = 4) {
  KvCacheOptions o;
  o.n_cells = n_cells;
  o.n_local_cells = n_local;
  o.n_seq_max = n_seq;
  auto cache = KvCache::create(sliding_config(), o);
  EXPECT_TRUE(cache.ok()) << (cache.ok() ? "" : cache.error().message);
  return cache.ok() ? std::move(*cache) : nullptr;
}

TEST(KvCacheWindows, BudgetSplitHoldsMoreTokensThanOnePool) {
  const ModelConfig c = sliding_config();
  EXPECT_EQ(sliding_kv_bytes_per_token(c, GGML_TYPE_F16) * 2, kv_bytes_per_token(c, GGML_TYPE_F16));
  // 1000 tokens' worth, contexts of 200, up to 8 sequences, batches of 16:
  // 8 windows of 3 and a batch locally, the rest of the memory global.
  const KvSplit split = split_kv_budget(c, GGML_TYPE_F16, 1000, 200, 8, 16);
  EXPECT_EQ(split.local_cells, 8 * 3 + 16);
  EXPECT_EQ(split.max_sequences, 8);
  EXPECT_EQ(split.global_cells, 2 * 1000 - (8 * 3 + 16));
  // Without sliding layers: one pool.
  EXPECT_EQ(split_kv_budget(small_config(), GGML_TYPE_F16, 1000, 200, 8, 16).local_cells, 0);
}

// A sequence keeps only its window in the local pool, all of its positions
// in the global one; the local pool's cells come round again.
TEST(KvCacheWindows, ASequenceKeepsOnlyItsWindowLocally) {
  auto cache = make_split_cache(256, 2 * 3 + 8, 2);
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->local_cells_total(), 14);
  EXPECT_EQ(cache->local_bytes_per_cell(), cache->bytes_per_token());  // one layer each
  Batch prompt = rows(0, 0, 8);
  ASSERT_TRUE(cache->place(prompt).ok());
  EXPECT_EQ(cache->local_cells_used(), 8);
  cache->trim_windows(prompt);
  EXPECT_EQ(cache->local_cells_used(), 3);
  for (int pos = 8; pos < 100; ++pos) {  // two sequences decoding side by side
    Batch b = rows(0, pos, 1);
    b.rows.push_back({1, pos - 8, 1, true, {}});
    auto placement = cache->place(b);
    ASSERT_TRUE(placement.ok()) << placement.error().message;
    ASSERT_EQ(placement->local_cells.size(), 2u);
    cache->trim_windows(b);
    ASSERT_LE(cache->local_cells_used(), 6) << "position " << pos;
  }
  EXPECT_EQ(cache->cells_used(), 100 + 92);
  EXPECT_EQ(cache->seq_length(0), 100);
  // A batch larger than the local pool's free cells is refused.
  EXPECT_FALSE(cache->place(rows(0, 100, 9)).ok());
  EXPECT_TRUE(cache->place(rows(0, 100, 8)).ok());
}

// Each local row sees exactly the positions of its own sequence within its window.
TEST(KvCacheWindows, LocalMaskKeepsTheWindow) {
  constexpr int kWindow = 4;
  auto cache = make_split_cache(256, 64, 2);
  Batch first = rows(0, 0, 9);
  ASSERT_TRUE(cache->place(first).ok());
  cache->trim_windows(first);
  Batch b = rows(1, 0, 6);
  b.rows.push_back({1, 9, 0, true, {}});
  auto placement = cache->place(b);
  ASSERT_TRUE(placement.ok());
  // Where each (sequence, position) lies in the local pool.
  std::map<int, std::pair<SeqId, int>> at;
  for (size_t r = 0; r < b.size(); ++r) at[int(placement->local_cells[r])] = {b.rows[r].seq, b.rows[r].pos};
  // Sequence 0's window before position 9: positions 6..8, somewhere in the pool.
  for (const KvCache::Window& w : placement->local_windows) {
    std::vector<ggml_fp16_t> mask(size_t(w.n_cells) * size_t(w.n_rows));
    cache->fill_local_mask(b, w, mask.data());
    for (int i = 0; i < w.n_rows; ++i) {
      const BatchRow& row = b.rows[size_t(w.row_begin + i)];
      int seen = 0;
      for (int j = 0; j < w.n_cells; ++j) {
        if (ggml_fp16_to_fp32(mask[size_t(i) * size_t(w.n_cells) + size_t(j)]) != 0.0f) continue;
        ++seen;
        auto it = at.find(w.cell_begin + j);
        if (it != at.end()) {
          EXPECT_EQ(it->second.first, row.seq);
          EXPECT_LE(it->second.second, row.pos);
          EXPECT_GT(it->second.second, row.pos - kWindow);
        }
      }
      EXPECT_EQ(seen, std::min(row.pos + 1, kWindow)) << "row " << w.row_begin + i;
    }
  }
}

// A prefix copy needs the window before its end: whole sequences always,
// a part of one only while the sequence is within the window.
TEST(KvCacheWindows, PrefixCopiesNeedTheirWindow) {
  auto cache = make_split_cache(256, 64, 4);
  Batch shorter = rows(0, 0, 3);  // within the window: all of it kept
  ASSERT_TRUE(cache->place(shorter).ok());
  cache->trim_windows(shorter);
  EXPECT_TRUE(cache->seq_copy_prefix(0, 1, 2).ok());
  Batch longer = rows(2, 0, 10);
  ASSERT_TRUE(cache->place(longer).ok());
  cache->trim_windows(longer);
  auto part = cache->seq_copy_prefix(2, 3, 6);
  ASSERT_FALSE(part.ok());
  EXPECT_NE(part.error().message.find("sliding window"), std::string::npos);
  EXPECT_EQ(cache->seq_length(3), 0);
  ASSERT_TRUE(cache->seq_copy_prefix(2, 3, 10).ok());
  EXPECT_TRUE(cache->place(rows(3, 10, 1)).ok());
  // Cut back past its window, a sequence cannot go on.
  cache->seq_truncate(2, 5);
  EXPECT_FALSE(cache->place(rows(2, 5, 1)).ok());
  cache->seq_free(2);
  EXPECT_TRUE(cache->place(rows(2, 0, 1)).ok());
}

// The windowed pool gives a sliding-window model the same tokens as one pool
// of every position: two sequences generating far past the window, in a
// local pool that comes round many times.
TEST(KvCacheWindows, GemmaGeneratesAsWithOnePool) {
  const std::string model = testing::test_model_path(testing::tiny_gemma3_spec("llama-bpe", "f16"));
  const std::vector<TokenId> p0 = {128000, 12805, 5304, 264, 892, 11, 304, 264, 4363, 3117, 3201, 11, 1070};
  const std::vector<TokenId> p1 = {128000, 791, 4062, 14198, 39935};
  auto one = testing::open_engine(model, 512, 2, 2, GGML_TYPE_F16, 0);
  ASSERT_TRUE(one.forward);
  EXPECT_EQ(one.cache->local_cells_total(), 0);
  const auto want0 = testing::greedy(one, p0, 40, 0);
  const auto want1 = testing::greedy(one, p1, 40, 1);
  auto split = testing::open_engine(model, 512, 2, 2, GGML_TYPE_F16, 2 * 7 + 16);
  ASSERT_TRUE(split.forward);
  EXPECT_EQ(split.cache->local_cells_total(), 30);
  EXPECT_EQ(testing::greedy(split, p0, 40, 0), want0);
  EXPECT_EQ(testing::greedy(split, p1, 40, 1), want1);
  EXPECT_LE(split.cache->local_cells_used(), 2 * 7);
  // A whole sequence continues in a copy as it would have.
  auto copy = testing::open_engine(model, 512, 2, 2, GGML_TYPE_F16, 2 * 7 + 16);
  const auto half = testing::greedy(copy, p0, 20, 0);
  ASSERT_TRUE(copy.cache->seq_copy_prefix(0, 1, copy.cache->seq_length(0)).ok());
  const auto rest = testing::greedy(copy, {half.back()}, 20, 1);
  std::vector<TokenId> both(half.begin(), half.end());
  both.insert(both.end(), rest.begin(), rest.end());
  EXPECT_EQ(both, want0);
}

// Gemma 4's shared-KV layers attend over their source layer's cells and
// store nothing of their own, and its sliding layers' keys and values are as
// narrow as their heads: the cache holds what the layers store, no more.
TEST(KvCacheWindows, Gemma4HoldsOnlyTheKeysItsLayersStore) {
  // 6 layers: 0 and 1 local (heads 32 wide), 2 global (64), 3..5 sharing
  // those of 1 and 2; one key/value head.
  auto model = Model::load(testing::test_model_path(testing::tiny_gemma4_spec()));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  ASSERT_EQ(c.n_layer, 6);
  ASSERT_EQ(c.kv_shared_from, 3);
  // K and V, 2 bytes a value in F16.
  const size_t f16 = 2;
  EXPECT_EQ(kv_bytes_per_token(c, GGML_TYPE_F16), 2 * f16 * (32 + 32 + 64));
  EXPECT_EQ(sliding_kv_bytes_per_token(c, GGML_TYPE_F16), 2 * f16 * (32 + 32));
  EXPECT_EQ(kv_bytes_per_token(c, GGML_TYPE_Q8_0), 2u * (34 + 34 + 2 * 34));

  KvCacheOptions o;
  o.n_cells = 256;
  o.n_seq_max = 2;
  auto one = KvCache::create(c, o);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->bytes_per_token(), kv_bytes_per_token(c, GGML_TYPE_F16));
  EXPECT_EQ((*one)->bytes_total(), 256 * kv_bytes_per_token(c, GGML_TYPE_F16));
  const auto layers = (*one)->layer_tensors();
  for (int il = 0; il < c.n_layer; ++il) {
    EXPECT_EQ(layers[size_t(il)].k != nullptr, il < 3) << "layer " << il;
    if (layers[size_t(il)].k) {
      EXPECT_EQ(layers[size_t(il)].k->ne[0], il == 2 ? 64 : 32) << "layer " << il;
    }
  }

  o.n_local_cells = 64;
  auto split = KvCache::create(c, o);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ((*split)->bytes_per_token(), 2 * f16 * 64);
  EXPECT_EQ((*split)->local_bytes_per_cell(), 2 * f16 * (32 + 32));
  EXPECT_EQ((*split)->bytes_total(), 256 * 2 * f16 * 64 + 64 * 2 * f16 * (32 + 32));
}

// The same model generates the same with one pool as with a local one.
TEST(KvCacheWindows, Gemma4GeneratesAsWithOnePool) {
  const std::string model = testing::test_model_path(testing::tiny_gemma4_spec());
  const std::vector<TokenId> prompt = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203};
  auto one = testing::open_engine(model, 512, 2, 2, GGML_TYPE_F16, 0);
  ASSERT_TRUE(one.forward);
  auto split = testing::open_engine(model, 512, 2, 2, GGML_TYPE_F16, 2 * 7 + 16);
  ASSERT_TRUE(split.forward);
  EXPECT_EQ(testing::greedy(split, prompt, 24), testing::greedy(one, prompt, 24));
}

}  // namespace
}  // namespace graft
