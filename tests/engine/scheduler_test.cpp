// The scheduler alone: admission, chunked prefill, decode rows, prefix reuse.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace graft {
namespace {

std::vector<TokenId> tokens(int n, TokenId first = 1) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

SchedulerConfig config(int64_t budget = 1000, int max_running = 4, int step_tokens = 64) {
  SchedulerConfig c;
  c.n_ctx = 256;
  c.kv_budget = budget;
  c.max_running = max_running;
  c.max_sequences = 8;
  c.step_tokens = step_tokens;
  return c;
}

// Feeds every logits row a token (id 7), as the engine would after the batch ran.
void sample_all(Scheduler& s, const StepPlan& plan) {
  for (RequestId id : plan.samplers) s.append_token(id, 7);
}

TEST(Scheduler, RefusesRequestsThatCanNeverFit) {
  Scheduler s(config(/*budget=*/100));
  EXPECT_TRUE(s.check_fits(10, 20).ok());
  Status empty = s.check_fits(0, 5);
  ASSERT_FALSE(empty.ok());
  Status too_long = s.check_fits(256, 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, "context_length_exceeded");
  EXPECT_NE(too_long.error().message.find("256"), std::string::npos);
  // More KV than the budget: the context is cut to the budget, so a prompt
  // that fits is admitted once the budget is free, and its answer is cut at the context.
  EXPECT_EQ(s.config().n_ctx, 100);
  EXPECT_TRUE(s.check_fits(50, 60).ok());
  EXPECT_FALSE(s.check_fits(100, 1).ok());
  s.enqueue(1, tokens(50), 60, {});
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(s.reserved_tokens(), 100);
}

TEST(Scheduler, AdmitsInOrderWhileProjectedKvFits) {
  Scheduler s(config(/*budget=*/100));
  s.enqueue(1, tokens(10, 100), 30, {});  // 40
  s.enqueue(2, tokens(10, 200), 30, {});  // 40
  s.enqueue(3, tokens(10, 300), 30, {});  // 40: over 100, waits
  s.enqueue(4, tokens(2, 400), 3, {});    // would fit, but FIFO keeps it behind 3
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 2u);
  EXPECT_EQ(plan.admitted[0].id, 1u);
  EXPECT_EQ(plan.admitted[1].id, 2u);
  EXPECT_EQ(s.n_waiting(), 2);
  EXPECT_EQ(s.reserved_tokens(), 80);

  s.release(1, /*keep_prefix=*/false);
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 2u);
  EXPECT_EQ(plan.admitted[0].id, 3u);
  EXPECT_EQ(plan.admitted[1].id, 4u);
  EXPECT_EQ(plan.kv_ops.front().kind, KvOp::Kind::kFree);
}

TEST(Scheduler, RunsAtMostMaxRunning) {
  Scheduler s(config(1000, /*max_running=*/2));
  for (RequestId id = 1; id <= 3; ++id) s.enqueue(id, tokens(4, static_cast<TokenId>(id * 100)), 4, {});
  StepPlan plan = s.plan_step();
  EXPECT_EQ(plan.admitted.size(), 2u);
  EXPECT_EQ(s.n_running(), 2);
  EXPECT_EQ(s.n_waiting(), 1);
}

TEST(Scheduler, PrefillsLongPromptsInChunksWithLogitsOnlyOnTheLastRow) {
  Scheduler s(config(1000, 4, /*step_tokens=*/8));
  s.enqueue(1, tokens(20), 5, {});
  std::vector<int> chunks;
  int next_pos = 0;
  for (int step = 0; step < 3; ++step) {
    StepPlan plan = s.plan_step();
    chunks.push_back(static_cast<int>(plan.batch.size()));
    for (const BatchRow& row : plan.batch.rows) {
      EXPECT_EQ(row.pos, next_pos);
      EXPECT_EQ(row.token, next_pos + 1);
      EXPECT_EQ(row.logits, row.pos == 19);
      ++next_pos;
    }
    sample_all(s, plan);
  }
  EXPECT_EQ(chunks, (std::vector<int>{8, 8, 4}));
  // Then one decode row feeding back the sampled token.
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.batch.size(), 1u);
  EXPECT_EQ(plan.batch.rows[0].pos, 20);
  EXPECT_EQ(plan.batch.rows[0].token, 7);
  EXPECT_TRUE(plan.batch.rows[0].logits);
}

