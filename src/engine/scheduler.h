// Scheduler: decides, once per step, which requests run and how many tokens
// each gets. It admits waiting requests in FIFO order while their projected
// KV (prompt + max new tokens) fits the budget, gives every running request
// one decode row, and fills the rest of the step with prompt chunks (chunked
// prefill, so running streams keep flowing while a long prompt is read). It
// keeps finished sequences as reusable prefixes while the budget allows and
// starts a new request from the longest cached prefix it shares (waiting, if
// need be, until a prompt being read that starts the same way is in KV).
//
// Hybrid models (qwen35) also keep a recurrent state per sequence, which
// cannot be cut back to an arbitrary prefix: the budget counts each state
// (and each snapshot) as state_cells cells; prompt chunks end on multiples of
// state_block tokens where they can, and the state is kept there as a
// snapshot; a new request starts from the longest prefix it shares that has a
// state: a snapshot, or the whole of a sequence.
//
// It only decides: the plan it returns lists the KV edits to make and the
// batch to run. It owns no model and no KV memory, and is tested alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "engine/request.h"
#include "util/result.h"

namespace graft {

struct SchedulerConfig {
  int n_ctx = 4096;           // longest sequence: prompt + generated tokens (at most kv_budget)
  int64_t kv_budget = 16384;  // KV cells (tokens) for running and cached sequences together
  int max_running = 4;        // requests in flight at once
  int max_sequences = 8;      // KV sequence ids: running plus cached prefixes
  int step_tokens = 512;      // most rows in one step (decode rows + prompt chunks)
  bool prefix_cache = true;
  int min_prefix = 4;  // shortest shared prefix worth copying
  // A waiting request whose prompt shares at least this many more tokens with
  // a prompt still being read waits for that prompt's KV instead of
  // computing the shared part again.
  int min_wait_gain = 32;
  // Hybrid models: the cells one recurrent state costs in the budget (0: the
  // model keeps none), the prompt block at whose ends states are snapshotted,
  // and the most snapshots held at once.
  int64_t state_cells = 0;
  int state_block = 256;
  int max_snapshots = 0;
  // Sliding-window models whose sliding-window layers keep only each
  // sequence's last window - 1 positions (0: none). Their pool is sized for
  // max_sequences windows, so the budget counts the other layers' cells
  // only; but a prefix of a sequence longer than that is gone there: only
  // whole sequences, and prefixes of sequences within the window, are reused.
  int window = 0;
};

// A KV edit the executor makes before the step's batch, in list order.
struct KvOp {
  enum class Kind { kFree, kCopyPrefix, kTruncate, kDropSnapshots };
  Kind kind = Kind::kFree;
  SeqId seq = 0;     // the sequence freed or truncated, or the copy's destination
  SeqId src = 0;     // kCopyPrefix: the source
  int n_tokens = 0;  // kCopyPrefix / kTruncate: tokens kept

  bool operator==(const KvOp&) const = default;
};

struct Admission {
  RequestId id = 0;
  SeqId seq = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from a cached prefix
};

struct StepPlan {
  std::vector<KvOp> kv_ops;
  std::vector<Admission> admitted;
  Batch batch;
  std::vector<RequestId> samplers;   // the request that samples each logits row, in row order
  std::vector<RequestId> scheduled;  // every request with rows in the batch
  std::vector<SeqId> snapshots;      // after the batch: keep these sequences' states as snapshots

  bool empty() const { return kv_ops.empty() && batch.size() == 0; }
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);

  const SchedulerConfig& config() const { return config_; }

  // Whether a request of this size can ever run; the error says why not
  // (an empty prompt, or one that leaves the context no room). Depends only
  // on the configuration, so any thread may call it.
  Status check_fits(int prompt_tokens, int max_new_tokens) const;

  // Queues a request (it must pass check_fits; max_new_tokens > 0).
  void enqueue(RequestId id, std::vector<TokenId> prompt, int max_new_tokens, AdapterRoute adapters);

  // Decides the next step. The rows in the plan count as computed from now on.
  StepPlan plan_step();

  // The token sampled for a request from its logits row: the next step feeds it back.
  void append_token(RequestId id, TokenId token);

