// The merge loop shared by BPE and SentencePiece: a word starts as a chain of
// symbols (bytes or characters); the adjacent pair with the lowest cost is
// merged into one symbol, leftmost first among equal costs, until no pair
// can merge. BPE's cost is the merge rank, SentencePiece's the negated score
// of the merged token. Internal to the tokenizer layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace graft {

// Open-addressing map from a pair of ids to (rank, merged id); built once.
// BPE stores the merge rank; SentencePiece only the merged token.
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t result;
  };
  void build(std::vector<Entry> entries);  // earlier entries win for repeated pairs
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  size_t slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

struct MergeSymbol {
  int32_t id;       // token (or merge-only string) id, -1 when the symbol is no token at all
  uint32_t start;   // byte range in the word
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// The cost of a merge as an unsigned key: lower merges first. BPE uses the
// rank; SentencePiece maps the negated score through float_order_key.
struct MergeStep {
  uint32_t cost;
  int32_t result;  // id of the merged symbol
};

// A uint32 that sorts like the float (for finite values and infinities;
// -0 and +0 are equal, as they compare).
inline uint32_t float_order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Scratch space reused across words so that encoding allocates rarely.
struct MergeScratch {
  struct Queued {
    uint64_t order;   // cost << 32 | left index: lowest cost, then leftmost, first
    uint32_t length;  // left + right length when queued; any merge since changes it
    int32_t result;
  };
  std::vector<Queued> heap;
  std::vector<uint32_t> cost;
  std::vector<int32_t> result;
  std::vector<uint8_t> has_pair;
};

// Words up to this many symbols use a scan per merge (no heap); longer ones a
// priority queue. Both give identical results.
inline constexpr size_t kScanMergeLimit = 48;

// Runs the merges over `symbols` (a chain 0..n-1 set up by the caller).
// `pair(left, right)` returns the merge step for two adjacent symbols, or
// nullopt when they do not merge.
template <typename PairFn>
void run_merges(std::vector<MergeSymbol>& symbols, PairFn&& pair, MergeScratch& scratch,
                size_t scan_limit = kScanMergeLimit) {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;

  auto merge_into_left = [&](int32_t left, int32_t result) {
    MergeSymbol& l = symbols[left];
    MergeSymbol& r = symbols[l.next];
    l.id = result;
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (l.next >= 0) symbols[l.next].prev = left;
  };

  if (static_cast<size_t>(n) <= scan_limit) {
    auto& cost = scratch.cost;
    auto& result = scratch.result;
    auto& has = scratch.has_pair;
    cost.resize(n);
    result.resize(n);
    has.assign(n, 0);
    auto evaluate = [&](int32_t i) {
      has[i] = 0;
      if (i < 0 || symbols[i].next < 0) return;
      if (std::optional<MergeStep> step = pair(symbols[i], symbols[symbols[i].next])) {
        has[i] = 1;
        cost[i] = step->cost;
        result[i] = step->result;
      }
    };
    for (int32_t i = 0; i + 1 < n; ++i) evaluate(i);
    while (true) {
      int32_t best = -1;
      for (int32_t i = 0; i >= 0; i = symbols[i].next) {
        if (has[i] && (best < 0 || cost[i] < cost[best])) best = i;
      }
      if (best < 0) break;
      merge_into_left(best, result[best]);
      evaluate(best);
      if (symbols[best].prev >= 0) evaluate(symbols[best].prev);
    }
    return;
  }

  // A 4-ary min-heap on (cost, left); a queued pair is stale once either
  // side has merged with something else, which changes their summed length.
  using Queued = MergeScratch::Queued;
  auto& heap = scratch.heap;
  heap.clear();
  heap.reserve(static_cast<size_t>(n) + n / 2);
  auto queued = [&](int32_t left) -> std::optional<Queued> {
    if (left < 0) return std::nullopt;
    const int32_t right = symbols[left].next;
    if (right < 0) return std::nullopt;
    std::optional<MergeStep> step = pair(symbols[left], symbols[right]);
    if (!step) return std::nullopt;
    return Queued{(static_cast<uint64_t>(step->cost) << 32) | static_cast<uint32_t>(left),
                  symbols[left].length + symbols[right].length, step->result};
  };
  auto sift_down = [&](size_t i) {
    const Queued item = heap[i];
    const size_t size = heap.size();
    while (true) {
      const size_t first = 4 * i + 1;
      if (first >= size) break;
      size_t best = first;
      const size_t last = std::min(first + 4, size);
      for (size_t c = first + 1; c < last; ++c) {
        if (heap[c].order < heap[best].order) best = c;
      }
      if (heap[best].order >= item.order) break;
      heap[i] = heap[best];
      i = best;
    }
    heap[i] = item;
  };
  auto push = [&](int32_t left) {
    std::optional<Queued> q = queued(left);
    if (!q) return;
    size_t i = heap.size();
    heap.push_back(*q);
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (heap[parent].order <= q->order) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = *q;
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (auto q = queued(i)) heap.push_back(*q);
  }
  for (size_t i = heap.size() / 4 + 1; i-- > 0;) {
    if (i < heap.size()) sift_down(i);
  }
  while (!heap.empty()) {
    const Queued top = heap.front();
    heap.front() = heap.back();
    heap.pop_back();
    if (!heap.empty()) sift_down(0);
    const auto left = static_cast<int32_t>(top.order & 0xFFFFFFFFu);
    const MergeSymbol& l = symbols[left];
    if (l.length == 0 || l.next < 0 || l.length + symbols[l.next].length != top.length) continue;
    merge_into_left(left, top.result);
    push(symbols[left].prev);
    push(left);
  }
}

// Sets up `symbols` as a chain over the units of a word; `unit_length(i)`
// gives the byte length of the unit at byte offset i, `unit_id(start, len)`
// its id.
template <typename LengthFn, typename IdFn>
void make_chain(size_t word_length, std::vector<MergeSymbol>& symbols, LengthFn&& unit_length,
                IdFn&& unit_id) {
  symbols.clear();
  symbols.reserve(word_length);
  size_t offset = 0;
  int32_t index = 0;
  while (offset < word_length) {
    const size_t len = std::min(unit_length(offset), word_length - offset);
    symbols.push_back(MergeSymbol{unit_id(offset, len), static_cast<uint32_t>(offset),
                                  static_cast<uint32_t>(len), index - 1, index + 1});
    offset += len;
    ++index;
  }
  if (!symbols.empty()) symbols.back().next = -1;
}

}  // namespace graft
