// The "available" state: fingerprints, metadata, the store and compatibility.
#include <gtest/gtest.h>

#include <cstdlib>

#include "adapters/base_model.h"
#include "adapters/metadata.h"
#include "adapters/store.h"
#include "fixtures.h"

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

const BaseModel& open_base(const std::string& path) {
  return testing::base_info(path);
}

std::string variant(void (*change)(TestModelSpec&)) {
  TestModelSpec spec = testing::tiny_base_spec();
  change(spec);
  return testing::test_model_path(spec);
}

TEST(Fingerprint, SurvivesRenamingAndRequantizingButNotReshaping) {
  const std::string f16 = tiny_base();
  const fs::path copy = fresh_dir("fp") / "renamed copy.gguf";
  fs::copy_file(f16, copy);
  const BaseModel& a = open_base(f16);
  EXPECT_EQ(a.fingerprint.rfind("sha256:", 0), 0u);
  EXPECT_EQ(a.fingerprint.size(), 7u + 64u);
  EXPECT_EQ(open_base(copy.string()).fingerprint, a.fingerprint);

  const std::string q8 = variant([](TestModelSpec& s) { s.type = "q8_0"; });
  EXPECT_EQ(open_base(q8).fingerprint, a.fingerprint);
  // Other weights, same layout: the same fingerprint (weights are not hashed).
  const std::string reseeded = variant([](TestModelSpec& s) {
    s.type = "q8_0";
    s.seed = 99;
  });
  EXPECT_EQ(open_base(reseeded).fingerprint, a.fingerprint);

  EXPECT_NE(open_base(variant([](TestModelSpec& s) { s.n_ff = 384; })).fingerprint, a.fingerprint);
  EXPECT_NE(
      open_base(variant([](TestModelSpec& s) { s.vocab_path = testing::bundle_vocab("phi-3"); })).fingerprint,
      a.fingerprint);
  EXPECT_NE(open_base(tiny_base("qwen3")).fingerprint, a.fingerprint);
}

TEST(BaseModelInfo, ReadsShapesOfEveryProjection) {
  const BaseModel& base = open_base(tiny_base());
  EXPECT_EQ(base.architecture, "llama");
  EXPECT_EQ(base.n_layer, 2);
  EXPECT_EQ(base.name, "graft-test-model");
  EXPECT_EQ(base.label(), "graft-test-model");
  EXPECT_EQ(base.shapes.size(), 14u);
  EXPECT_EQ(base.shapes.at({1, LoraTarget::attn_v}), (std::pair<int64_t, int64_t>{128, 64}));
  EXPECT_EQ(base.shapes.at({0, LoraTarget::ffn_down}), (std::pair<int64_t, int64_t>{256, 128}));
}

TEST(BaseModelInfo, AdaptersThatDoNotFitSayWhy) {
  const BaseModel& base = open_base(tiny_base());
  auto adapter = make_adapter(tiny_adapter_spec(variant([](TestModelSpec& s) { s.n_layer = 3; })));
  const fs::path dir = fresh_dir("fit");
  write_peft_or_fail(dir / "deep", adapter);
  auto d = describe_peft(dir / "deep");
  ASSERT_TRUE(d.ok());
  EXPECT_NE(error_of(check_adapter_fits(*d, base)).find("adapts layer 2, the base model has 2 layers"),
            std::string::npos);

  write_peft_or_fail(dir / "wide",
                     make_adapter(tiny_adapter_spec(variant([](TestModelSpec& s) { s.n_ff = 384; }))));
  auto w = describe_peft(dir / "wide");
  ASSERT_TRUE(w.ok());
  const std::string why = error_of(check_adapter_fits(*w, base));
  EXPECT_NE(why.find("blk.0.ffn_gate.weight is 128 -> 384 in the adapter but 128 -> 256"), std::string::npos)
      << why;

  write_gguf_or_fail(dir / "q3.gguf", make_adapter(tiny_adapter_spec(tiny_base())), {"qwen3", "", "f32"});
  auto q = describe_gguf_lora(dir / "q3.gguf");
  ASSERT_TRUE(q.ok());
  EXPECT_NE(error_of(check_adapter_fits(*q, base)).find("made for a 'qwen3' model"), std::string::npos);
}

TEST(Metadata, RoundTripsAndKeepsUnknownFields) {
  AdapterMetadata m;
  m.id = "poet";
  m.base_repo = "meta-llama/Llama-3.2-1B";
  m.base_fingerprint = "sha256:abc";
  m.base_architecture = "llama";
  m.rank = 16;
  m.alpha = 32;
  m.scale = 2;
  m.target_modules = {"q_proj", "v_proj"};
  m.layers = {0, 1, 2};
  m.created = "2025-01-02T03:04:05Z";
  m.task = "poetry";
  m.extra["trainer"] = {{"epochs", 3}};
  auto back = parse_adapter_metadata(adapter_metadata_json(m), "x");
  ASSERT_TRUE(back.ok()) << error_of(back);
  EXPECT_EQ(back->id, "poet");
  EXPECT_EQ(back->base_repo, m.base_repo);
  EXPECT_EQ(back->base_fingerprint, m.base_fingerprint);
  EXPECT_EQ(back->rank, 16);
  EXPECT_EQ(back->alpha, 32.0f);
  EXPECT_EQ(back->target_modules, m.target_modules);
  EXPECT_EQ(back->layers, m.layers);
  EXPECT_EQ(back->created, m.created);
  EXPECT_EQ(back->task, "poetry");
  EXPECT_EQ(back->dataset, "");
  EXPECT_EQ(back->extra["trainer"]["epochs"], 3);
  EXPECT_NE(adapter_metadata_json(*back).find("\"trainer\""), std::string::npos);
}

