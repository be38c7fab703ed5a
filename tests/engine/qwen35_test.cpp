// A hybrid model (qwen35) in the engine: each sequence's recurrent state
// beside its KV cells, carried across prefill chunks, kept apart per row in
// mixed batches, copied and cut back only where a state is kept, reused for
// shared prefixes (with truthful cached_tokens), and counted by admission.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_executor.h"
#include "testing/test_models.h"

namespace graft {
namespace {

using namespace std::chrono_literals;

std::string model_path() {
  return testing::test_model_path(testing::tiny_qwen35_spec("llama-spm", "f16"));
}

std::vector<TokenId> prompt(int n, int seed) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(100 + (seed * 7919 + i * 104729) % 20000);
  return p;
}

TEST(Qwen35, LoadsItsLayerPatternAndStateSizes) {
  auto e = testing::open_engine(model_path(), 256, 2);
  ASSERT_TRUE(e.forward);
  const ModelConfig& c = e.model->config();
  EXPECT_EQ(c.recurrent, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.ssm.conv_kernel, 4);
  EXPECT_EQ(c.ssm.n_v_heads, 4);
  EXPECT_EQ(c.rope.n_rot, 8);  // a quarter of the 32-wide heads
  ASSERT_NE(e.cache->recurrent(), nullptr);
  // KV only for the one attention layer: 2 heads x 32 x (K, V) x f16.
  EXPECT_EQ(e.cache->bytes_per_token(), 2u * 64u * 2u);
  EXPECT_EQ(e.cache->recurrent()->bytes_per_state(), 3u * 4u * (3u * 128u + 16u * 16u * 4u));
}

TEST(Qwen35, ChunkedPrefillCarriesTheStateAcrossChunks) {
  auto e = testing::open_engine(model_path(), 512, 2);
  ASSERT_TRUE(e.forward);
  const auto p = prompt(60, 1);
  std::vector<std::vector<float>> whole_logits, chunked_logits;
  const auto whole = testing::greedy(e, p, 6, 0, &whole_logits);
  const auto chunked = testing::greedy(e, p, 6, 1, &chunked_logits, {}, /*chunk=*/13);
  EXPECT_EQ(whole, chunked);
  for (size_t i = 0; i < whole_logits.size(); ++i) {
    float top = 0, diff = 0;
    for (size_t v = 0; v < whole_logits[i].size(); ++v) {
      top = std::max(top, std::fabs(whole_logits[i][v]));
      diff = std::max(diff, std::fabs(whole_logits[i][v] - chunked_logits[i][v]));
    }
    EXPECT_LE(diff, 1e-3f * top) << "step " << i;
  }
}

TEST(Qwen35, PrefixCopiesNeedAStateAtThatLength) {
  auto e = testing::open_engine(model_path(), 512, 4);
  ASSERT_TRUE(e.forward);
  const auto p = prompt(40, 2);
  const std::vector<TokenId> first(p.begin(), p.begin() + 24), rest(p.begin() + 24, p.end());
  testing::greedy(e, first, 1, 0);  // reads the 24 tokens (the sampled one is not fed)
  ASSERT_TRUE(e.cache->seq_snapshot(0).ok());
  EXPECT_EQ(e.cache->seq_snapshots(0), std::vector<int>{24});
  const auto reference = testing::greedy(e, rest, 6, 0);  // sequence 0 goes on to 40 + 6 tokens

  Status mid = e.cache->seq_copy_prefix(0, 1, 30);
  ASSERT_FALSE(mid.ok());
  EXPECT_NE(mid.error().message.find("no recurrent state at position 30"), std::string::npos);
  EXPECT_EQ(e.cache->seq_length(1), 0);

  // From the snapshot: the same continuation as the original.
  ASSERT_TRUE(e.cache->seq_copy_prefix(0, 1, 24).ok());
  EXPECT_EQ(testing::greedy(e, rest, 6, 1), reference);
  // From the whole sequence (its live state).
  ASSERT_TRUE(e.cache->seq_copy_prefix(1, 2, e.cache->seq_length(1)).ok());
  EXPECT_EQ(testing::greedy(e, {reference.back()}, 3, 2), testing::greedy(e, {reference.back()}, 3, 1));

  // Cut back to the snapshot, the sequence continues as before; cut back
  // anywhere else, it cannot go on.
  e.cache->seq_truncate(0, 24);
  EXPECT_EQ(testing::greedy(e, rest, 6, 0), reference);
  e.cache->seq_truncate(0, 30);
  Batch next;
  next.rows.push_back({5, 30, 0, true, {}});
  auto refused = e.forward->run(next);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("without a recurrent state snapshot"), std::string::npos);
  // Freed, its snapshots go too.
  e.cache->seq_free(0);
  EXPECT_TRUE(e.cache->seq_snapshots(0).empty());
}

TEST(Qwen35, ASequenceMustBeOneRunOfRows) {
  auto e = testing::open_engine(model_path(), 256, 4);
  ASSERT_TRUE(e.forward);
  Batch b;
  b.rows = {{5, 0, 0, false, {}}, {6, 0, 1, false, {}}, {7, 1, 0, true, {}}};
  auto r = e.forward->run(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("rows apart"), std::string::npos);
  EXPECT_EQ(e.cache->cells_used(), 0);
}

// --- The engine on the hybrid model -------------------------------------

class NoText : public TokenText {
 public:
  bool is_end_of_generation(TokenId) const override { return false; }
  std::unique_ptr<TextStream> open_stream(bool) const override {
    struct S : TextStream {
      std::string push(TokenId) override { return {}; }
      std::string flush() override { return {}; }
    };
    return std::make_unique<S>();
  }
};

