// PEFT and GGUF LoRA: reading, writing, and every way a file can be wrong.
#include <gtest/gtest.h>

#include <ggml.h>
#include <gguf.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "adapters/gguf_lora.h"
#include "adapters/peft.h"
#include "adapters/targets.h"
#include "fixtures.h"
#include "io/gguf_file.h"
#include "io/safetensors.h"

namespace graft {
namespace {

using testing::error_of;
using testing::fresh_dir;
using testing::make_adapter;
using testing::tiny_adapter_spec;
using testing::tiny_base;
using testing::write_gguf_or_fail;
using testing::write_peft_or_fail;
using testing::write_text;

void expect_same_pairs(const LoraAdapter& a, const LoraAdapter& b) {
  ASSERT_EQ(a.pairs.size(), b.pairs.size());
  for (size_t i = 0; i < a.pairs.size(); ++i) {
    EXPECT_EQ(a.pairs[i].layer, b.pairs[i].layer);
    EXPECT_EQ(a.pairs[i].target, b.pairs[i].target);
    EXPECT_EQ(a.pairs[i].rank, b.pairs[i].rank);
    EXPECT_EQ(a.pairs[i].a.floats(), b.pairs[i].a.floats()) << "pair " << i;
    EXPECT_EQ(a.pairs[i].b.floats(), b.pairs[i].b.floats()) << "pair " << i;
  }
}

// The same type and the same bytes.
void expect_same_matrix(const LoraMatrix& a, const LoraMatrix& b, const std::string& what) {
  ASSERT_EQ(a.type, b.type) << what;
  ASSERT_EQ(a.n, b.n) << what;
  EXPECT_EQ(std::memcmp(a.data, b.data, ggml_row_size(a.type, a.n)), 0) << what;
}

TEST(Targets, NamesMapBothWays) {
  for (LoraTarget t : kAllLoraTargets) {
    EXPECT_EQ(target_from_gguf_name(gguf_target_name(t)), t);
    EXPECT_EQ(target_from_peft_name(peft_target_name(t)), t);
    EXPECT_EQ(parse_target(gguf_target_name(t)), t);
    EXPECT_EQ(parse_target(peft_target_name(t)), t);
    EXPECT_EQ(gguf_target_name(t), lora_target_name(t));  // the engine's own names
  }
  EXPECT_EQ(parse_target("o"), LoraTarget::attn_output);
  EXPECT_EQ(parse_target("down"), LoraTarget::ffn_down);
  EXPECT_EQ(peft_block_name(LoraTarget::ffn_up), "mlp");
  EXPECT_FALSE(parse_target("lm_head").has_value());
  EXPECT_EQ(base_tensor_name(3, LoraTarget::attn_v), "blk.3.attn_v.weight");
}

TEST(Targets, ListsParseGroupsAndNames) {
  // With qwen35's five linear-attention projections and gemma4's two per-layer-input ones.
  EXPECT_EQ(parse_target_list("all")->size(), 14u);
  EXPECT_EQ(*parse_target_list("attn"),
            (std::vector<LoraTarget>{LoraTarget::attn_q, LoraTarget::attn_k, LoraTarget::attn_v,
                                     LoraTarget::attn_output, LoraTarget::attn_qkv, LoraTarget::attn_gate,
                                     LoraTarget::ssm_alpha, LoraTarget::ssm_beta, LoraTarget::ssm_out}));
  EXPECT_EQ(*parse_target_list("q,down_proj,ffn_up"),
            (std::vector<LoraTarget>{LoraTarget::attn_q, LoraTarget::ffn_down, LoraTarget::ffn_up}));
  EXPECT_NE(error_of(parse_target_list("q,,v")).find("unknown target ''"), std::string::npos);
  EXPECT_NE(error_of(parse_target_list("lm_head")).find("unknown target 'lm_head'"), std::string::npos);
}

TEST(Peft, WriteThenReadGivesTheSameWeights) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  ASSERT_EQ(adapter.pairs.size(), 2u * 7u);
  const fs::path dir = fresh_dir("peft-roundtrip");
  write_peft_or_fail(dir, adapter, {"meta-llama/Tiny", SafetensorsDtype::f32});

  auto read = read_peft(dir);
  ASSERT_TRUE(read.ok()) << error_of(read);
  EXPECT_EQ(read->scaling.rank, 4);
  EXPECT_EQ(read->scaling.alpha, 8.0f);
  EXPECT_FALSE(read->scaling.rslora);
  expect_same_pairs(adapter, *read);

