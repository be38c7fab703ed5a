// mlx-lm adapters: the layout (transposed A and B, scale as a multiplier),
// the store finding them, and every way a config can be wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "adapters/mlx.h"
#include "adapters/store.h"
#include "fixtures.h"
#include "io/safetensors.h"

namespace graft {
namespace {

using testing::error_of;
using testing::fresh_dir;
using testing::make_adapter;
using testing::tiny_adapter_spec;
using testing::tiny_base;
using testing::write_peft_or_fail;
using testing::write_text;

TEST(Mlx, WriteThenReadGivesTheSameWeightsAsPeft) {
  const LoraAdapter adapter = make_adapter(tiny_adapter_spec(tiny_base()));  // rank 4, alpha 8
  const fs::path dir = fresh_dir("mlx-roundtrip");
  ASSERT_TRUE(write_mlx(dir, adapter).ok());

  // The files are mlx-lm's: A is [in, rank], B is [rank, out], the scale is the multiplier.
  auto st = SafetensorsFile::open((dir / kMlxWeightsFile).string());
  ASSERT_TRUE(st.ok()) << error_of(st);
  const SafetensorsTensor* a = st->find("model.layers.1.self_attn.k_proj.lora_a");
  const SafetensorsTensor* b = st->find("model.layers.1.mlp.down_proj.lora_b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{128, 4}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4, 128}));
  auto config = nlohmann::json::parse(*read_file(dir / kMlxConfigFile));
  EXPECT_EQ(config["lora_parameters"]["rank"], 4);
  EXPECT_EQ(config["lora_parameters"]["scale"], 2.0);
  EXPECT_EQ(config["lora_parameters"]["keys"].size(), 7u);

  auto read = read_mlx(dir);
  ASSERT_TRUE(read.ok()) << error_of(read);
  EXPECT_FLOAT_EQ(read->scaling.scale(), 2.0f);
  ASSERT_EQ(read->pairs.size(), adapter.pairs.size());
  for (size_t i = 0; i < adapter.pairs.size(); ++i) {
    EXPECT_EQ(read->pairs[i].layer, adapter.pairs[i].layer);
    EXPECT_EQ(read->pairs[i].target, adapter.pairs[i].target);
    EXPECT_EQ(read->pairs[i].a.floats(), adapter.pairs[i].a.floats()) << "pair " << i;
    EXPECT_EQ(read->pairs[i].b.floats(), adapter.pairs[i].b.floats()) << "pair " << i;
  }

  // The store finds it beside a PEFT adapter and tells them apart.
  const fs::path root = fresh_dir("mlx-store");
  ASSERT_TRUE(write_mlx(root / "from-mlx", adapter, SafetensorsDtype::bf16).ok());
  write_peft_or_fail(root / "from-peft", adapter);
  AdapterStore store({root});
  auto mlx = store.find("from-mlx");
  ASSERT_TRUE(mlx.ok()) << error_of(mlx);
  ASSERT_TRUE(mlx->readable()) << mlx->problem;
  EXPECT_EQ(mlx->description->format, AdapterFormat::mlx);
  EXPECT_EQ(format_name(mlx->description->format), "mlx");
  EXPECT_FLOAT_EQ(mlx->description->scaling.scale(), 2.0f);
  EXPECT_EQ(mlx->description->modules.size(), 14u);
  EXPECT_EQ(mlx->description->modules[1].n_in, 128);
  EXPECT_EQ(mlx->description->modules[1].n_out, 64);
  auto peft = store.find("from-peft");
  ASSERT_TRUE(peft.ok());
  EXPECT_EQ(peft->description->format, AdapterFormat::peft);
}

TEST(Mlx, TheScaleIsTheMultiplierWhateverTheRank) {
  auto c = parse_mlx_config(R"({"fine_tune_type": "lora", "num_layers": 16, "model": "Qwen/Qwen3-0.6B",
      "lora_parameters": {"rank": 8, "scale": 20.0, "dropout": 0.05, "keys": ["self_attn.q_proj"]},
      "batch_size": 4, "iters": 1000, "learning_rate": 1e-5})",
                            "cfg");
  ASSERT_TRUE(c.ok()) << error_of(c);
  EXPECT_EQ(c->rank, 8);
  EXPECT_FLOAT_EQ(c->scale, 20.0f);
  EXPECT_FLOAT_EQ(c->dropout, 0.05f);
  EXPECT_EQ(c->num_layers, 16);
  EXPECT_EQ(c->model, "Qwen/Qwen3-0.6B");
  ASSERT_TRUE(c->keys.has_value());
  EXPECT_EQ(*c->keys, (std::vector<std::string>{"self_attn.q_proj"}));
  // Older mlx-lm: "lora_layers", no fine_tune_type, keys absent.
  auto old = parse_mlx_config(R"({"lora_layers": -1, "lora_parameters": {"rank": 4, "scale": 10}})", "cfg");
  ASSERT_TRUE(old.ok()) << error_of(old);
  EXPECT_EQ(old->num_layers, -1);
  EXPECT_FALSE(old->keys.has_value());
}

TEST(Mlx, MalformedConfigsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"num_layers": 4})", "'lora_parameters'"},
      {R"({"lora_parameters": [8, 20]})", "'lora_parameters'"},
      {R"({"lora_parameters": {"scale": 20}})", "'lora_parameters.rank'"},
      {R"({"lora_parameters": {"rank": 0, "scale": 20}})", "'lora_parameters.rank'"},
      {R"({"lora_parameters": {"rank": 8.5, "scale": 20}})", "'lora_parameters.rank'"},
      {R"({"lora_parameters": {"rank": 8}})", "'lora_parameters.scale'"},
      {R"({"lora_parameters": {"rank": 8, "scale": "big"}})", "'lora_parameters.scale'"},
      {R"({"lora_parameters": {"rank": 8, "scale": -1}})", "'lora_parameters.scale'"},
      {R"({"lora_parameters": {"rank": 8, "scale": 20, "dropout": 2}})", "'lora_parameters.dropout'"},
      {R"({"lora_parameters": {"rank": 8, "scale": 20, "keys": "q_proj"}})", "'lora_parameters.keys'"},
      {R"({"lora_parameters": {"rank": 8, "scale": 20, "keys": [1]}})", "'lora_parameters.keys'"},
      {R"({"num_layers": 0, "lora_parameters": {"rank": 8, "scale": 20}})", "'num_layers'"},
      {R"({"num_layers": "all", "lora_parameters": {"rank": 8, "scale": 20}})", "'num_layers'"},
      {R"({"fine_tune_type": "dora", "lora_parameters": {"rank": 8, "scale": 20}})", "DoRA"},
      {R"({"fine_tune_type": "full", "lora_parameters": {"rank": 8, "scale": 20}})", "full fine-tune"},
      {R"({"fine_tune_type": 3, "lora_parameters": {"rank": 8, "scale": 20}})", "'fine_tune_type'"},
      {R"([1])", "not a JSON object"},
  };
  for (const auto& [text, expect] : cases) {
    auto c = parse_mlx_config(text, "adapter_config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.error().message.find(expect), std::string::npos) << text << " -> " << c.error().message;
    EXPECT_EQ(c.error().code, "invalid_adapter");
  }
}

