// The engine on a real (tiny, random-weight) model: batched requests and
// reused prefixes give the tokens each request gets alone.
#include "engine/model_executor.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "testing/address_space_limit.h"
#include "testing/test_models.h"

namespace graft {
namespace {

using namespace std::chrono_literals;

class NoText : public TokenText {
 public:
  explicit NoText(TokenId eos) : eos_(eos) {}
  bool is_end_of_generation(TokenId t) const override { return t == eos_; }
  std::unique_ptr<TextStream> open_stream(bool) const override {
    struct S : TextStream {
      std::string push(TokenId) override { return {}; }
      std::string flush() override { return {}; }
    };
    return std::make_unique<S>();
  }

 private:
  TokenId eos_;
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
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return done; }));
  }
};

class ModelEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")));
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model);
  }
  std::unique_ptr<Engine> make_engine(int step_tokens = 64, bool prefix_cache = true) {
    ModelExecutorOptions options;
    options.n_ctx = 512;
    options.kv_cells = 4096;
    options.max_sequences = 16;
    options.n_threads = 2;
    auto executor = make_model_executor(*model_, options);
    EXPECT_TRUE(executor.ok());
    EngineConfig config;
    config.max_running = 8;
    config.step_tokens = step_tokens;
    config.prefix_cache = prefix_cache;
    return std::make_unique<Engine>(std::move(*executor), std::make_shared<NoText>(-1), config);
  }
  static GenerationRequest greedy(std::vector<TokenId> prompt, int n) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.sampling.temperature = 0;
    return r;
  }
  static std::vector<TokenId> prompt(int n, int seed) {
    std::vector<TokenId> p;
    for (int i = 0; i < n; ++i) p.push_back(100 + (seed * 7919 + i * 104729) % 5000);
    return p;
  }
  std::unique_ptr<Model> model_;
};

TEST_F(ModelEngine, ConcurrentGreedyRequestsMatchEachAlone) {
  std::vector<std::vector<TokenId>> prompts = {prompt(70, 1), prompt(9, 2), prompt(33, 3), prompt(5, 4)};
  std::vector<std::vector<TokenId>> alone;
  {
    auto engine = make_engine(64, /*prefix_cache=*/false);
    for (auto& p : prompts) {
      Completion run;
      ASSERT_TRUE(engine->submit(greedy(p, 12), run.sink()).ok());
      run.wait();
      EXPECT_EQ(run.tokens.size(), 12u);
      alone.push_back(run.tokens);
    }
  }
  auto engine = make_engine(/*step_tokens=*/24, /*prefix_cache=*/false);  // chunked prefill mixed with decode
  std::vector<std::unique_ptr<Completion>> runs;
  for (auto& p : prompts) {
    runs.push_back(std::make_unique<Completion>());
    ASSERT_TRUE(engine->submit(greedy(p, 12), runs.back()->sink()).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    runs[i]->wait();
    EXPECT_EQ(runs[i]->tokens, alone[i]) << "request " << i;
  }
}

TEST_F(ModelEngine, AReusedPrefixGivesTheSameTokens) {
  auto shared = prompt(40, 9);
  auto p2 = shared;
  p2.push_back(321);
  p2.push_back(654);
  std::vector<TokenId> fresh;
  {
    auto engine = make_engine(64, /*prefix_cache=*/false);
    Completion run;
    ASSERT_TRUE(engine->submit(greedy(p2, 10), run.sink()).ok());
    run.wait();
    fresh = run.tokens;
  }
  auto engine = make_engine(64, /*prefix_cache=*/true);
  Completion first, second;
  ASSERT_TRUE(engine->submit(greedy(shared, 4), first.sink()).ok());
  first.wait();
  ASSERT_TRUE(engine->submit(greedy(p2, 10), second.sink()).ok());
  second.wait();
  EXPECT_EQ(second.final.usage.cached_tokens, 40);
  EXPECT_EQ(second.tokens, fresh);
}

TEST_F(ModelEngine, SeededSamplingRepeatsAndLogprobsAreProbabilities) {
  auto engine = make_engine();
  auto sample_once = [&](uint64_t seed) {
    GenerationRequest r = greedy(prompt(10, 5), 8);
    r.sampling.temperature = 1.0f;
    r.sampling.has_seed = true;
    r.sampling.seed = seed;
    r.top_logprobs = 3;
    auto run = std::make_unique<Completion>();
    std::vector<GeneratedToken> got;
    std::mutex m;
    EXPECT_TRUE(engine
                    ->submit(r,
                             [&, sink = run->sink()](GenerationEvent&& e) mutable {
                               {
                                 std::lock_guard lock(m);
                                 for (auto& t : e.tokens) got.push_back(t);
                               }
                               sink(std::move(e));
                             })
                    .ok());
    run->wait();
    std::lock_guard lock(m);
    return got;
  };
  auto a = sample_once(123);
  auto b = sample_once(123);
  ASSERT_EQ(a.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_LE(a[i].logprob, 0.0f);
    ASSERT_EQ(a[i].top.size(), 3u);
    EXPECT_GE(a[i].top[0].logprob, a[i].top[1].logprob);
  }
}

// The compute memory for the largest batch is allocated up front; when it
// cannot be, making the executor fails and says why.
TEST_F(ModelEngine, RefusesBatchesWhoseComputeMemoryCannotBeAllocated) {
  ModelExecutorOptions options;
  options.n_ctx = 512;
  options.kv_cells = 512;
  options.n_threads = 2;
  options.max_batch_rows = 1 << 20;  // 1 GiB of attention mask alone
  testing::AddressSpaceLimit limit(size_t(256) << 20);
  auto executor = make_model_executor(*model_, options);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.error().code, "out_of_memory");
  EXPECT_NE(executor.error().message.find("compute memory for a batch of 1048576 rows"), std::string::npos)
      << executor.error().message;
}