  auto d = describe_peft(dir);
  ASSERT_TRUE(d.ok()) << error_of(d);
  EXPECT_EQ(d->format, AdapterFormat::peft);
  EXPECT_EQ(d->base_model, "meta-llama/Tiny");
  EXPECT_EQ(d->modules.size(), 14u);
  EXPECT_EQ(d->layers(), (std::vector<int>{0, 1}));
  EXPECT_EQ(d->targets().size(), 7u);
  EXPECT_GT(d->size_bytes, 0u);
  // q_proj: 128 -> 128; k_proj: 128 -> 64 (2 kv heads of 32); down: 256 -> 128.
  EXPECT_EQ(d->modules[1].target, LoraTarget::attn_k);
  EXPECT_EQ(d->modules[1].n_in, 128);
  EXPECT_EQ(d->modules[1].n_out, 64);
  EXPECT_EQ(d->modules[6].n_in, 256);
  EXPECT_FLOAT_EQ(d->scaling.scale(), 2.0f);

  // The files are the standard PEFT layout.
  auto st = SafetensorsFile::open((dir / kPeftWeightsFile).string());
  ASSERT_TRUE(st.ok());
  const SafetensorsTensor* a = st->find("base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight");
  const SafetensorsTensor* b = st->find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{128, 4}));
  auto config = nlohmann::json::parse(*read_file(dir / kPeftConfigFile));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["target_modules"].size(), 7u);
}

TEST(Peft, HalfPrecisionFilesReadBackWithinRounding) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  const fs::path dir = fresh_dir("peft-f16");
  write_peft_or_fail(dir, adapter, {"", SafetensorsDtype::bf16});
  auto read = read_peft(dir);
  ASSERT_TRUE(read.ok()) << error_of(read);
  ASSERT_EQ(read->pairs.size(), adapter.pairs.size());
  for (size_t i = 0; i < adapter.pairs.size(); ++i) {
    EXPECT_EQ(read->pairs[i].a.type, GGML_TYPE_BF16);  // read as stored, not widened
    const std::vector<float> want = adapter.pairs[i].a.floats(), got = read->pairs[i].a.floats();
    for (size_t j = 0; j < want.size(); ++j) ASSERT_NEAR(got[j], want[j], std::fabs(want[j]) / 128 + 1e-7);
  }
}

TEST(Peft, ConfigVariantsAreUnderstood) {
  auto c = parse_peft_config(R"J({"r": 16, "lora_alpha": 32, "use_rslora": true,
      "target_modules": ".*(q_proj|v_proj)", "layers_to_transform": 3,
      "base_model_name_or_path": "Qwen/Qwen3-0.6B", "rank_pattern": {"model.layers.0.self_attn.q_proj": 8}})J",
                             "cfg");
  ASSERT_TRUE(c.ok()) << error_of(c);
  EXPECT_EQ(c->r, 16);
  EXPECT_EQ(c->lora_alpha, 32.0f);
  EXPECT_TRUE(c->use_rslora);
  EXPECT_EQ(c->target_modules, (std::vector<std::string>{".*(q_proj|v_proj)"}));
  EXPECT_EQ(c->layers_to_transform, (std::vector<int>{3}));
  EXPECT_EQ(c->base_model_name_or_path, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(c->rank_pattern.at("model.layers.0.self_attn.q_proj"), 8);
  LoraScaling rs{32.0f, 16, true};
  EXPECT_FLOAT_EQ(rs.scale(), 8.0f);  // alpha / sqrt(r)
  EXPECT_FLOAT_EQ((LoraScaling{0.0f, 16, false}.scale()), 1.0f);

  auto null_fields = parse_peft_config(
      R"({"r": 8, "lora_alpha": 16, "target_modules": null, "layers_to_transform": null, "base_model_name_or_path": null})",
      "cfg");
  ASSERT_TRUE(null_fields.ok()) << error_of(null_fields);
  EXPECT_TRUE(null_fields->layers_to_transform.empty());
}

TEST(Peft, UnsupportedConfigsAreRejectedWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"lora_alpha": 16})", "'r'"},
      {R"({"r": 0, "lora_alpha": 16})", "'r'"},
      {R"({"r": 8})", "lora_alpha"},
      {R"({"r": 8, "lora_alpha": "x"})", "lora_alpha"},
      {R"({"r": 8, "lora_alpha": 16, "use_dora": true})", "DoRA"},
      {R"({"r": 8, "lora_alpha": 16, "fan_in_fan_out": true})", "fan_in_fan_out"},
      {R"({"r": 8, "lora_alpha": 16, "bias": "all"})", "biases"},
      {R"({"r": 8, "lora_alpha": 16, "alpha_pattern": {"q_proj": 4}})", "alpha_pattern"},
      {R"({"r": 8, "lora_alpha": 16, "peft_type": "IA3"})", "only LORA"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"r": 8,)", "not a JSON object"},
  };
  for (const auto& [text, expect] : cases) {
    auto c = parse_peft_config(text, "adapter_config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find(expect), std::string::npos) << text << " -> " << c.error().message;
    EXPECT_EQ(c.error().code, "invalid_adapter");
  }
}

// Writes a PEFT folder whose safetensors holds exactly `tensors` (name -> shape).
fs::path peft_with_tensors(const std::string& name,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                           const std::string& config = R"({"r": 2, "lora_alpha": 4})") {
  const fs::path dir = fresh_dir(name);
  SafetensorsWriter writer;
  for (const auto& [tensor, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(size_t(n), 0.25f);
    EXPECT_TRUE(writer.add(tensor, shape, values).ok());
  }
  EXPECT_TRUE(writer.write((dir / kPeftWeightsFile).string()).ok());
  write_text(dir / kPeftConfigFile, config);
  return dir;
}

TEST(Peft, TensorNameVariantsAreAccepted) {
  // Older PEFT prefixes and an explicit adapter name ("default").
  const fs::path dir = peft_with_tensors(
      "peft-variants", {{"base_model.model.layers.1.self_attn.v_proj.lora_A.default.weight", {2, 128}},
                        {"base_model.model.layers.1.self_attn.v_proj.lora_B.default.weight", {64, 2}}});
  auto d = describe_peft(dir);
  ASSERT_TRUE(d.ok()) << error_of(d);
  ASSERT_EQ(d->modules.size(), 1u);
  EXPECT_EQ(d->modules[0].layer, 1);
  EXPECT_EQ(d->modules[0].target, LoraTarget::attn_v);
  EXPECT_EQ(d->modules[0].n_out, 64);
}

TEST(Peft, PerLayerInputProjectionsSitOnTheLayerItself) {
  // Gemma 4's per-layer-input projections, as PEFT names them on
  // Gemma4ForConditionalGeneration (the text model under language_model), with
  // and without an adapter name.
  const std::string p = "base_model.model.model.language_model.layers.2.";
  const fs::path dir =
      peft_with_tensors("peft-per-layer", {{p + "per_layer_input_gate.lora_A.weight", {2, 128}},
                                           {p + "per_layer_input_gate.lora_B.weight", {16, 2}},
                                           {p + "per_layer_projection.lora_A.default.weight", {2, 16}},
                                           {p + "per_layer_projection.lora_B.default.weight", {128, 2}}});
  auto d = describe_peft(dir);
  ASSERT_TRUE(d.ok()) << error_of(d);
  ASSERT_EQ(d->modules.size(), 2u);
  EXPECT_EQ(d->modules[0].layer, 2);
  EXPECT_EQ(d->modules[0].target, LoraTarget::per_layer_gate);
  EXPECT_EQ(d->modules[0].n_in, 128);
  EXPECT_EQ(d->modules[0].n_out, 16);
  EXPECT_EQ(d->modules[1].target, LoraTarget::per_layer_proj);
  EXPECT_EQ(d->modules[1].n_in, 16);
  EXPECT_EQ(d->modules[1].n_out, 128);
  EXPECT_EQ(peft_tensor_name(2, LoraTarget::per_layer_gate, false),
            "base_model.model.model.layers.2.per_layer_input_gate.lora_A.weight");
  EXPECT_EQ(base_tensor_name(2, LoraTarget::per_layer_proj), "blk.2.proj.weight");
}

TEST(Peft, BadTensorsAreRejectedWithTheReason) {
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
    const char* expect;
  };
  const Case cases[] = {
      {"unknown-module",
       {{"base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", {2, 8}}},
       "unknown module 'qkv_proj'"},
      {"lm-head", {{"base_model.model.lm_head.lora_A.weight", {2, 8}}}, "embedding or output"},
      {"dora", {{q + "lora_magnitude_vector", {8}}}, "DoRA"},
      {"wrong-block", {{"base_model.model.model.layers.0.mlp.q_proj.lora_A.weight", {2, 8}}}, "belongs in"},
      {"per-layer-in-a-block",
       {{"base_model.model.model.layers.0.mlp.per_layer_projection.lora_A.weight", {2, 8}}},
       "belongs on the layer itself"},
      {"projection-on-the-layer",
       {{"base_model.model.model.layers.0.q_proj.lora_A.weight", {2, 8}}},
       "not a LoRA weight"},
      {"only-a", {{q + "lora_A.weight", {2, 128}}}, "no lora_B"},
      {"rank-mismatch", {{q + "lora_A.weight", {2, 128}}, {q + "lora_B.weight", {128, 3}}}, "rank"},
      {"three-d", {{q + "lora_A.weight", {2, 128, 1}}, {q + "lora_B.weight", {128, 2}}}, "3 dimensions"},
      {"no-layer", {{"base_model.model.model.norm.lora_A.weight", {2, 8}}}, "not a LoRA weight"},
      {"empty", {}, "no LoRA weights"},
  };
  for (const Case& c : cases) {
    const fs::path dir = peft_with_tensors(std::string("peft-bad-") + c.name, c.tensors);
    auto d = describe_peft(dir);
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_NE(d.error().message.find(c.expect), std::string::npos) << c.name << ": " << d.error().message;
    EXPECT_EQ(d.error().code, "invalid_adapter") << c.name;
    EXPECT_FALSE(read_peft(dir).ok()) << c.name;
  }
}