struct Completion {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<TokenId> tokens;
  bool done = false;
  GenerationEvent final;
  EventSink sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard lock(mutex);
      for (auto& t : e.tokens) tokens.push_back(t.id);
      if (e.done) {
        done = true;
        final = e;
        cv.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, 120s, [&] { return done; }));
  }
};

class Qwen35Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(model_path());
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model);
  }
  std::unique_ptr<Engine> make_engine(bool prefix_cache, int64_t kv_cells = 4096, int step_tokens = 512) {
    ModelExecutorOptions options;
    options.n_ctx = 1024;
    options.kv_cells = kv_cells;
    options.max_sequences = 16;
    options.n_threads = 2;
    auto executor = make_model_executor(*model_, options);
    EXPECT_TRUE(executor.ok()) << executor.error().message;
    EngineConfig config;
    config.max_running = 8;
    config.step_tokens = step_tokens;
    config.prefix_cache = prefix_cache;
    return std::make_unique<Engine>(std::move(*executor), std::make_shared<NoText>(), config);
  }
  static GenerationRequest greedy(std::vector<TokenId> p, int n) {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.max_tokens = n;
    r.sampling.temperature = 0;
    return r;
  }
  std::vector<TokenId> alone(const std::vector<TokenId>& p, int n) {
    auto engine = make_engine(/*prefix_cache=*/false);
    Completion run;
    EXPECT_TRUE(engine->submit(greedy(p, n), run.sink()).ok());
    run.wait();
    return run.tokens;
  }
  std::unique_ptr<Model> model_;
};

TEST_F(Qwen35Engine, ConcurrentRequestsWithChunkedPrefillMatchEachAlone) {
  const std::vector<std::vector<TokenId>> prompts = {prompt(70, 1), prompt(9, 2), prompt(33, 3)};
  std::vector<std::vector<TokenId>> want;
  for (const auto& p : prompts) want.push_back(alone(p, 10));
  auto engine = make_engine(/*prefix_cache=*/false, 4096, /*step_tokens=*/24);
  std::vector<std::unique_ptr<Completion>> runs;
  for (const auto& p : prompts) {
    runs.push_back(std::make_unique<Completion>());
    ASSERT_TRUE(engine->submit(greedy(p, 10), runs.back()->sink()).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    runs[i]->wait();
    EXPECT_EQ(runs[i]->tokens, want[i]) << "request " << i;
  }
}

TEST_F(Qwen35Engine, ASharedPrefixStartsFromTheNearestStateAndGivesTheSameTokens) {
  const auto shared = prompt(600, 5);
  auto first = shared, second = shared;
  for (TokenId t : prompt(40, 6)) first.push_back(t);
  for (TokenId t : prompt(30, 7)) second.push_back(t);
  const auto second_alone = alone(second, 8);

  auto engine = make_engine(/*prefix_cache=*/true);
  Completion a, b;
  ASSERT_TRUE(engine->submit(greedy(first, 4), a.sink()).ok());
  a.wait();
  EXPECT_GE(engine->stats().state_snapshots, 1);
  EXPECT_GT(engine->stats().state_bytes, 0);
  ASSERT_TRUE(engine->submit(greedy(second, 8), b.sink()).ok());
  b.wait();
  // The prompt was read in 512-token chunks, the state kept after the first:
  // 512 of the 600 shared tokens have a state to start from.
  EXPECT_EQ(b.final.usage.cached_tokens, 512);
  EXPECT_EQ(b.tokens, second_alone);

  // A prompt that continues a whole cached sequence takes its state as it is.
  auto third = first;
  third.insert(third.end(), a.tokens.begin(), a.tokens.end() - 1);  // the last token was never fed
  third.push_back(77);
  const auto third_alone = alone(third, 6);
  Completion c;
  ASSERT_TRUE(engine->submit(greedy(third, 6), c.sink()).ok());
  c.wait();
  EXPECT_EQ(c.final.usage.cached_tokens, int(first.size() + a.tokens.size() - 1));
  EXPECT_EQ(c.tokens, third_alone);
}

TEST_F(Qwen35Engine, AdmissionCountsRecurrentStatesAndExtrasWait) {
  // Each request: 300 + 200 KV cells plus its state's worth of cells (66 for
  // this model). Three fit the 1600-cell budget by their KV alone, two with
  // their states.
  auto engine = make_engine(/*prefix_cache=*/false, /*kv_cells=*/1600);
  const int64_t state_cells = 66;
  ASSERT_EQ((engine->limits().state_bytes + engine->limits().kv_bytes_per_token - 1) /
                engine->limits().kv_bytes_per_token,
            state_cells);
  std::vector<std::unique_ptr<Completion>> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(std::make_unique<Completion>());
    ASSERT_TRUE(engine->submit(greedy(prompt(300, 10 + i), 200), runs.back()->sink()).ok());
  }
  int most_running = 0;
  bool extras_waited = false;
  for (;;) {
    const EngineStats s = engine->stats();
    most_running = std::max(most_running, s.running);
    extras_waited = extras_waited || (s.running == 2 && s.waiting == 2);
    EXPECT_LE(s.kv_reserved_tokens, s.kv_budget_tokens);
    if (s.requests_finished == 4) break;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(most_running, 2);
  EXPECT_TRUE(extras_waited);
  for (auto& r : runs) {
    r->wait();
    EXPECT_EQ(r->tokens.size(), 200u);
  }
}

}  // namespace
}  // namespace graft