TEST(Mlx, BadTensorsAreRejectedWithTheReason) {
  auto folder = [](const std::string& name,
                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                   const std::string& config = R"({"lora_parameters": {"rank": 2, "scale": 4}})") {
    const fs::path dir = fresh_dir(name);
    SafetensorsWriter writer;
    for (const auto& [tensor, shape] : tensors) {
      std::vector<float> values(size_t(shape[0] * shape[1]), 0.25f);
      EXPECT_TRUE(writer.add(tensor, shape, values).ok());
    }
    EXPECT_TRUE(writer.write((dir / kMlxWeightsFile).string()).ok());
    write_text(dir / kMlxConfigFile, config);
    return dir;
  };
  const std::pair<fs::path, const char*> cases[] = {
      // PEFT's orientation in an mlx-lm file: the rank is on the wrong side.
      {folder("mlx-peft-shapes", {{"model.layers.0.self_attn.q_proj.lora_a", {2, 128}},
                                  {"model.layers.0.self_attn.q_proj.lora_b", {128, 2}}}),
       "[in, rank]"},
      {folder("mlx-no-b", {{"model.layers.0.self_attn.q_proj.lora_a", {128, 2}}}), "no lora_b"},
      {folder("mlx-dora", {{"model.layers.0.self_attn.q_proj.m", {128, 1}}}), "DoRA"},
      {folder("mlx-embed", {{"model.embed_tokens.lora_a", {100, 2}}}), "embedding"},
      {folder("mlx-keys",
              {{"model.layers.0.self_attn.q_proj.lora_a", {128, 2}},
               {"model.layers.0.self_attn.q_proj.lora_b", {2, 128}}},
              R"({"lora_parameters": {"rank": 2, "scale": 4, "keys": ["self_attn.v_proj"]}})"),
       "'lora_parameters.keys'"},
  };
  for (const auto& [dir, expect] : cases) {
    auto d = describe_mlx(dir);
    ASSERT_FALSE(d.ok()) << dir;
    EXPECT_NE(d.error().message.find(expect), std::string::npos) << dir << " -> " << d.error().message;
  }
  // A folder with only the config is still recognized as mlx-lm, and says what is missing.
  const fs::path lone = fresh_dir("mlx-lone-config");
  write_text(lone / kMlxConfigFile, R"({"lora_parameters": {"rank": 2, "scale": 4}})");
  EXPECT_TRUE(is_mlx_folder(lone));
  auto d = describe_mlx(lone);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find(kMlxWeightsFile), std::string::npos) << d.error().message;
}

}  // namespace
}  // namespace graft
