// The probe's results, their cache, and predictions from injected rates.
#include <gtest/gtest.h>

#include <chrono>

#include "fit/fit.h"
#include "testing/test_models.h"

namespace graft::fit {
namespace {

// bandwidth_8: the weight bytes per second of an 8-row product (the same
// as one row's when reading the weights is all it costs).
ProbeResult made_up_probe(double bandwidth, double flops, double bandwidth_8 = 0) {
  ProbeResult p;
  p.cpu = "Test CPU";
  p.threads = 2;
  p.measured_at = "2025-01-01T00:00:00Z";
  for (const char* t : {"f16", "q8_0", "q4_0"}) {
    const double eight = bandwidth_8 > 0 ? bandwidth_8 : bandwidth;
    p.types[t] = {bandwidth, eight, flops, bandwidth, eight};
  }
  p.attention_decode = p.attention_prefill = p.attention_decode_64 = p.attention_prefill_64 = flops;
  p.node_seconds = 1e-12;
  return p;
}

// A small llama model in Q8_0, the one the prediction tests read.
std::string small_q8_0_model() {
  TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "q8_0");
  spec.n_embd = 256;
  spec.n_ff = 512;
  return testing::test_model_path(spec);
}

TEST(FitProbe, AQuickProbeMeasuresEveryRate) {
  const auto t0 = std::chrono::steady_clock::now();
  // One thread: on a busy machine, threads that wait for each other at every
  // node make the timing slow, not wrong.
  auto p = run_probe({1, /*quick=*/true});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->quick);
  EXPECT_EQ(p->threads, 1);
  EXPECT_FALSE(p->cpu.empty());
  for (const char* t : {"f16", "q8_0", "q4_0", "q4_K", "q6_K"}) {
    ASSERT_TRUE(p->types.count(t)) << t;
    EXPECT_GT(p->types.at(t).bytes_per_s, 1e7) << t;
    EXPECT_GT(p->types.at(t).bytes_per_s_8, 1e6) << t;
    // Eight rows never read the weights faster than one.
    EXPECT_LE(p->types.at(t).bytes_per_s_8, p->types.at(t).bytes_per_s) << t;
    EXPECT_GT(p->types.at(t).prefill_flops, 1e6) << t;
    EXPECT_GT(p->types.at(t).layer_bytes_per_s, 1e7) << t;
    EXPECT_GT(p->types.at(t).layer_bytes_per_s_8, 1e6) << t;
    EXPECT_LE(p->types.at(t).layer_bytes_per_s_8, p->types.at(t).layer_bytes_per_s) << t;
  }
  EXPECT_GT(p->attention_decode, 0);
  EXPECT_GT(p->attention_prefill, 0);
  EXPECT_GT(p->attention_decode_64, 0);
  EXPECT_GT(p->attention_prefill_64, 0);
  EXPECT_GE(p->attention_op_seconds, 0);
  EXPECT_GT(p->node_seconds, 0);
  EXPECT_LT(p->node_seconds, 0.01);
  EXPECT_LT(seconds, 20.0);  // well under a second on an idle machine
  // It round-trips through JSON.
  auto back = ProbeResult::from_json(p->to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->types.at("q4_0").bytes_per_s, p->types.at("q4_0").bytes_per_s);
  EXPECT_EQ(back->types.at("q8_0").layer_bytes_per_s_8, p->types.at("q8_0").layer_bytes_per_s_8);
}

TEST(FitProbe, TheCacheKeepsOneResultPerCpuAndThreadCount) {
  TempDir dir;
  const fs::path file = dir.path() / "graft" / "probe.json";
  auto none = load_cached_probe(file, "Test CPU", 2);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ProbeResult a = made_up_probe(1e10, 1e11);
  ProbeResult b = made_up_probe(2e10, 2e11);
  b.threads = 4;
  ASSERT_TRUE(save_probe(file, a).ok());
  ASSERT_TRUE(save_probe(file, b).ok());
  auto got = load_cached_probe(file, "Test CPU", 4);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->types.at("f16").bytes_per_s, 2e10);
  EXPECT_FALSE(load_cached_probe(file, "Other CPU", 2)->has_value());
  // Two entries: not one result to inject.
  EXPECT_FALSE(read_probe_file(file).ok());
}