TEST(Metadata, BadFilesNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"base": {"fingerprint": "sha256:1"}})", "'id'"},
      {R"({"id": "a"})", "'base'"},
      {R"({"id": "a", "base": {"repo": "x"}})", "'fingerprint'"},
      {R"({"id": 3, "base": {"fingerprint": "f"}})", "'id'"},
      {R"({"id": "a", "base": {"fingerprint": "f"}, "rank": "16"})", "'rank'"},
      {R"({"id": "a", "base": {"fingerprint": "f"}, "layers": [0, "1"]})", "'layers'"},
      {R"({"id": "a", "base": {"fingerprint": "f"}, "task": 5})", "'task'"},
      {R"(not json)", "not a JSON object"},
  };
  for (const auto& [text, expect] : cases) {
    auto m = parse_adapter_metadata(text, "graft_adapter.json");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_NE(m.error().message.find(expect), std::string::npos) << text << " -> " << m.error().message;
  }
}

TEST(AdapterIds, PathsAndSeparatorsAreNotIds) {
  for (const char* good : {"poet", "poet-v2", "Poet_2.1", "a", "0abc"}) {
    EXPECT_TRUE(validate_adapter_id(good).ok()) << good;
  }
  for (const char* bad : {"", "..", "../etc", "a/b", "/abs", "a\\b", ".hidden", "-x", "a..b", "a+b", "a@1",
                          "a b", "caf\xc3\xa9", "none\n"}) {
    auto status = validate_adapter_id(bad);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_EQ(status.error().code, "invalid_argument");
  }
  EXPECT_FALSE(validate_adapter_id(std::string(129, 'a')).ok());
}

// A store with one adapter of every kind, and some things that are not adapters.
struct StoreFixture {
  fs::path root, extra;
  BaseModel base;
  StoreFixture() {
    root = fresh_dir("store-root");
    extra = fresh_dir("store-extra");
    base = open_base(tiny_base());
    const LoraAdapter a = make_adapter(tiny_adapter_spec(tiny_base(), 1));
    const LoraAdapter b = make_adapter(tiny_adapter_spec(tiny_base(), 2));
    write_peft_or_fail(root / "peft-one", a);
    fs::create_directories(root / "gguf-folder");
    write_gguf_or_fail(root / "gguf-folder" / "adapter.gguf", b);
    write_gguf_or_fail(root / "bare.gguf", a);
    fs::copy_file(tiny_base(), root / "a-base-model.gguf");  // not an adapter: skipped
    fs::create_directories(root / "notes");                  // no adapter files: skipped
    write_text(root / "notes" / "readme.txt", "hi");
    fs::create_directories(root / ".tmp-half-written");  // hidden: skipped
    write_peft_or_fail(root / ".tmp-half-written", a);
    fs::create_directories(root / "broken");
    write_text(root / "broken" / "adapter_config.json", R"({"r": 4, "lora_alpha": 8})");
    write_text(root / "broken" / "adapter_model.safetensors", "garbage");
    // The extra folder has another "peft-one" (hidden by the first root's) and its own.
    write_peft_or_fail(extra / "peft-one", b);
    write_peft_or_fail(extra / "only-extra", b);
  }
};

TEST(Store, ScanFindsEveryKindOfAdapterAndSkipsTheRest) {
  StoreFixture f;
  AdapterStore store({f.root, f.extra, f.root / "does-not-exist"});
  auto found = store.scan();
  std::vector<std::string> ids;
  for (const auto& a : found) ids.push_back(a.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"bare", "broken", "gguf-folder", "only-extra", "peft-one"}));
  for (const auto& a : found) {
    if (a.id == "broken") {
      EXPECT_FALSE(a.readable());
      EXPECT_NE(a.problem.find("safetensors"), std::string::npos) << a.problem;
      EXPECT_FALSE(check_compatibility(a, f.base).compatible);
      continue;
    }
    EXPECT_TRUE(a.readable()) << a.id << ": " << a.problem;
    EXPECT_FALSE(a.metadata.has_value());
    EXPECT_TRUE(check_compatibility(a, f.base).compatible)
        << a.id << ": " << check_compatibility(a, f.base).reason;
  }
  EXPECT_EQ(found[0].metadata_path, f.root / "bare.graft_adapter.json");
  EXPECT_EQ(found[2].description->format, AdapterFormat::gguf);
  EXPECT_EQ(found[4].path, f.root / "peft-one");  // the first root wins
}