TEST(Peft, MissingOrCorruptFilesAreRejected) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  const fs::path dir = fresh_dir("peft-broken");
  write_peft_or_fail(dir, adapter);
  auto bytes = read_file(dir / kPeftWeightsFile);
  ASSERT_TRUE(bytes.ok());

  write_text(dir / kPeftWeightsFile, std::string_view(*bytes).substr(0, bytes->size() / 2));
  auto truncated = describe_peft(dir);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().message.find("truncated"), std::string::npos) << truncated.error().message;

  write_text(dir / kPeftWeightsFile, "garbage");
  EXPECT_FALSE(describe_peft(dir).ok());

  fs::remove(dir / kPeftWeightsFile);
  EXPECT_NE(error_of(describe_peft(dir)).find("missing adapter_model.safetensors"), std::string::npos);
  write_text(dir / "adapter_model.bin", "pickle");
  EXPECT_NE(error_of(describe_peft(dir)).find("pickle"), std::string::npos);

  const fs::path dir2 = fresh_dir("peft-no-config");
  write_peft_or_fail(dir2, adapter);
  fs::remove(dir2 / kPeftConfigFile);
  EXPECT_NE(error_of(describe_peft(dir2)).find("missing adapter_config.json"), std::string::npos);
}

TEST(Peft, MixedRanksKeepTheirOwnScale) {
  LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));  // rank 4, alpha 8
  // Make the first pair rank 2 (PEFT rank_pattern).
  LoraPair& p = adapter.pairs[0];
  const size_t n_in = size_t(p.a.n) / 4, n_out = size_t(p.b.n) / 4;
  p.rank = 2;
  std::vector<float> a = p.a.floats(), b4 = p.b.floats();
  a.resize(2 * n_in);
  std::vector<float> b(n_out * 2);
  for (size_t o = 0; o < n_out; ++o) {
    b[o * 2] = b4[o * 4];
    b[o * 2 + 1] = b4[o * 4 + 1];
  }
  p.a = LoraMatrix::of_floats(a);
  p.b = LoraMatrix::of_floats(b);
  const fs::path dir = fresh_dir("peft-mixed");
  write_peft_or_fail(dir, adapter);
  auto config = nlohmann::json::parse(*read_file(dir / kPeftConfigFile));
  EXPECT_EQ(config["rank_pattern"]["model.layers.0.self_attn.q_proj"], 2);
  auto read = read_peft(dir);
  ASSERT_TRUE(read.ok()) << error_of(read);
  EXPECT_EQ(read->pairs[0].rank, 2);
  // The engine gets one scale per adapter (8 / 4 = 2); the rank-2 pair's own
  // scale (8 / 2 = 4) is folded into its b.
  LoraWeights weights = to_mountable(std::move(read).value());
  EXPECT_FLOAT_EQ(weights.scale, 2.0f);
  EXPECT_FLOAT_EQ(weights.pairs[0].b.floats()[0], 2.0f * b[0]);
  EXPECT_EQ(weights.pairs[1].b.floats(), adapter.pairs[1].b.floats());
}

