// The memory model counts what graft allocates: checked against the real
// objects (a loaded model, a KV cache, a Forward's compute buffer).
#include <gtest/gtest.h>

#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "fit/fit.h"
#include "testing/test_models.h"

namespace graft::fit {
namespace {

std::string model_path(const std::string& type, const std::string& arch = "llama") {
  TestModelSpec spec = testing::tiny_spec(arch, "llama-spm", type);
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_ctx = 4096;
  return testing::test_model_path(spec);
}

TEST(FitMemory, TheLayoutHasTheLoadedModelsWeightBytesWithoutReadingThem) {
  for (const std::string type : {"f16", "q8_0", "q4_0"}) {
    auto loaded = Model::load(model_path(type));
    auto layout = Model::load_layout(model_path(type));
    ASSERT_TRUE(loaded.ok() && layout.ok()) << type;
    EXPECT_EQ((*layout)->weight_bytes(), (*loaded)->weight_bytes()) << type;
    EXPECT_EQ((*layout)->repacked_bytes(), (*loaded)->repacked_bytes()) << type;
    EXPECT_EQ((*layout)->config().n_vocab, (*loaded)->config().n_vocab) << type;
    EXPECT_EQ((*layout)->weights().tok_embd->data, nullptr) << type;  // nothing mapped, nothing read
  }
}

TEST(FitMemory, KvFootprintIsWhatTheCacheAllocates) {
  auto model = Model::load_layout(model_path("f16"));
  ASSERT_TRUE(model.ok());
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_Q8_0}) {
    KvCacheOptions options;
    options.n_cells = 1000;
    options.type = type;
    auto cache = KvCache::create((*model)->config(), options);
    ASSERT_TRUE(cache.ok());
    const KvCache::Footprint f = KvCache::footprint((*model)->config(), type);
    EXPECT_EQ(f.bytes_per_cell, (*cache)->bytes_per_token());
    EXPECT_EQ(f.bytes_per_sequence, 0u);  // full attention keeps nothing per sequence
    // The buffer only adds alignment padding between its tensors.
    EXPECT_GE((*cache)->bytes_total(), 1000 * f.bytes_per_cell);
    EXPECT_LE((*cache)->bytes_total(), 1000 * f.bytes_per_cell + 2 * 64 * size_t((*model)->config().n_layer));
  }
}

// A hybrid model keeps K and V for its attention layers only, and a
// recurrent state per sequence for the others.
TEST(FitMemory, KvFootprintOfAHybridModelIsWhatTheCacheAllocates) {
  auto model = Model::load_layout(testing::test_model_path(testing::tiny_qwen35_spec("llama-spm", "f16")));
  ASSERT_TRUE(model.ok());
  const ModelConfig& c = (*model)->config();
  ASSERT_GT(c.n_recurrent_layers(), 0);
  ASSERT_LT(c.n_recurrent_layers(), c.n_layer);
  KvCacheOptions options;
  options.n_cells = 1000;
  options.n_seq_max = 3;
  auto cache = KvCache::create(c, options);
  ASSERT_TRUE(cache.ok());
  const KvCache::Footprint f = KvCache::footprint(c, GGML_TYPE_F16);
  EXPECT_EQ(f.bytes_per_cell, (*cache)->bytes_per_token());
  EXPECT_GT(f.bytes_per_sequence, 0u);
  const size_t planned = 1000 * f.bytes_per_cell + 3 * f.bytes_per_sequence;
  EXPECT_GE((*cache)->bytes_total(), planned);
  EXPECT_LE((*cache)->bytes_total(), planned + 2 * 64 * size_t(c.n_layer));
}

TEST(FitMemory, MeasuredComputeIsTheBufferForwardReserves) {
  for (const std::string type : {"f16", "q4_0"}) {
    auto model = Model::load(model_path(type));
    auto layout = Model::load_layout(model_path(type));
    ASSERT_TRUE(model.ok() && layout.ok());
    KvCacheOptions options;
    options.n_cells = 2048;
    options.n_seq_max = 16;
    auto cache = KvCache::create((*model)->config(), options);
    ASSERT_TRUE(cache.ok());
    Forward forward(**model, **cache, 2);
    ASSERT_TRUE(forward.reserve(512, 16).ok()) << type;
    const Forward::Measure m = Forward::measure(**layout, GGML_TYPE_F16, 2048, 512, 16, 2);
    EXPECT_EQ(m.compute_bytes, forward.compute_buffer_bytes()) << type;
    EXPECT_GT(m.work_bytes, 0u);
    EXPECT_GT(m.n_nodes, 10 * (*model)->config().n_layer);
  }
}

