// Adapters on a real model: files -> store -> mounted set -> Model::mount_lora
// -> per-row routes in Forward.
#include <cstring>

#include <gtest/gtest.h>

#include "adapters/gguf_lora.h"
#include "adapters/mlx.h"
#include "adapters/mounted.h"
#include "adapters/peft.h"
#include "engine/generate.h"
#include "fixtures.h"
#include "model/lora_ops.h"

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
      EXPECT_TRUE(write_mlx(root / (id + "-mlx"), adapter, SafetensorsDtype::f16).ok());
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

// mlx-lm stores A and B transposed and its scale as the multiplier itself:
// the same weights in either form give the same tokens.
TEST(AdaptersOnModel, PeftAndMlxFormsGiveTheSameTokens) {
  ServedModel s("on-model-mlx");
  ASSERT_TRUE(s.engine.forward);
  s.load("a");
  s.load("a-mlx");
  s.load("b");
  const auto base = s.run("none", 0);
  const auto peft = s.run("a", 0);
  const auto mlx = s.run("a-mlx", 0);
  EXPECT_EQ(peft, mlx);
  EXPECT_NE(peft, base) << "the adapter should change greedy output";
  EXPECT_EQ(s.run("a@0.5+b", 0), s.run("a-mlx@0.5+b", 0));
}

// Mounting reads the files in place (no float copy), each matrix in the type
// it is stored in, and keeps every value: F16 and BF16 adapters are stacked
// as they are, F32 ones as F32 (not rounded to F16).
TEST(AdaptersOnModel, WeightsReadInPlaceMountInTheirOwnType) {
  const std::string base_path = testing::tiny_base();
  auto model = Model::load(base_path);
  ASSERT_TRUE(model.ok()) << error_of(model);
  TestAdapterSpec spec = testing::tiny_adapter_spec(base_path, 3, 8);
  const LoraAdapter adapter = make_adapter(spec);
  const fs::path root = fresh_dir("in-place");
  struct Case {
    std::string name;
    fs::path path;
    ggml_type type;
  };
  std::vector<Case> cases;
  for (auto [dtype, name, type] : {std::tuple{SafetensorsDtype::f32, "f32", GGML_TYPE_F32},
                                   std::tuple{SafetensorsDtype::f16, "f16", GGML_TYPE_F16},
                                   std::tuple{SafetensorsDtype::bf16, "bf16", GGML_TYPE_BF16}}) {
    testing::write_peft_or_fail(root / ("peft-" + std::string(name)), adapter, {"", dtype});
    cases.push_back({std::string("peft ") + name, root / ("peft-" + std::string(name)), type});
    const fs::path file = root / (std::string(name) + ".gguf");
    testing::write_gguf_or_fail(file, adapter, {"llama", "", name});
    cases.push_back({std::string("gguf ") + name, file, type});
  }
  LoraSet set;
  set.init((*model)->config());
  for (const Case& c : cases) {
    auto read = fs::is_directory(c.path) ? read_peft(c.path) : read_gguf_lora(c.path);
    ASSERT_TRUE(read.ok()) << c.name << ": " << error_of(read);
    const LoraAdapter file = std::move(read).value();
    for (const LoraPair& p : file.pairs) {
      ASSERT_EQ(p.a.type, c.type) << c.name;
      ASSERT_EQ(p.b.type, c.type) << c.name;
    }
    auto slot = set.mount(to_mountable(file));
    ASSERT_TRUE(slot.ok()) << c.name << ": " << error_of(slot);
    const LoraSet::Place place = set.place(*slot);
    EXPECT_EQ(ggml_type_of(place.type), c.type) << c.name;
    for (const LoraPair& p : file.pairs) {
      const LoraSet::Stack st = set.stack(p.layer, p.target, place.type);
      ASSERT_TRUE(st.a && st.b);
      // A's rows as stored; B transposed (row k = column k) and blocked by outputs.
      const auto* a = static_cast<const uint8_t*>(st.a->data) + size_t(place.index) * st.a->nb[2];
      EXPECT_EQ(std::memcmp(a, p.a.data, ggml_row_size(c.type, p.a.n)), 0) << c.name << " lora_a";
      const int64_t n_out = p.b.n / p.rank;
      const size_t es = ggml_type_size(c.type);
      const auto* b = static_cast<const uint8_t*>(st.b->data) + size_t(place.index) * st.b->nb[2];
      const auto* stored = static_cast<const uint8_t*>(p.b.data);
      for (int64_t o = 0; o < n_out; o += 7) {
        for (int k = 0; k < p.rank; ++k) {
          const int64_t stack_rank = st.b->ne[0] / kLoraBBlock;
          ASSERT_EQ(std::memcmp(b + size_t(lora_b_index(stack_rank, k, o)) * es,
                                stored + size_t(o * p.rank + k) * es, es),
                    0)
              << c.name << " lora_b row " << o << " rank " << k;
        }
      }
    }
  }
  // F32 takes twice the memory of F16 or BF16.
  const size_t f32 = set.bytes(0), f16 = set.bytes(2), bf16 = set.bytes(4);
  EXPECT_GT(f16, 0u);
  EXPECT_EQ(f16, bf16);
  EXPECT_EQ(f32, 2 * f16);
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