TEST(Scheduler, DecodeRowsKeepFlowingWhileAPromptIsPrefilled) {
  Scheduler s(config(1000, 4, /*step_tokens=*/16));
  s.enqueue(1, tokens(4), 50, {});
  sample_all(s, s.plan_step());  // 1 prefilled, has a token
  s.enqueue(2, tokens(40), 5, {});
  for (int step = 0; step < 3; ++step) {
    StepPlan plan = s.plan_step();
    ASSERT_GE(plan.batch.size(), 1u);
    // Request 1's decode row comes first, every step.
    EXPECT_TRUE(plan.batch.rows[0].logits);
    EXPECT_EQ(plan.samplers.front(), 1u);
    EXPECT_LE(static_cast<int>(plan.batch.size()), 16);
    sample_all(s, plan);
  }
}

TEST(Scheduler, FinishesOnePromptPerStepBeforeStartingTheNext) {
  Scheduler s(config(1000, 4, /*step_tokens=*/32));
  s.enqueue(1, tokens(20, 100), 5, {});
  s.enqueue(2, tokens(20, 200), 5, {});
  StepPlan first = s.plan_step();
  EXPECT_EQ(first.batch.size(), 20u);  // 2 would not finish in the 12 rows left: not started
  EXPECT_EQ(first.samplers, (std::vector<RequestId>{1}));
  sample_all(s, first);
  StepPlan second = s.plan_step();
  EXPECT_EQ(second.batch.size(), 21u);  // 1's decode row + all of 2
  EXPECT_EQ(second.samplers, (std::vector<RequestId>{1, 2}));
}

// Prompts are read one per step, so the first gets its first token after its
// own prompt rather than after all four; very short ones share a step, whose
// time is mostly reading the weights anyway.
TEST(Scheduler, PromptsAreReadOnePerStepUnlessTheStepStaysSmall) {
  Scheduler s(config(1000, 4, /*step_tokens=*/64));
  for (RequestId id = 1; id <= 4; ++id) s.enqueue(id, tokens(10, static_cast<TokenId>(id * 100)), 5, {});
  StepPlan plan = s.plan_step();
  EXPECT_EQ(plan.batch.size(), 10u);
  EXPECT_EQ(plan.samplers, (std::vector<RequestId>{1}));
  sample_all(s, plan);
  plan = s.plan_step();
  EXPECT_EQ(plan.batch.size(), 11u);  // 1's decode row + all of 2
  EXPECT_EQ(plan.samplers, (std::vector<RequestId>{1, 2}));

  Scheduler small(config(1000, 4, /*step_tokens=*/64));
  for (RequestId id = 1; id <= 4; ++id) small.enqueue(id, tokens(4, static_cast<TokenId>(id * 100)), 5, {});
  plan = small.plan_step();
  EXPECT_EQ(plan.batch.size(), 16u);
  EXPECT_EQ(plan.samplers, (std::vector<RequestId>{1, 2, 3, 4}));
}

TEST(Scheduler, ReleasedRequestFreesItsSequenceNextStep) {
  Scheduler s(config());
  s.enqueue(1, tokens(10), 5, {});
  StepPlan plan = s.plan_step();
  SeqId seq = plan.admitted[0].seq;
  s.release(1, /*keep_prefix=*/false);
  EXPECT_EQ(s.n_running(), 0);
  EXPECT_EQ(s.reserved_tokens(), 0);
  plan = s.plan_step();
  ASSERT_EQ(plan.kv_ops.size(), 1u);
  EXPECT_EQ(plan.kv_ops[0], (KvOp{KvOp::Kind::kFree, seq, 0, 0}));
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, ReleasingAWaitingRequestDropsIt) {
  Scheduler s(config(/*budget=*/30));
  s.enqueue(1, tokens(10, 100), 15, {});
  s.enqueue(2, tokens(10, 200), 15, {});
  (void)s.plan_step();
  EXPECT_TRUE(s.is_waiting(2));
  s.release(2, false);
  EXPECT_FALSE(s.is_waiting(2));
  EXPECT_EQ(s.n_waiting(), 0);
}