TEST(GgufLora, WriteThenReadGivesTheSameWeights) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  const fs::path file = fresh_dir("gguf-roundtrip") / "a.gguf";
  write_gguf_or_fail(file, adapter, {"llama", "tiny adapter", "f32"});
  EXPECT_TRUE(is_gguf_adapter(file));
  EXPECT_FALSE(is_gguf_adapter(tiny_base()));

  auto read = read_gguf_lora(file);
  ASSERT_TRUE(read.ok()) << error_of(read);
  EXPECT_EQ(read->scaling.alpha, 8.0f);
  EXPECT_EQ(read->scaling.rank, 4);
  expect_same_pairs(adapter, *read);

  auto d = describe_gguf_lora(file);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->format, AdapterFormat::gguf);
  EXPECT_EQ(d->architecture, "llama");
  EXPECT_EQ(d->modules.size(), 14u);

  // The layout llama.cpp reads: general.type, adapter.type, alpha, and
  // lora_a with ne [n_in, rank], lora_b with ne [rank, n_out].
  auto gguf = GgufFile::open(file.string());
  ASSERT_TRUE(gguf.ok());
  EXPECT_EQ(*gguf->get_string("general.type"), "adapter");
  EXPECT_EQ(*gguf->get_string("adapter.type"), "lora");
  EXPECT_EQ(*gguf->get_float("adapter.lora.alpha"), 8.0);
  const GgufTensorInfo* a = gguf->find_tensor("blk.1.attn_k.weight.lora_a");
  const GgufTensorInfo* b = gguf->find_tensor("blk.1.attn_k.weight.lora_b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->ne[0], 128);
  EXPECT_EQ(a->ne[1], 4);
  EXPECT_EQ(b->ne[0], 4);
  EXPECT_EQ(b->ne[1], 64);
}

TEST(GgufLora, PeftAndGgufFormsOfOneAdapterMountTheSameWeights) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base(), 5));
  const fs::path dir = fresh_dir("both-forms");
  write_peft_or_fail(dir / "peft", adapter, {"", SafetensorsDtype::f16});
  write_gguf_or_fail(dir / "a.gguf", adapter, {"llama", "", "f16"});
  auto from_peft = read_peft(dir / "peft");
  auto from_gguf = read_gguf_lora(dir / "a.gguf");
  ASSERT_TRUE(from_peft.ok() && from_gguf.ok());
  LoraWeights wp = to_mountable(std::move(from_peft).value());
  LoraWeights wg = to_mountable(std::move(from_gguf).value());
  EXPECT_EQ(wp.scale, wg.scale);
  ASSERT_EQ(wp.pairs.size(), wg.pairs.size());
  for (size_t i = 0; i < wp.pairs.size(); ++i) {
    expect_same_matrix(wp.pairs[i].a, wg.pairs[i].a, "a " + std::to_string(i));
    expect_same_matrix(wp.pairs[i].b, wg.pairs[i].b, "b " + std::to_string(i));
    EXPECT_EQ(wp.pairs[i].a.type, GGML_TYPE_F16);
  }
}

TEST(GgufLora, RsloraIsWrittenAsAnEquivalentAlpha) {
  LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  adapter.scaling = {8.0f, 4, true};  // scale 8 / sqrt(4) = 4
  const fs::path file = fresh_dir("gguf-rslora") / "a.gguf";
  write_gguf_or_fail(file, adapter);
  auto read = read_gguf_lora(file);
  ASSERT_TRUE(read.ok());
  EXPECT_FLOAT_EQ(read->scaling.scale(), 4.0f);
}

TEST(GgufLora, MissingAlphaMeansScaleOne) {
  const fs::path file = fresh_dir("gguf-no-alpha") / "a.gguf";
  LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  adapter.scaling.alpha = 0.0f;
  write_gguf_or_fail(file, adapter);
  auto d = describe_gguf_lora(file);
  ASSERT_TRUE(d.ok());
  EXPECT_FLOAT_EQ(d->scaling.scale(), 1.0f);
}