TEST(Store, FindLooksInEveryRootAndRejectsPathsAsIds) {
  StoreFixture f;
  AdapterStore store({f.root, f.extra});
  auto extra = store.find("only-extra");
  ASSERT_TRUE(extra.ok()) << error_of(extra);
  EXPECT_EQ(extra->path, f.extra / "only-extra");
  auto bare = store.find("bare");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->description->format, AdapterFormat::gguf);
  auto missing = store.find("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, "not_found");
  EXPECT_NE(missing.error().message.find("'nope'"), std::string::npos);
  for (const char* bad : {"../store-extra/only-extra", "..", "/etc/passwd", "notes/../peft-one"}) {
    auto r = store.find(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, "invalid_argument") << bad;
  }
}

TEST(Store, ConfineAcceptsOnlyPathsInsideARoot) {
  StoreFixture f;
  AdapterStore store({f.root, f.extra.string() + "/"});
  EXPECT_TRUE(store.confine(f.root / "peft-one").ok());
  EXPECT_TRUE(store.confine(f.extra / "only-extra").ok());
  EXPECT_TRUE(store.confine(f.root / "notes" / ".." / "bare.gguf").ok());
  for (const fs::path& outside : {f.root.parent_path(), f.root, f.root / ".." / "elsewhere",
                                  fs::path("/etc/passwd"), fs::path(f.root.string() + "-sibling") / "x"}) {
    auto r = store.confine(outside);
    ASSERT_FALSE(r.ok()) << outside;
    EXPECT_EQ(r.error().code, "forbidden") << outside;
  }
  // A symlink inside the store that leads outside it is outside.
  const fs::path outside_dir = fresh_dir("outside-target");
  fs::create_directory_symlink(outside_dir, f.root / "escape");
  EXPECT_EQ(store.confine(f.root / "escape").error().code, "forbidden");
  EXPECT_EQ(store.confine(f.root / "escape" / "x").error().code, "forbidden");
}

TEST(Store, StampedAdaptersAreJudgedByFingerprint) {
  StoreFixture f;
  AdapterStore store({f.root});
  auto adapter = store.find("peft-one");
  ASSERT_TRUE(adapter.ok());
  AdapterMetadata m = describe_for_base("peft-one", *adapter->description, f.base);
  EXPECT_EQ(m.base_fingerprint, f.base.fingerprint);
  EXPECT_EQ(m.rank, 4);
  EXPECT_EQ(m.target_modules.size(), 7u);
  EXPECT_EQ(m.created.size(), 20u);
  ASSERT_TRUE(write_adapter_metadata(adapter->metadata_path, m).ok());

  auto stamped = store.find("peft-one");
  ASSERT_TRUE(stamped.ok());
  ASSERT_TRUE(stamped->metadata.has_value());
  EXPECT_TRUE(check_compatibility(*stamped, f.base).compatible);

  // Same shapes, but stamped for another model: not compatible, and the reason says so.
  m.base_fingerprint = "sha256:0123456789abcdef";
  m.base_repo = "someone/other-model";
  ASSERT_TRUE(write_adapter_metadata(adapter->metadata_path, m).ok());
  auto other = store.find("peft-one");
  Compatibility c = check_compatibility(*other, f.base);
  EXPECT_FALSE(c.compatible);
  EXPECT_NE(c.reason.find("made for someone/other-model (fingerprint 0123456789ab)"), std::string::npos)
      << c.reason;

  // Unreadable metadata is a problem the listing shows.
  write_text(adapter->metadata_path, "{");
  auto broken = store.find("peft-one");
  ASSERT_TRUE(broken.ok());
  EXPECT_FALSE(broken->readable());
  EXPECT_NE(broken->problem.find("graft_adapter.json"), std::string::npos) << broken->problem;
}

TEST(Store, UserStoreFollowsXdgDataHome) {
  const char* old = std::getenv("XDG_DATA_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_DATA_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(AdapterStore::user_store(), fs::path("/tmp/xdg-test/graft/adapters"));
  auto store = AdapterStore::with_user_store({"/x", "/y"});
  EXPECT_EQ(store.roots(), (std::vector<fs::path>{"/tmp/xdg-test/graft/adapters", "/x", "/y"}));
  if (old) {
    ::setenv("XDG_DATA_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_DATA_HOME");
  }
}

TEST(Store, ReadMountableChecksTheBaseAndFoldsScale) {
  StoreFixture f;
  AdapterStore store({f.root});
  auto adapter = store.find("gguf-folder");
  ASSERT_TRUE(adapter.ok());
  auto weights = read_mountable(*adapter, f.base);
  ASSERT_TRUE(weights.ok()) << error_of(weights);
  EXPECT_EQ(weights->pairs.size(), 14u);
  EXPECT_FLOAT_EQ(weights->scale, 2.0f);

  auto broken = store.find("broken");
  ASSERT_TRUE(broken.ok());
  auto bad = read_mountable(*broken, f.base);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "invalid_adapter");
  EXPECT_NE(bad.error().message.find("adapter 'broken'"), std::string::npos);

  const BaseModel& qwen = open_base(tiny_base("qwen3"));
  auto wrong = read_mountable(*adapter, qwen);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, "incompatible_adapter");
}

}  // namespace
}  // namespace graft
