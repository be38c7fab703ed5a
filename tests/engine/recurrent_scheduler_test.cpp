// The scheduler for hybrid models (a recurrent state per sequence): states
// count in the budget, prompt chunks end on state blocks where the state is
// kept, and prefixes are reused only from a kept state.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler.h"

namespace graft {
namespace {

std::vector<TokenId> tokens(int n, TokenId first = 1) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

SchedulerConfig hybrid(int64_t budget = 2000, int step_tokens = 40) {
  SchedulerConfig c;
  c.n_ctx = 512;
  c.kv_budget = budget;
  c.max_running = 4;
  c.max_sequences = 8;
  c.step_tokens = step_tokens;
  c.state_cells = 50;
  c.state_block = 16;
  c.max_snapshots = 8;
  return c;
}

void sample_all(Scheduler& s, const StepPlan& plan) {
  for (RequestId id : plan.samplers) s.append_token(id, 7);
}

// Runs steps until the request has generated n tokens, then releases it.
void run_to_end(Scheduler& s, RequestId id, int n, bool keep = true) {
  for (int generated = 0; generated < n;) {
    StepPlan plan = s.plan_step();
    for (RequestId r : plan.samplers) generated += r == id ? 1 : 0;
    sample_all(s, plan);
  }
  s.release(id, keep);
}

TEST(RecurrentScheduler, EachRequestReservesItsStateToo) {
  Scheduler s(hybrid(/*budget=*/200));
  Status refused = s.check_fits(100, 60);  // 160 + 50
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, "kv_budget_exceeded");
  EXPECT_NE(refused.error().message.find("50 for its recurrent state"), std::string::npos);
  EXPECT_TRUE(s.check_fits(100, 50).ok());

  s.enqueue(1, tokens(10, 100), 30, {});  // 40 + 50
  s.enqueue(2, tokens(10, 200), 30, {});  // 90
  s.enqueue(3, tokens(10, 300), 30, {});  // 90: over 200 with the states, waits
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 2u);
  EXPECT_EQ(s.reserved_tokens(), 180);
  EXPECT_EQ(s.n_waiting(), 1);
  EXPECT_EQ(s.n_states(), 2);
}

TEST(RecurrentScheduler, PromptChunksEndOnStateBlocksWhereTheStateIsKept) {
  Scheduler s(hybrid(2000, /*step_tokens=*/40));
  s.enqueue(1, tokens(50), 3, {});
  StepPlan plan = s.plan_step();
  EXPECT_EQ(plan.batch.size(), 32u);  // 40 would cross 32: the chunk ends there
  EXPECT_EQ(plan.snapshots, std::vector<SeqId>{plan.admitted[0].seq});
  EXPECT_EQ(s.n_snapshots(), 1);
  plan = s.plan_step();
  EXPECT_EQ(plan.batch.size(), 18u);  // the rest of the prompt: no block end, no snapshot
  EXPECT_TRUE(plan.snapshots.empty());

  // A chunk that would lose more than half of itself to the cut keeps going.
  Scheduler t(hybrid(2000, /*step_tokens=*/12));
  t.enqueue(1, tokens(30), 3, {});
  std::vector<size_t> chunks;
  for (int step = 0; step < 3; ++step) {
    plan = t.plan_step();
    chunks.push_back(plan.batch.size());
    EXPECT_TRUE(plan.snapshots.empty());
  }
  EXPECT_EQ(chunks, (std::vector<size_t>{12, 12, 6}));  // 12..24 crosses 16, but ending there keeps 4 of 12
}