TEST(GgufLora, BadFilesAreRejectedWithTheReason) {
  const fs::path dir = fresh_dir("gguf-bad");
  // A base model is not an adapter.
  auto model = describe_gguf_lora(tiny_base());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("not an adapter"), std::string::npos) << model.error().message;

  // Truncated.
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));
  write_gguf_or_fail(dir / "good.gguf", adapter);
  auto bytes = read_file(dir / "good.gguf");
  write_text(dir / "cut.gguf", std::string_view(*bytes).substr(0, bytes->size() - 100));
  auto cut = describe_gguf_lora(dir / "cut.gguf");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, "invalid_adapter");
  EXPECT_NE(cut.error().message.find("truncated"), std::string::npos) << cut.error().message;
  write_text(dir / "garbage.gguf", "GGUF but not really");
  EXPECT_EQ(describe_gguf_lora(dir / "garbage.gguf").error().code, "invalid_adapter");

  // Hand-made files with one flaw each.
  struct Tensor {
    std::string name;
    int64_t ne0, ne1;
  };
  auto write_raw = [&](const std::string& name, const std::vector<Tensor>& tensors,
                       const char* type = "adapter", const char* adapter_type = "lora") {
    gguf_context* meta = gguf_init_empty();
    gguf_set_val_str(meta, "general.architecture", "llama");
    gguf_set_val_str(meta, "general.type", type);
    gguf_set_val_str(meta, "adapter.type", adapter_type);
    gguf_set_val_f32(meta, "adapter.lora.alpha", 4.0f);
    ggml_init_params params{1 << 20, nullptr, false};
    ggml_context* ctx = ggml_init(params);
    for (const Tensor& t : tensors) {
      ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.ne0, t.ne1);
      ggml_set_name(x, t.name.c_str());
      std::fill_n(static_cast<float*>(x->data), t.ne0 * t.ne1, 0.5f);
      gguf_add_tensor(meta, x);
    }
    const fs::path path = dir / (name + ".gguf");
    EXPECT_TRUE(gguf_write_to_file(meta, path.c_str(), false));
    gguf_free(meta);
    ggml_free(ctx);
    return path;
  };
  const std::pair<fs::path, const char*> cases[] = {
      {write_raw("only-a", {{"blk.0.attn_q.weight.lora_a", 128, 2}}), "no lora_b"},
      {write_raw("transposed",
                 {{"blk.0.attn_q.weight.lora_a", 2, 128}, {"blk.0.attn_q.weight.lora_b", 2, 128}}),
       "transposed"},
      {write_raw("unknown-suffix", {{"blk.0.attn_q.weight", 128, 128}}), "neither a .lora_a nor a .lora_b"},
      {write_raw("unknown-target", {{"blk.0.ssm_conv1d.weight.lora_a", 128, 2}}), "does not adapt"},
      {write_raw("embedding", {{"token_embd.weight.lora_a", 128, 2}}), "does not adapt"},
      {write_raw("model-type", {{"blk.0.attn_q.weight.lora_a", 128, 2}}, "model"), "not an adapter"},
      {write_raw("cvec", {{"blk.0.attn_q.weight.lora_a", 128, 2}}, "adapter", "control_vector"),
       "only 'lora'"},
  };
  for (const auto& [path, expect] : cases) {
    auto d = describe_gguf_lora(path);
    ASSERT_FALSE(d.ok()) << path;
    EXPECT_NE(d.error().message.find(expect), std::string::npos) << path << ": " << d.error().message;
  }
  // Norm vectors (from mergekit) are skipped, as llama.cpp does.
  auto with_norm = write_raw("with-norm", {{"blk.0.attn_q.weight.lora_a", 128, 2},
                                           {"blk.0.attn_q.weight.lora_b", 2, 128},
                                           {"blk.0.attn_norm.weight", 128, 1}});
  auto d = describe_gguf_lora(with_norm);
  ASSERT_TRUE(d.ok()) << error_of(d);
  EXPECT_EQ(d->modules.size(), 1u);
}

TEST(Writers, RefuseEmptyOrMalformedAdapters) {
  LoraAdapter empty;
  empty.scaling = {8.0f, 4, false};
  const fs::path dir = fresh_dir("writers-bad");
  EXPECT_FALSE(write_peft(dir / "p", empty).ok());
  EXPECT_FALSE(write_gguf_lora(dir / "g.gguf", empty).ok());
  LoraAdapter bad = make_adapter(tiny_adapter_spec(tiny_base()));
  std::vector<float> short_a = bad.pairs[0].a.floats();
  short_a.pop_back();
  bad.pairs[0].a = LoraMatrix::of_floats(short_a);
  EXPECT_NE(error_of(write_peft(dir / "p", bad)).find("do not fit rank"), std::string::npos);
  EXPECT_NE(error_of(write_gguf_lora(dir / "g.gguf", bad)).find("do not fit rank"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "g.gguf"));
  EXPECT_FALSE(
      write_gguf_lora(dir / "g.gguf", make_adapter(tiny_adapter_spec(tiny_base())), {"llama", "", "q4_0"})
          .ok());
}

}  // namespace
}  // namespace graft