  // The request is over (finished, cancelled or failed), waiting or running.
  // Its KV is freed by the next plan, or kept as a reusable prefix when
  // `keep_prefix` and the cache is on. Unknown ids are ignored.
  void release(RequestId id, bool keep_prefix);

  // Drops cached prefixes whose adapters match (e.g. an adapter slot unmounted).
  void drop_cached_if(const std::function<bool(const AdapterRoute&)>& pred);

  // A snapshot the plan asked for was not taken: forget it.
  void forget_snapshot(SeqId seq);

  bool has_work() const { return !waiting_.empty() || !running_.empty() || !pending_ops_.empty(); }
  bool is_waiting(RequestId id) const;
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  int n_running() const { return static_cast<int>(running_.size()); }
  int n_cached() const { return static_cast<int>(cache_.size()); }
  // The tokens of a running request in KV or queued for it (prompt + generated).
  int64_t running_tokens() const;
  int64_t cached_tokens() const;
  int64_t reserved_tokens() const { return reserved_; }  // projected KV of running requests
  int64_t pending_prompt_tokens() const;                 // prompt tokens not yet in KV
  // Hybrid models: recurrent states held (running and cached sequences) and snapshots.
  int n_states() const { return config_.state_cells > 0 ? n_running() + n_cached() : 0; }
  int n_snapshots() const { return n_snapshots_; }
  // Sliding-window models: cells held in the sliding-window layers' pool by
  // running and by cached sequences (their windows; shared cells count for each).
  int64_t running_window_cells() const;
  int64_t cached_window_cells() const;

 private:
  struct Sequence {
    RequestId id = 0;
    SeqId seq = -1;
    std::vector<TokenId> tokens;  // prompt, then sampled tokens
    int n_prompt = 0;
    int n_computed = 0;  // tokens[0 .. n_computed) are in KV
    int max_new = 0;
    int64_t reserved = 0;  // projected KV cells (and its recurrent state's)
    AdapterRoute adapters;
    std::vector<int> snapshots;  // hybrid models: lengths at which its state is kept
  };
  struct CachedPrefix {
    SeqId seq = -1;
    std::vector<TokenId> tokens;  // exactly what its KV holds
    AdapterRoute adapters;
    std::vector<int> snapshots;
  };
  struct PrefixMatch {
    int length = 0;
    const Sequence* running = nullptr;
    std::list<CachedPrefix>::iterator cached;
    bool from_cache = false;
  };

  int64_t projected(int prompt_tokens, int max_new) const;
  bool recurrent() const { return config_.state_cells > 0; }
  int64_t window_cells(int64_t n) const { return std::min<int64_t>(n, std::max(config_.window - 1, 0)); }
  // Cells held beyond the running reservations: cached prefixes and every state kept for reuse.
  int64_t held_cells() const {
    return cached_cells_ + config_.state_cells * (int64_t(cache_.size()) + n_snapshots_);
  }
  // The longest usable prefix of n shared tokens of a sequence of `length`
  // with these snapshots: all n without a recurrent state; with one, n if it
  // is the whole sequence, else the longest snapshot within n. With a sliding
  // window, also 0 unless n is the whole sequence or the sequence is no
  // longer than the window keeps.
  int usable_prefix(int n, int length, const std::vector<int>& snapshots) const;
  int chunk_size(const Sequence& s, int budget) const;
  void plan_snapshot(StepPlan& plan, Sequence& s);
  void drop_snapshots(Sequence& s);
  bool try_admit(StepPlan& plan);
  PrefixMatch longest_prefix(const Sequence& incoming);
  int pending_shared_prefix(const Sequence& incoming) const;
  bool take_free_seq(SeqId& seq, const CachedPrefix* keep);
  void evict(std::list<CachedPrefix>::iterator it);
  void add_rows(StepPlan& plan);

  SchedulerConfig config_;
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;  // in admission order
  std::list<CachedPrefix> cache_;  // most recently used first
  std::vector<SeqId> free_seqs_;
  std::vector<KvOp> pending_ops_;  // frees decided between steps
  int64_t reserved_ = 0;           // sum of running reservations
  int64_t cached_cells_ = 0;
  int n_snapshots_ = 0;  // over running and cached sequences
};

}  // namespace graft
