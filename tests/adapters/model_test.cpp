// Adapters on a real model: files -> store -> mounted set -> Model::mount_lora
// -> per-row routes in Forward.
#include <cstring>

#include <gtest/gtest.h>

#include "adapters/gguf_lora.h"
#include "adapters/mounted.h"
#include "adapters/peft.h"
#include "engine/generate.h"
#include "fixtures.h"

namespace graft {
namespace {

using testing::error_of;
using testing::fresh_dir;
using testing::greedy;
using testing::make_adapter;
using testing::open_engine;

const std::vector<TokenId> kPrompt = {1, 450, 4996, 17354, 1701};  // BOS and four word pieces of llama-spm

struct ServedModel {
  testing::Engine engine;
  std::unique_ptr<AdapterStore> store;
  std::unique_ptr<MountedAdapters> mounted;

  explicit ServedModel(const std::string& name) {
    const std::string base_path = testing::tiny_base();
    engine = open_engine(base_path);
    const fs::path root = fresh_dir(name);
    for (uint64_t seed : {1, 2}) {
      TestAdapterSpec spec = testing::tiny_adapter_spec(base_path, seed, 8);
      spec.strength = 1.0f;
      const LoraAdapter adapter = make_adapter(spec);
      const std::string id = seed == 1 ? "a" : "b";
      testing::write_peft_or_fail(root / id, adapter, {"", SafetensorsDtype::f16});
      fs::create_directories(root / (id + "-gguf"));
      testing::write_gguf_or_fail(root / (id + "-gguf") / "adapter.gguf", adapter, {"llama", "", "f16"});
    }
    store = std::make_unique<AdapterStore>(std::vector<fs::path>{root});
    auto base = BaseModel::from_gguf(engine.model->gguf());
    EXPECT_TRUE(base.ok());
    mounted = std::make_unique<MountedAdapters>(std::move(base).value());
  }

  void load(const std::string& id) {
    auto adapter = store->find(id);
    ASSERT_TRUE(adapter.ok()) << error_of(adapter);
    auto loaded = mounted->load(*adapter, [&](const LoraWeights& w) { return engine.model->mount_lora(w); });
    ASSERT_TRUE(loaded.ok()) << error_of(loaded);
  }

  Status unload(const std::string& id) {
    return mounted->unload(id, [&](int slot) { return engine.model->unmount_lora(slot); });
  }

  AdapterLease lease(std::string_view spec) {
    auto lease = mounted->select(spec);
    EXPECT_TRUE(lease.ok()) << error_of(lease);
    return lease.ok() ? std::move(lease).value() : AdapterLease{};
  }