TEST(FitProbe, ResultsOfAnOlderProbeAreMeasuredAnew) {
  TempDir dir;
  const fs::path file = dir.path() / "probe.json";
  nlohmann::json entry = made_up_probe(1e10, 1e11).to_json();
  entry.erase("version");  // the first probe's results had none
  nlohmann::json cache = {{"entries", {{"Test CPU / 2 threads", entry}}}};
  ASSERT_TRUE(write_file_atomic(file, cache.dump()).ok());
  auto cached = load_cached_probe(file, "Test CPU", 2);
  ASSERT_TRUE(cached.ok()) << cached.error().message;
  EXPECT_FALSE(cached->has_value());
  // Given as a file, it is refused with the reason.
  auto given = read_probe_file(file);
  ASSERT_FALSE(given.ok());
  EXPECT_NE(given.error().message.find("graft fit --probe"), std::string::npos) << given.error().message;
}

TEST(FitSpeed, ProductsBetweenOneAndEightRowsTakeTheMeasuredRates) {
  TypeRate r{1e9, 0.25e9, 1e11, 0.5e9, 0.125e9};
  EXPECT_DOUBLE_EQ(r.decode_seconds(1000000000, 1), 1.0);
  EXPECT_DOUBLE_EQ(r.decode_seconds(1000000000, 8), 4.0);
  EXPECT_DOUBLE_EQ(r.decode_seconds(1000000000, 4), 1.0 + 3.0 * 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(r.decode_seconds(1000000000, 15), 7.0);
  // A layer's matrices take the layer rates.
  EXPECT_DOUBLE_EQ(r.layer_decode_seconds(1000000000, 1), 2.0);
  EXPECT_DOUBLE_EQ(r.layer_decode_seconds(1000000000, 8), 8.0);
}

TEST(FitSpeed, LayerMatricesTakeTheLayerRatesAndTheOutputTheProducts) {
  auto model = FitModel::open(small_q8_0_model());
  ASSERT_TRUE(model.ok());
  const FitModel& m = **model;
  int64_t layer_bytes = 0, output_bytes = 0;
  for (const auto& mat : m.matrices()) (mat.layer >= 0 ? layer_bytes : output_bytes) += mat.bytes;
  ASSERT_GT(layer_bytes, 0);
  ASSERT_GT(output_bytes, 0);
  ProbeResult p = made_up_probe(1e9, 1e30);
  p.attention_decode = p.attention_decode_64 = 1e30;
  p.types["q8_0"].layer_bytes_per_s = 0.5e9;  // the layers' matrices stream at half the output's rate
  const SpeedPrediction got = predict_speed(m, m.resolve(ServeSettings{}), p);
  const double seconds = double(layer_bytes) / 0.5e9 + double(output_bytes) / 1e9;
  EXPECT_NEAR(got.decode_tps.at(1), 1.0 / seconds, 1e-4 / seconds);
}

TEST(FitProbe, BadProbeFilesAreRefusedWithTheField) {
  TempDir dir;
  const fs::path file = dir.path() / "probe.json";
  nlohmann::json j = made_up_probe(1e10, 1e11).to_json();
  j["types"]["q4_0"]["bytes_per_s"] = -1;
  ASSERT_TRUE(write_file_atomic(file, j.dump()).ok());
  auto r = read_probe_file(file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("bytes_per_s"), std::string::npos) << r.error().message;
  ASSERT_TRUE(write_file_atomic(file, "{not json").ok());
  EXPECT_FALSE(read_probe_file(file).ok());
}

TEST(FitSpeed, UntypedWeightsTakeTheNearestProbedType) {
  ProbeResult p = made_up_probe(1e10, 1e11);
  p.types["q4_0"].bytes_per_s = 3e10;
  EXPECT_EQ(p.rate(GGML_TYPE_Q4_1).bytes_per_s, 3e10);  // 5 bits per weight: nearest is q4_0's 4.5
  EXPECT_EQ(p.rate(GGML_TYPE_BF16).bytes_per_s, p.types["f16"].bytes_per_s);
}

TEST(FitSpeed, MemoryBoundDecodeStreamsEveryMatrixOnce) {
  auto model = FitModel::open(small_q8_0_model());
  ASSERT_TRUE(model.ok());
  const FitModel& m = **model;
  // Attention free, eight rows as cheap as one: a step costs its weights' bytes at the bandwidth.
  const ProbeResult p = made_up_probe(1e9, 1e30);
  const ServeSettings s = m.resolve(ServeSettings{});
  const SpeedPrediction one = predict_speed(m, s, p);
  int64_t matrix_bytes = 0;
  for (const auto& mat : m.matrices()) matrix_bytes += mat.bytes;
  // Every weight but the embedding (read by rows) and the F32 norms.
  const auto* embd = m.layout().gguf().find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  int64_t norms = 0;
  for (const auto& t : m.layout().gguf().tensors()) norms += t.n_dims == 1 ? int64_t(t.size) : 0;
  EXPECT_EQ(matrix_bytes, int64_t(m.layout().weight_bytes()) - int64_t(embd->size) - norms);
  EXPECT_NEAR(one.decode_tps.at(1), 1e9 / double(matrix_bytes), 1e9 / double(matrix_bytes) * 1e-6);
  // Eight rows stream the same bytes once: eight times the tokens.
  EXPECT_NEAR(one.decode_tps.at(8), 8 * one.decode_tps.at(1), one.decode_tps.at(1) * 1e-5);
  // Rows that cost in proportion (8 rows read 1/8 as many weight bytes per
  // second) give no more tokens per second.
  ProbeResult bound_probe = made_up_probe(1e9, 1e30, 1e9 / 8);
  bound_probe.attention_decode = bound_probe.attention_decode_64 = 1e30;
  const SpeedPrediction bound = predict_speed(m, s, bound_probe);
  EXPECT_NEAR(bound.decode_tps.at(8), bound.decode_tps.at(1), bound.decode_tps.at(1) * 0.01);
  EXPECT_GT(bound.prefill_tps, 0);
}

TEST(FitSpeed, AttentionCostFollowsTheHeadWidth) {
  ProbeResult p;
  p.attention_decode = 10e9;    // units per second with heads 128 wide
  p.attention_decode_64 = 4e9;  // and 64 wide: a narrow head's cell costs more per unit
  p.attention_prefill = 40e9;
  p.attention_prefill_64 = 40e9;
  const double pairs = 1e6;  // row x cell x head
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 128, false), pairs * 128 / 10e9);
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 64, false), pairs * 64 / 4e9);
  // Between and beyond: linear in the width through the two.
  const double at_64 = 64 / 4e9, at_128 = 128 / 10e9;
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 96, false), pairs * (at_64 + at_128) / 2);
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 256, false), pairs * (at_128 + 2 * (at_128 - at_64)));
  // The prompt's rates are their own; equal rates per unit: in proportion to the width.
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 256, true), pairs * 256 / 40e9);
  // Without the narrow measurement (0): as at 128, per unit.
  p.attention_decode_64 = 0;
  EXPECT_DOUBLE_EQ(p.attention_seconds(pairs, 64, false), pairs * 64 / 10e9);
  // A result without either figure is from an older probe: refused.
  p.attention_decode_64 = 4e9;
  p.cpu = "Test CPU";
  p.types["f16"] = {1e9, 1e9, 1e9, 1e9, 1e9};
  p.node_seconds = 1e-9;
  ASSERT_TRUE(ProbeResult::from_json(p.to_json()).ok());
  for (const char* key : {"attention_decode_64", "attention_prefill_64"}) {
    nlohmann::json j = p.to_json();
    j.erase(key);
    EXPECT_FALSE(ProbeResult::from_json(j).ok()) << key;
  }
}

TEST(FitSpeed, EachDecodeRowPaysAnAttentionOpPerLayer) {
  auto model = FitModel::open(small_q8_0_model());
  ASSERT_TRUE(model.ok());
  const FitModel& m = **model;
  ProbeResult p = made_up_probe(1e9, 1e30);
  const SpeedPrediction without = predict_speed(m, m.resolve(ServeSettings{}), p);
  p.attention_op_seconds = 1e-3;
  const SpeedPrediction with = predict_speed(m, m.resolve(ServeSettings{}), p);
  const int layers = m.config().n_layer;
  for (int rows : {1, 8}) {
    const double step = rows / with.decode_tps.at(rows) - rows / without.decode_tps.at(rows);
    EXPECT_NEAR(step, layers * rows * 1e-3, 1e-9) << rows;
  }
  // A result without the figure is from an older probe: refused.
  nlohmann::json j = p.to_json();
  j.erase("attention_op_seconds");
  EXPECT_FALSE(ProbeResult::from_json(j).ok());
}

}  // namespace
}  // namespace graft::fit