TEST(FitMemory, PartsAddUpAndFollowTheSettings) {
  auto model = FitModel::open(model_path("q8_0"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const FitModel& m = **model;
  EXPECT_EQ(m.quantization(), "Q8_0");
  EXPECT_GT(m.tokenizer_bytes(), 0);
  ServeSettings s;
  s.n_ctx = 1024;
  s.parallel = 2;
  s = m.resolve(s);
  EXPECT_EQ(s.kv_budget_tokens, 2048);
  const MemoryBreakdown a = m.memory(s);
  EXPECT_EQ(a.weights_mapped + a.weights_repacked + a.weights_copied, int64_t(m.layout().weight_bytes()));
  EXPECT_GT(a.weights_copied, 0);  // Q8_0 matrices are not repacked on x86: copied into huge pages
  EXPECT_EQ(a.kv, 2048 * int64_t(KvCache::footprint(m.config(), GGML_TYPE_F16).bytes_per_cell));
  EXPECT_GT(a.compute, 0);
  EXPECT_EQ(a.adapters, 0);
  EXPECT_EQ(a.total(), a.weights_mapped + a.weights_repacked + a.weights_copied + a.kv + a.compute +
                           a.adapters + a.requests + a.tokenizer + a.fixed);
  // Twice the parallel requests: twice the KV, twice the samplers, a larger mask.
  ServeSettings wider = s;
  wider.parallel = 4;
  wider.kv_budget_tokens = 0;
  const MemoryBreakdown b = m.memory(m.resolve(wider));
  EXPECT_EQ(b.kv, 2 * a.kv);
  EXPECT_EQ(b.requests, 2 * a.requests);
  EXPECT_GT(b.compute, a.compute);
  // q8_0 KV: 34 bytes per 32 values instead of 64.
  ServeSettings q8 = s;
  q8.kv_type = GGML_TYPE_Q8_0;
  EXPECT_EQ(m.memory(q8).kv * 64, a.kv * 34);
  // Adapters cost whole 2 MiB pages per slot.
  ServeSettings with_adapters = s;
  with_adapters.adapters = 3;
  const int64_t adapters = m.memory(with_adapters).adapters;
  EXPECT_GE(adapters, 3 * (int64_t(2) << 20));
}

TEST(FitMemory, TheSolverFindsTheLimitsExactly) {
  auto model = FitModel::open(model_path("f16"));
  ASSERT_TRUE(model.ok());
  const FitModel& m = **model;
  ServeSettings s;
  s.n_ctx = 2048;
  s.parallel = 4;
  s = m.resolve(s);
  const int64_t need = m.memory(s).total();
  // Room for the asked settings and a little more.
  FitAnswer yes = solve(m, s, need + (int64_t(1) << 20));
  EXPECT_TRUE(yes.fits);
  EXPECT_EQ(yes.kv_budget_tokens, 4 * 2048);
  EXPECT_GE(yes.max_parallel, 4);
  EXPECT_GE(yes.max_safe_context, 2048);
  // Not quite enough: the answers are the largest settings that fit.
  const int64_t usable = need - 1;
  FitAnswer no = solve(m, s, usable);
  EXPECT_FALSE(no.fits);
  EXPECT_NE(no.reason.find("but only"), std::string::npos) << no.reason;
  auto with = [&](int ctx, int parallel) {
    ServeSettings t = s;
    t.n_ctx = ctx;
    t.parallel = parallel;
    t.kv_budget_tokens = 0;
    return m.memory(m.resolve(t)).total();
  };
  ASSERT_GT(no.max_safe_context, 0);
  EXPECT_LE(with(no.max_safe_context, 4), usable);
  EXPECT_GT(with(no.max_safe_context + 256, 4), usable);
  EXPECT_EQ(no.max_parallel, 3);
  EXPECT_LE(with(2048, 3), usable);
  ASSERT_GT(no.kv_budget_tokens, 0);
  EXPECT_LT(no.kv_budget_tokens, 4 * 2048);
  ServeSettings budget = s;
  budget.kv_budget_tokens = no.kv_budget_tokens;
  EXPECT_LE(m.memory(budget).total(), usable);
  budget.kv_budget_tokens += 256;
  EXPECT_GT(m.memory(budget).total(), usable);
  // Nothing fits in a megabyte.
  FitAnswer none = solve(m, s, int64_t(1) << 20);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(none.max_safe_context, 0);
  EXPECT_EQ(none.max_parallel, 0);
  EXPECT_EQ(none.kv_budget_tokens, 0);
}

TEST(FitMemory, ARefusalGivesTheLargestContextThatFits) {
  auto model = FitModel::open(model_path("f16"));
  ASSERT_TRUE(model.ok());
  ServeSettings s;
  s.n_ctx = 4096;
  s.parallel = 2;
  s = (*model)->resolve(s);
  Usable usable;
  usable.bytes = (*model)->memory(s).total() - (int64_t(4) << 20);
  usable.free = usable.bytes;
  usable.source = "test";
  const FitReport report = make_report(**model, s, usable, nullptr, /*machines=*/false);
  ASSERT_FALSE(report.answer.fits);
  const std::string text = refusal(report);
  EXPECT_NE(text.find("--ctx " + std::to_string(report.answer.max_safe_context)), std::string::npos) << text;
  EXPECT_NE(text.find(format_bytes(usable.bytes)), std::string::npos) << text;
  const nlohmann::json j = to_json(report);
  EXPECT_EQ(j["fits"], false);
  EXPECT_EQ(j["max_safe_context"], report.answer.max_safe_context);
  EXPECT_EQ(j["memory"]["total"], report.answer.need.total());
  EXPECT_TRUE(j["speed"].is_null());
}

TEST(FitMemory, TheMachineTableGrowsWithMemory) {
  auto model = FitModel::open(model_path("q4_0"));
  ASSERT_TRUE(model.ok());
  ServeSettings s = (*model)->resolve(ServeSettings{});
  const FitReport report = make_report(**model, s, usable_on_machine(8), nullptr);
  ASSERT_EQ(report.machines.size(), 6u);
  EXPECT_EQ(report.machines.front().memory_gib, 8);
  EXPECT_EQ(report.machines.back().memory_gib, 128);
  for (size_t i = 1; i < report.machines.size(); ++i) {
    EXPECT_GE(report.machines[i].answer.max_parallel, report.machines[i - 1].answer.max_parallel);
    EXPECT_GT(report.machines[i].answer.usable, report.machines[i - 1].answer.usable);
  }
  EXPECT_EQ(usable_on_machine(16).free, (int64_t(16) << 30) - (int64_t(16) << 30) / 10);
}

}  // namespace
}  // namespace graft::fit