  std::vector<TokenId> run(std::string_view spec, SeqId seq, int n = 12) {
    AdapterLease l = lease(spec);
    auto out = greedy(engine, kPrompt, n, seq, nullptr, l.route());
    engine.cache->seq_free(seq);
    return out;
  }
};

TEST(AdaptersOnModel, PeftAndGgufFormsGiveTheSameTokens) {
  ServedModel s("on-model-forms");
  ASSERT_TRUE(s.engine.forward);
  s.load("a");
  s.load("a-gguf");
  const auto base = s.run("none", 0);
  const auto peft = s.run("a", 0);
  const auto gguf = s.run("a-gguf", 0);
  EXPECT_EQ(peft, gguf);
  EXPECT_NE(peft, base) << "the adapter should change greedy output";
}

// Mounting reads the files in place (no float copy); what lands in the
// stacks is exactly what mounting the same weights as floats gives, for every
// stored type, including ones the stacks convert (f32, bf16).
TEST(AdaptersOnModel, WeightsReadInPlaceMountAsFloatsDo) {
  const std::string base_path = testing::tiny_base();
  auto model = Model::load(base_path);
  ASSERT_TRUE(model.ok()) << error_of(model);
  TestAdapterSpec spec = testing::tiny_adapter_spec(base_path, 3, 8);
  const LoraAdapter adapter = make_adapter(spec);
  const fs::path root = fresh_dir("in-place");
  struct Case {
    std::string name;
    fs::path path;
  };
  std::vector<Case> cases;
  for (auto [dtype, name] : {std::pair{SafetensorsDtype::f32, "f32"}, std::pair{SafetensorsDtype::f16, "f16"},
                             std::pair{SafetensorsDtype::bf16, "bf16"}}) {
    testing::write_peft_or_fail(root / ("peft-" + std::string(name)), adapter, {"", dtype});
    cases.push_back({std::string("peft ") + name, root / ("peft-" + std::string(name))});
  }
  for (const char* type : {"f32", "f16", "bf16"}) {
    const fs::path file = root / (std::string(type) + ".gguf");
    testing::write_gguf_or_fail(file, adapter, {"llama", "", type});
    cases.push_back({std::string("gguf ") + type, file});
  }
  for (const Case& c : cases) {
    const bool peft = fs::is_directory(c.path);
    auto floats = peft ? read_peft(c.path) : read_gguf_lora(c.path);
    auto in_place =
        peft ? read_peft(c.path, WeightsAs::in_place) : read_gguf_lora(c.path, WeightsAs::in_place);
    ASSERT_TRUE(floats.ok() && in_place.ok()) << c.name;
    ASSERT_TRUE(in_place->sources) << c.name;
    EXPECT_TRUE(in_place->pairs[0].a.empty()) << c.name << ": read into floats, not in place";
    LoraSet from_floats, from_file;
    from_floats.init((*model)->config(), GGML_TYPE_F16);
    from_file.init((*model)->config(), GGML_TYPE_F16);
    ASSERT_TRUE(from_floats.mount(to_mountable(std::move(floats).value())).ok()) << c.name;
    ASSERT_TRUE(from_file.mount(to_mountable(std::move(in_place).value())).ok()) << c.name;
    for (const LoraPair& p : adapter.pairs) {
      const LoraSet::Stack want = from_floats.stack(p.layer, p.target);
      const LoraSet::Stack got = from_file.stack(p.layer, p.target);
      ASSERT_TRUE(want.a && got.a);
      // Slot 0, where each set mounted it.
      const size_t a_bytes = size_t(want.a->ne[1]) * want.a->nb[1],
                   b_bytes = size_t(want.b->ne[1]) * want.b->nb[1];
      EXPECT_EQ(std::memcmp(want.a->data, got.a->data, a_bytes), 0) << c.name << " lora_a";
      EXPECT_EQ(std::memcmp(want.b->data, got.b->data, b_bytes), 0) << c.name << " lora_b";
    }
  }
}

TEST(AdaptersOnModel, UnloadFreesTheSlotAndReloadGivesTheSameTokens) {
  ServedModel s("on-model-reload");
  ASSERT_TRUE(s.engine.forward);
  s.load("a");
  s.load("b");
  const auto first = s.run("b", 0);
  ASSERT_TRUE(s.unload("a").ok());
  ASSERT_TRUE(s.unload("b").ok());
  EXPECT_EQ(s.engine.model->lora().n_mounted(), 0);
  s.load("b");
  EXPECT_EQ(s.run("b", 0), first);
}

TEST(AdaptersOnModel, RowsOfDifferentSelectionsInOneBatchMatchThemAlone) {
  ServedModel s("on-model-mixed");
  ASSERT_TRUE(s.engine.forward);
  s.load("a");
  s.load("b");
  const std::vector<std::string> specs = {"none", "a", "b", "a+b", "a@0.5+b@-1"};
  std::vector<std::vector<TokenId>> alone;
  for (const auto& spec : specs) alone.push_back(s.run(spec, 0));
  EXPECT_NE(alone[1], alone[2]);
  EXPECT_NE(alone[3], alone[1]);

  // All selections together: each sequence's prompt, then one row per sequence per step.
  std::vector<AdapterLease> leases;
  for (const auto& spec : specs) leases.push_back(s.lease(spec));
  const int n = int(specs.size());
  std::vector<std::vector<TokenId>> together(specs.size());
  Batch batch;
  for (int seq = 0; seq < n; ++seq) {
    for (size_t i = 0; i < kPrompt.size(); ++i) {
      batch.rows.push_back({kPrompt[i], int(i), seq, i + 1 == kPrompt.size(), leases[size_t(seq)].route()});
    }
  }
  for (int step = 0; step < 12; ++step) {
    auto logits = s.engine.forward->run(batch);
    ASSERT_TRUE(logits.ok()) << error_of(logits);
    std::vector<TokenId> next = argmax_rows(*logits);
    ASSERT_EQ(int(next.size()), n);
    batch.rows.clear();
    for (int seq = 0; seq < n; ++seq) {
      together[size_t(seq)].push_back(next[size_t(seq)]);
      batch.rows.push_back(
          {next[size_t(seq)], int(kPrompt.size()) + step, seq, true, leases[size_t(seq)].route()});
    }
  }
  for (int seq = 0; seq < n; ++seq)
    EXPECT_EQ(together[size_t(seq)], alone[size_t(seq)]) << specs[size_t(seq)];
}

}  // namespace
}  // namespace graft
