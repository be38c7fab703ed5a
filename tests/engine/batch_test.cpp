// Batched equals single: prompts run as rows of one batch (different lengths,
// joining at different steps) give the same greedy tokens as each run alone,
// and logits within 1e-3 of the largest logit at every step.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "testing/test_models.h"

namespace graft {
namespace {

struct Stream {
  std::vector<TokenId> prompt;
  int join_step;  // the batched step at which its prompt enters the batch
  std::vector<TokenId> tokens;
  std::vector<std::vector<float>> logits;
};

// Runs every stream through one shared batch per step: a stream joins with
// its whole prompt as a chunk at its join step, then adds one decode row per
// step until it has n tokens.
void run_batched(testing::Engine& e, std::vector<Stream>& streams, int n) {
  int step = 0;
  auto done = [&] {
    return std::all_of(streams.begin(), streams.end(),
                       [&](const Stream& s) { return int(s.tokens.size()) >= n; });
  };
  while (!done()) {
    Batch batch;
    std::vector<int> owner;  // stream of each logits row
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& s = streams[i];
      const SeqId seq = SeqId(i);
      if (step == s.join_step) {
        for (size_t k = 0; k < s.prompt.size(); ++k) {
          batch.rows.push_back({s.prompt[k], int(k), seq, k + 1 == s.prompt.size(), {}});
        }
        owner.push_back(int(i));
      } else if (step > s.join_step && int(s.tokens.size()) < n) {
        batch.rows.push_back({s.tokens.back(), e.cache->seq_length(seq), seq, true, {}});
        owner.push_back(int(i));
      }
    }
    if (!batch.rows.empty()) {
      auto r = e.forward->run(batch);
      ASSERT_TRUE(r.ok()) << r.error().message;
      for (int k = 0; k < r->n_rows; ++k) {
        Stream& s = streams[size_t(owner[size_t(k)])];
        s.logits.emplace_back(r->row(k), r->row(k) + r->n_vocab);
        s.tokens.push_back(argmax(r->row(k), r->n_vocab));
      }
    }
    ++step;
  }
}

void expect_batched_equals_single(const TestModelSpec& spec, ggml_type kv_type = GGML_TYPE_F16) {
  constexpr int kTokens = 12;
  std::vector<Stream> streams = {
      {{128000, 791, 4062, 14198, 39935}, 0, {}, {}},
      {{128000, 12805, 5304, 264, 892, 11, 304, 264, 4363, 3117, 3201, 11, 1070, 12439, 264}, 0, {}, {}},
      {{128000, 9906}, 2, {}, {}},
      {{128000, 16, 11, 220, 17, 11, 220, 18, 11}, 5, {}, {}},
  };
  auto batched = testing::open_engine(testing::test_model_path(spec), 1024, 8, 2, kv_type);
  ASSERT_TRUE(batched.forward);
  run_batched(batched, streams, kTokens);

  auto single = testing::open_engine(testing::test_model_path(spec), 1024, 8, 2, kv_type);
  float worst = 0.0f;
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<std::vector<float>> logits;
    const auto alone = testing::greedy(single, streams[i].prompt, kTokens, SeqId(i), &logits);
    EXPECT_EQ(streams[i].tokens, alone) << "stream " << i;
    for (size_t step = 0; step < logits.size() && step < streams[i].logits.size(); ++step) {
      const auto& a = logits[step];
      const auto& b = streams[i].logits[step];
      ASSERT_EQ(a.size(), b.size());
      float top = 0.0f;
      for (const float x : a) {
        if (std::isfinite(x)) top = std::max(top, std::fabs(x));
      }
      // Each logit on its own: finite on both sides and within the bound (a
      // NaN fails the comparison instead of vanishing in a running maximum).
      size_t off = 0, first = 0;
      float largest = 0.0f;
      for (size_t v = 0; v < a.size(); ++v) {
        const float diff = std::fabs(a[v] - b[v]);
        if (std::isfinite(a[v]) && std::isfinite(b[v]) && diff <= 1e-3f * top) {
          largest = std::max(largest, diff);
          continue;
        }
        if (off++ == 0) first = v;
      }
      EXPECT_EQ(off, 0u) << "stream " << i << " step " << step << ": " << off << " logits off, the first "
                         << first << ": alone " << a[first] << ", batched " << b[first]
                         << " (largest |logit| " << top << ")";
      if (top > 0.0f) worst = std::max(worst, largest / top);
    }
  }
  std::printf("[ batched vs single, %s %s, %s KV ] largest logit deviation: %.3g of the largest logit\n",
              spec.arch.c_str(), spec.type.c_str(), ggml_type_name(kv_type), double(worst));
}

TEST(BatchedEqualsSingle, LlamaF16) {
  expect_batched_equals_single(testing::tiny_spec("llama", "llama-bpe", "f16"));
}
TEST(BatchedEqualsSingle, LlamaQ4_0) {
  expect_batched_equals_single(testing::tiny_spec("llama", "llama-bpe", "q4_0"));
}
TEST(BatchedEqualsSingle, Qwen3Q8_0) {
  expect_batched_equals_single(testing::tiny_spec("qwen3", "llama-bpe", "q8_0"));
}
// Hybrid: every row reads and writes its own sequence's recurrent state, in
// groups of prompt chunks and decode rows.
TEST(BatchedEqualsSingle, Qwen35Q8_0) {
  expect_batched_equals_single(testing::tiny_qwen35_spec("llama-bpe", "q8_0"));
}

// Sliding-window layers: each row sees only the last 8 positions of its own
// sequence there, the prompts are longer than that, and rows of prompts and
// decode steps of several sequences share a batch (and a mask per row).
TEST(BatchedEqualsSingle, Gemma3F16) {
  expect_batched_equals_single(testing::tiny_gemma3_spec("llama-bpe", "f16"));
}
TEST(BatchedEqualsSingle, Gemma3Q4_0) {
  expect_batched_equals_single(testing::tiny_gemma3_spec("llama-bpe", "q4_0"));
}
// A Q8_0 KV cache: keys and values stored in 8-bit blocks, rows of several
// sequences reading them in one batch.
TEST(BatchedEqualsSingle, LlamaQ4_0WithQ8_0Kv) {
  expect_batched_equals_single(testing::tiny_spec("llama", "llama-bpe", "q4_0"), GGML_TYPE_Q8_0);
}
TEST(BatchedEqualsSingle, Qwen35Q8_0WithQ8_0Kv) {
  expect_batched_equals_single(testing::tiny_qwen35_spec("llama-bpe", "q8_0"), GGML_TYPE_Q8_0);
}
TEST(BatchedEqualsSingle, Gemma3Q4_0WithQ8_0Kv) {
  expect_batched_equals_single(testing::tiny_gemma3_spec("llama-bpe", "q4_0"), GGML_TYPE_Q8_0);
}
// Gemma 4: the same windows, and layers attending over other layers' keys
// and values, heads of two widths and per-layer inputs.
TEST(BatchedEqualsSingle, Gemma4F16) {
  expect_batched_equals_single(testing::tiny_gemma4_spec("llama-bpe", "f16"));
}
TEST(BatchedEqualsSingle, Gemma4Q4_0) {
  expect_batched_equals_single(testing::tiny_gemma4_spec("llama-bpe", "q4_0"));
}
// Embedding, residual and logit scalings.
TEST(BatchedEqualsSingle, MiniCpmQ8_0) {
  expect_batched_equals_single(testing::tiny_spec("minicpm", "llama-bpe", "q8_0"));
}

}  // namespace
}  // namespace graft