TEST_F(ModelEngine, RefusesAKvCacheSmallerThanOneContext) {
  ModelExecutorOptions options;
  options.n_ctx = 512;
  options.kv_cells = 100;
  auto executor = make_model_executor(*model_, options);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.error().message.find("512"), std::string::npos);
}

// Memory: a sliding-window model (two of its three layers look at the last 8
// positions) keeps only each sequence's window in those layers, so the same
// KV budget admits more long requests at once than the same model with every
// layer global, and what it admits never overruns its cache.
TEST(WindowMemory, ASlidingWindowModelAdmitsMoreLongRequests) {
  constexpr int kBudget = 1024, kCtx = 256, kPrompt = 128, kRequests = 16;
  struct Run {
    int peak = 0;  // requests running at once (first token seen, not done)
    int finished = 0;
    int64_t global_cells = 0, window_cells = 0, window_cells_total = 0, window_peak = 0;
  };
  auto run = [&](const TestModelSpec& spec) {
    Run out;
    auto model = Model::load(testing::test_model_path(spec));
    EXPECT_TRUE(model.ok());
    if (!model.ok()) return out;
    ModelExecutorOptions options;
    options.n_ctx = kCtx;
    options.kv_cells = kBudget;
    options.max_sequences = kRequests;
    options.max_batch_rows = 64;
    options.n_threads = 2;
    auto executor = make_model_executor(**model, options);
    EXPECT_TRUE(executor.ok()) << (executor.ok() ? "" : executor.error().message);
    if (!executor.ok()) return out;
    out.global_cells = (*executor)->limits().kv_cells;
    EngineConfig config;
    config.max_running = kRequests;
    config.step_tokens = 64;
    config.prefix_cache = false;
    Engine engine(std::move(*executor), std::make_shared<NoText>(-1), config);
    std::mutex mutex;
    int running = 0;
    std::vector<Completion> done(kRequests);
    // Submitted between two steps, so the first step sees them all.
    Status submitted = engine.run_on_engine_thread([&]() -> Status {
      for (int i = 0; i < kRequests; ++i) {
        GenerationRequest r;
        for (int k = 0; k < kPrompt; ++k) r.prompt.push_back(TokenId(1000 + 37 * i + k));
        r.max_tokens = kCtx - kPrompt;
        r.ignore_eos = true;
        auto first = std::make_shared<bool>(false);
        EventSink inner = done[size_t(i)].sink();
        auto id = engine.submit(std::move(r), [&, first, inner](GenerationEvent&& e) {
          {
            std::lock_guard lock(mutex);
            if (!*first) {
              *first = true;
              out.peak = std::max(out.peak, ++running);
            }
            if (e.done) --running;
          }
          inner(std::move(e));
        });
        if (!id.ok()) return id.error();
      }
      return {};
    });
    EXPECT_TRUE(submitted.ok());
    for (int i = 0; i < kRequests; ++i) {
      // The windows in use stay within their pool all along.
      const EngineStats s = engine.stats();
      out.window_peak = std::max(out.window_peak, s.kv_window_cells);
      EXPECT_LE(s.kv_window_cells, s.kv_window_cells_total);
      EXPECT_LE(s.kv_reserved_tokens, s.kv_budget_tokens);
      done[size_t(i)].wait();
      out.finished += done[size_t(i)].final.finish_reason == FinishReason::kLength;
    }
    const EngineStats s = engine.stats();
    out.window_cells_total = s.kv_window_cells_total;
    EXPECT_EQ(s.requests_failed, 0u);
    // The cache takes no more memory than the budget's tokens of every layer.
    EXPECT_LE(s.kv_budget_bytes,
              int64_t{kBudget} * int64_t(kv_bytes_per_token((*model)->config(), GGML_TYPE_F16)));
    EXPECT_GT(s.kv_budget_bytes,
              int64_t{kBudget - 8} * int64_t(kv_bytes_per_token((*model)->config(), GGML_TYPE_F16)));
    return out;
  };
  TestModelSpec sliding = testing::tiny_gemma3_spec("llama-bpe", "f16");
  TestModelSpec global = sliding;
  global.sliding_window = 0;  // the same shape, every layer global
  const Run g = run(global);
  const Run w = run(sliding);
  std::printf(
      "[ window memory ] budget %d tokens, context %d, %d requests of %d tokens: full attention %lld cells, "
      "%d at once; sliding window 8: %lld global cells and %lld window cells (at most %lld seen in use), %d "
      "at once\n",
      kBudget, kCtx, kRequests, kCtx, (long long)g.global_cells, g.peak, (long long)w.global_cells,
      (long long)w.window_cells_total, (long long)w.window_peak, w.peak);
  EXPECT_EQ(g.finished, kRequests);
  EXPECT_EQ(w.finished, kRequests);
  EXPECT_EQ(g.global_cells, kBudget);
  EXPECT_EQ(g.peak, kBudget / kCtx);
  EXPECT_EQ(g.window_cells_total, 0);
  // Never more than the cells hold, and more than full attention admits.
  EXPECT_LE(w.peak, w.global_cells / kCtx);
  EXPECT_GT(w.peak, g.peak);
  EXPECT_GT(w.window_cells_total, 0);
}

}  // namespace
}  // namespace graft