TEST(RecurrentScheduler, PrefixesAreReusedFromAKeptStateOnly) {
  Scheduler s(hybrid(2000, 40));
  const auto first = tokens(50);
  s.enqueue(1, first, 3, {});
  run_to_end(s, 1, 3);  // cached: 50 + 2 tokens, a snapshot at 32
  EXPECT_EQ(s.n_cached(), 1);
  EXPECT_EQ(s.n_snapshots(), 1);

  // Shares 45 tokens: starts from the snapshot at 32.
  auto second = tokens(45);
  second.push_back(999);
  second.push_back(998);
  s.enqueue(2, second, 2, {});
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 32);
  ASSERT_EQ(plan.kv_ops.size(), 1u);
  EXPECT_EQ(plan.kv_ops[0].kind, KvOp::Kind::kCopyPrefix);
  EXPECT_EQ(plan.kv_ops[0].n_tokens, 32);
  EXPECT_EQ(plan.batch.rows.front().pos, 32);
  sample_all(s, plan);                  // its first token
  run_to_end(s, 2, 1, /*keep=*/false);  // and its second

  // Continues the whole cached sequence: takes it over, state and all.
  auto third = first;
  third.push_back(7);
  third.push_back(7);
  third.push_back(5);
  s.enqueue(3, third, 2, {});
  plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 52);
  EXPECT_TRUE(std::none_of(plan.kv_ops.begin(), plan.kv_ops.end(),
                           [](const KvOp& op) { return op.kind == KvOp::Kind::kCopyPrefix; }));
  EXPECT_EQ(s.n_cached(), 0);
  EXPECT_EQ(s.n_snapshots(), 1);  // the snapshot came along
}

TEST(RecurrentScheduler, ARunningPromptSharesItsKeptStates) {
  Scheduler s(hybrid(2000, 40));
  s.enqueue(1, tokens(80), 3, {});
  ASSERT_EQ(s.plan_step().batch.size(), 32u);  // snapshot at 32
  ASSERT_EQ(s.plan_step().batch.size(), 32u);  // and at 64
  auto other = tokens(40);
  other.push_back(555);
  s.enqueue(2, other, 2, {});
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(plan.admitted[0].cached_tokens, 32);  // not 40: no state there
}

TEST(RecurrentScheduler, WaitsForARunningPromptOnlyForWhatWillHaveAState) {
  Scheduler s(hybrid(2000, /*step_tokens=*/8));
  s.enqueue(1, tokens(100), 2, {});
  s.plan_step();  // 8 rows
  // Shares 20 tokens with the prompt being read: at most 16 will have a state
  // to start from, not worth waiting for (min_wait_gain 32).
  auto near = tokens(20);
  near.push_back(999);
  s.enqueue(2, near, 2, {});
  EXPECT_EQ(s.plan_step().admitted.size(), 1u);
  // Shares 60: 48 will, worth waiting for.
  auto far = tokens(60);
  far.push_back(999);
  s.enqueue(3, far, 2, {});
  EXPECT_TRUE(s.plan_step().admitted.empty());
  EXPECT_TRUE(s.is_waiting(3));
}

TEST(RecurrentScheduler, KeptStatesGiveWayToRequests) {
  // Room for two requests and their states (40 + 50 each), not for a snapshot (50) as well.
  Scheduler s(hybrid(/*budget=*/200, 20));
  s.enqueue(1, tokens(34), 6, {});
  sample_all(s, s.plan_step());  // 16 rows, snapshot at 16
  EXPECT_EQ(s.n_snapshots(), 1);
  // A second request needs 90: the first's snapshot must go.
  s.enqueue(2, tokens(20, 300), 20, {});
  StepPlan plan = s.plan_step();
  ASSERT_EQ(plan.admitted.size(), 1u);
  EXPECT_EQ(s.n_snapshots(), 0);
  EXPECT_TRUE(std::any_of(plan.kv_ops.begin(), plan.kv_ops.end(),
                          [](const KvOp& op) { return op.kind == KvOp::Kind::kDropSnapshots; }));
  EXPECT_LE(s.reserved_tokens(), 200);
}

TEST(RecurrentScheduler, SnapshotsStayWithinTheirSlots) {
  SchedulerConfig c = hybrid(100000, 16);
  c.max_snapshots = 2;
  Scheduler s(c);
  s.enqueue(1, tokens(100), 2, {});
  int taken = 0;
  for (int step = 0; step < 7; ++step) {
    StepPlan plan = s.plan_step();
    taken += int(plan.snapshots.size());
    sample_all(s, plan);
  }
  EXPECT_EQ(taken, 2);
  EXPECT_EQ(s.n_snapshots(), 2);
  s.forget_snapshot(0);  // one the executor could not take
  EXPECT_EQ(s.n_snapshots(), 1);
}

}  // namespace
}  // namespace graft