TEST(Scheduler, ReusesTheLongestCachedPrefix) {
  Scheduler s(config());
  std::vector<TokenId> shared = tokens(12);
  s.enqueue(1, shared, 3, {});
  StepPlan plan = s.plan_step();
  SeqId first_seq = plan.admitted[0].seq;
  sample_all(s, plan);
  s.release(1, /*keep_prefix=*/true);  // 12 tokens in KV, kept
  EXPECT_EQ(s.n_cached(), 1);
  EXPECT_EQ(s.cached_tokens(), 12);

  std::vector<TokenId> prompt = tokens(8);  // shares 8 tokens, but one must be recomputed
  prompt.push_back(100);
  prompt.push_back(101);
  s.enqueue(2, prompt, 3, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 8);
  SeqId seq = plan.admitted[0].seq;
  EXPECT_NE(seq, first_seq);
  ASSERT_EQ(plan.kv_ops.size(), 1u);
  EXPECT_EQ(plan.kv_ops[0], (KvOp{KvOp::Kind::kCopyPrefix, seq, first_seq, 8}));
  ASSERT_EQ(plan.batch.size(), 2u);  // only the new tokens are computed
  EXPECT_EQ(plan.batch.rows[0].pos, 8);
  EXPECT_EQ(plan.batch.rows[0].token, 100);
  EXPECT_EQ(s.n_cached(), 1);  // the cached sequence is still there for others
}

TEST(Scheduler, TakesOverACachedSequenceThePromptExtends) {
  Scheduler s(config());
  s.enqueue(1, tokens(10), 3, {});
  StepPlan plan = s.plan_step();
  SeqId seq = plan.admitted[0].seq;
  sample_all(s, plan);           // token 7 sampled
  sample_all(s, s.plan_step());  // 7 decoded (11 in KV), another 7 sampled
  s.release(1, true);
  // The next turn: the whole conversation so far, plus more.
  std::vector<TokenId> prompt = tokens(10);
  prompt.insert(prompt.end(), {7, 50, 51});
  s.enqueue(2, prompt, 3, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].seq, seq);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 11);
  EXPECT_TRUE(plan.kv_ops.empty());
  EXPECT_EQ(s.n_cached(), 0);
  EXPECT_EQ(plan.batch.size(), 2u);
}

TEST(Scheduler, ReusesThePrefixOfARunningSequence) {
  Scheduler s(config());
  s.enqueue(1, tokens(30), 10, {});
  StepPlan plan = s.plan_step();
  SeqId src = plan.admitted[0].seq;
  sample_all(s, plan);
  std::vector<TokenId> prompt = tokens(20);
  prompt.push_back(99);
  s.enqueue(2, prompt, 10, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 20);
  EXPECT_EQ(plan.kv_ops[0], (KvOp{KvOp::Kind::kCopyPrefix, plan.admitted[0].seq, src, 20}));
}

// Sliding-window models keep only each sequence's last window - 1 positions
// in those layers: a part of a longer sequence cannot be reused (its window
// is gone), a whole one can, and so can a part of one within the window.
TEST(Scheduler, WithASlidingWindowReusesOnlyWhatTheWindowStillHolds) {
  SchedulerConfig c = config();
  c.window = 8;  // keeps 7 positions
  Scheduler s(c);
  s.enqueue(1, tokens(12), 3, {});
  StepPlan plan = s.plan_step();
  const SeqId long_seq = plan.admitted[0].seq;
  sample_all(s, plan);
  s.release(1, true);  // 12 in KV: longer than the window
  s.enqueue(2, tokens(6), 3, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 0);  // the window before position 5 is gone
  EXPECT_TRUE(plan.kv_ops.empty());
  sample_all(s, plan);
  EXPECT_EQ(s.running_window_cells(), 6);
  EXPECT_EQ(s.cached_window_cells(), 7);
  s.release(2, true);  // 6 in KV: within the window, so all of it is kept
  std::vector<TokenId> within = tokens(4);
  within.push_back(500);
  s.enqueue(3, within, 3, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 4);
  // The whole long sequence, extended: taken over as it is.
  std::vector<TokenId> next = tokens(12);
  next.push_back(60);
  s.enqueue(4, next, 3, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].seq, long_seq);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 12);
}

TEST(Scheduler, RequestsWithTheSamePreambleWaitForTheFirstToReadIt) {
  Scheduler s(config(1000, 4, /*step_tokens=*/64));
  std::vector<TokenId> preamble = tokens(100);
  for (RequestId id = 1; id <= 3; ++id) {
    std::vector<TokenId> p = preamble;
    p.insert(p.end(), {static_cast<TokenId>(500 + id), static_cast<TokenId>(600 + id)});
    s.enqueue(id, p, 5, {});
  }
  s.enqueue(4, tokens(8, 900), 5, {});  // behind them in the queue
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);  // 2 and 3 wait for 1's preamble, 4 waits its turn
  EXPECT_EQ(s.n_waiting(), 3);
  sample_all(s, plan);
  plan = s.plan_step();  // 1 has 64 of its 102 tokens in KV: 2 could copy 64, but 100 are coming
  EXPECT_TRUE(plan.admitted.empty());
  sample_all(s, plan);
  plan = s.plan_step();  // 1's prompt is in KV now
  ASSERT_EQ(plan.admitted.size(), 3u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 100);
  EXPECT_EQ(plan.admitted[1].cached_tokens, 100);
  EXPECT_EQ(plan.admitted[2].cached_tokens, 0);
  EXPECT_EQ(plan.samplers, (std::vector<RequestId>{1, 2, 3, 4}));  // 1 decodes, 2-4 read what is left
}

TEST(Scheduler, NeverReusesKvComputedWithOtherAdapters) {
  Scheduler s(config());
  AdapterRoute a;
  a.n = 1;
  a.slot[0] = 0;
  a.scale[0] = 1.0f;
  s.enqueue(1, tokens(10), 3, a);
  sample_all(s, s.plan_step());
  s.release(1, true);
  s.enqueue(2, tokens(10), 3, {});
  StepPlan plan = s.plan_step();
  EXPECT_EQ(plan.admitted[0].cached_tokens, 0);
  s.drop_cached_if([](const AdapterRoute& r) { return !r.empty() && r.slot[0] == 0; });
  EXPECT_EQ(s.n_cached(), 0);
}

TEST(Scheduler, CachedPrefixesGiveWayToNewRequests) {
  Scheduler s(config(/*budget=*/60));
  s.enqueue(1, tokens(20), 10, {});
  sample_all(s, s.plan_step());
  s.release(1, true);
  EXPECT_EQ(s.cached_tokens(), 20);
  s.enqueue(2, tokens(30, 500), 20, {});  // 50 + 20 cached > 60: the cache is evicted
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(s.n_cached(), 0);
  ASSERT_FALSE(plan.kv_ops.empty());
  EXPECT_EQ(plan.kv_ops[0].kind, KvOp::Kind::kFree);
  EXPECT_LE(s.reserved_tokens() + s.cached_tokens(), 60);
}

TEST(Scheduler, EvictsCachedPrefixesWhenSequenceIdsRunOut) {
  SchedulerConfig c = config();
  c.max_sequences = 4;
  c.max_running = 4;
  Scheduler s(c);
  for (RequestId id = 1; id <= 4; ++id) {
    s.enqueue(id, tokens(4, static_cast<TokenId>(id * 100)), 2, {});  // all four read in one step
  }
  StepPlan plan = s.plan_step();
  sample_all(s, plan);
  for (RequestId id = 1; id <= 4; ++id) s.release(id, true);
  EXPECT_EQ(s.n_cached(), 4);
  s.enqueue(5, tokens(4, 900), 2, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(s.n_cached(), 3);
  ASSERT_EQ(plan.kv_ops.size(), 1u);
  EXPECT_EQ(plan.kv_ops[0].kind, KvOp::Kind::kFree);
  EXPECT_EQ(plan.kv_ops[0].seq, plan.admitted[0].seq);
}

TEST(Scheduler, DropsACachedSequenceANewerOneContains) {
  Scheduler s(config());
  s.enqueue(1, tokens(10), 3, {});
  sample_all(s, s.plan_step());
  sample_all(s, s.plan_step());
  s.release(1, true);  // cached: tokens(10) + {7}
  EXPECT_EQ(s.cached_tokens(), 11);
  s.enqueue(2, tokens(10), 3, {});  // copies 9 tokens, recomputes the 10th
  StepPlan plan = s.plan_step();
  EXPECT_EQ(plan.admitted[0].cached_tokens, 9);
  sample_all(s, plan);
  sample_all(s, s.plan_step());
  s.release(2, true);  // tokens(10) + {7} again: the older entry is redundant
  EXPECT_EQ(s.n_cached(), 1);
  EXPECT_EQ(s.cached_tokens(), 11);
}

TEST(Scheduler, CountsPendingPromptTokens) {
  Scheduler s(config(1000, 4, /*step_tokens=*/8));
  s.enqueue(1, tokens(20), 5, {});
  EXPECT_EQ(s.pending_prompt_tokens(), 20);
  (void)s.plan_step();
  EXPECT_EQ(s.pending_prompt_tokens(), 12);
  EXPECT_EQ(s.running_tokens(), 8);
}

}  // namespace
}  // namespace graft
