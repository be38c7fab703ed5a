// The "loaded" and "selected" states: mounting through callbacks, leases,
// unloading while in use, default selection.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "adapters/load.h"
#include "adapters/mounted.h"
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

// Stands in for the engine: hands out slots and remembers what was mounted.
struct FakeEngine {
  std::map<int, LoraWeights> slots;
  int next = 0;
  bool fail_mount = false;
  bool fail_unmount = false;
  MountedAdapters::MountFn mount() {
    return [this](const LoraWeights& w) -> Result<int> {
      if (fail_mount) return errorf("internal", "the engine refused");
      slots[next] = w;
      return next++;
    };
  }
  MountedAdapters::UnmountFn unmount() {
    return [this](int slot) -> Status {
      if (fail_unmount) return errorf("internal", "the engine refused to unmount");
      if (!slots.erase(slot)) return errorf("not_found", "no slot {}", slot);
      return {};
    };
  }
};

struct Fixture {
  fs::path root;
  std::unique_ptr<AdapterStore> store;
  std::unique_ptr<MountedAdapters> mounted;
  FakeEngine engine;
  Fixture() {
    root = fresh_dir("mounted");
    write_peft_or_fail(root / "a", make_adapter(tiny_adapter_spec(tiny_base(), 1)));
    write_peft_or_fail(root / "b", make_adapter(tiny_adapter_spec(tiny_base(), 2, 8)));
    fs::create_directories(root / "c");
    write_gguf_or_fail(root / "c" / "c.gguf", make_adapter(tiny_adapter_spec(tiny_base(), 3)));
    fs::create_directories(root / "corrupt");
    write_text(root / "corrupt" / "adapter_config.json", R"({"r": 4, "lora_alpha": 8})");
    write_text(root / "corrupt" / "adapter_model.safetensors", "not safetensors at all");
    TestModelSpec other = testing::tiny_base_spec();
    other.n_ff = 384;
    write_peft_or_fail(root / "other", make_adapter(tiny_adapter_spec(testing::test_model_path(other))));
    store = std::make_unique<AdapterStore>(std::vector<fs::path>{root});
    mounted = std::make_unique<MountedAdapters>(testing::base_info(tiny_base()));
  }
  Result<LoadedAdapter> load(const std::string& id) {
    GRAFT_TRY(AvailableAdapter adapter, store->find(id));
    return mounted->load(adapter, engine.mount());
  }
};

TEST(MountedAdapters, LoadMountsTheWeightsAndListsThem) {
  Fixture f;
  auto a = f.load("a");
  ASSERT_TRUE(a.ok()) << error_of(a);
  EXPECT_EQ(a->id, "a");
  EXPECT_EQ(a->slot, 0);
  EXPECT_EQ(a->rank, 4);
  EXPECT_FLOAT_EQ(a->scale, 2.0f);
  EXPECT_EQ(a->layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(a->targets.size(), 7u);
  EXPECT_GT(a->size_bytes, 0u);
  EXPECT_EQ(a->path, f.root / "a");
  ASSERT_EQ(f.engine.slots.size(), 1u);
  EXPECT_EQ(f.engine.slots[0].pairs.size(), 14u);
  EXPECT_FLOAT_EQ(f.engine.slots[0].scale, 2.0f);

  auto c = f.load("c");
  ASSERT_TRUE(c.ok()) << error_of(c);
  EXPECT_EQ(f.engine.slots[1].pairs.size(), 14u);
  EXPECT_EQ(c->format, AdapterFormat::gguf);
  auto list = f.mounted->list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, "a");
  EXPECT_EQ(list[1].id, "c");
  EXPECT_TRUE(f.mounted->find("c").has_value());
  EXPECT_FALSE(f.mounted->find("b").has_value());
}

TEST(MountedAdapters, FailedLoadsChangeNothing) {
  Fixture f;
  auto corrupt = f.load("corrupt");
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.error().code, "invalid_adapter");
  EXPECT_NE(corrupt.error().message.find("safetensors"), std::string::npos) << corrupt.error().message;

  auto other = f.load("other");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, "incompatible_adapter");
  EXPECT_NE(other.error().message.find("ffn_gate"), std::string::npos) << other.error().message;

  f.engine.fail_mount = true;
  auto refused = f.load("a");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "the engine refused");
  EXPECT_TRUE(f.mounted->list().empty());
  EXPECT_TRUE(f.engine.slots.empty());

  f.engine.fail_mount = false;
  ASSERT_TRUE(f.load("a").ok());  // the id was not left reserved
  auto twice = f.load("a");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code, "conflict");
  EXPECT_EQ(f.engine.slots.size(), 1u);
}

TEST(MountedAdapters, SelectBuildsTheRouteAndNamesUnloadedIds) {
  Fixture f;
  ASSERT_TRUE(f.load("a").ok());
  ASSERT_TRUE(f.load("b").ok());
  auto lease = f.mounted->select(std::string_view("b@0.5+a"));
  ASSERT_TRUE(lease.ok()) << error_of(lease);
  EXPECT_EQ(lease->route().n, 2);
  EXPECT_EQ(lease->route().slot[0], 1);
  EXPECT_EQ(lease->route().scale[0], 0.5f);
  EXPECT_EQ(lease->route().slot[1], 0);
  EXPECT_EQ(lease->route().scale[1], 1.0f);
  EXPECT_EQ(lease->selection().to_string(), "b@0.5+a");

  auto none = f.mounted->select(std::string_view("none"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->route().empty());
  auto absent = f.mounted->select(std::nullopt);
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->route().empty());

  for (const char* spec : {"c", "a+c", "nope@2"}) {
    auto bad = f.mounted->select(std::string_view(spec));
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_EQ(bad.error().code, "invalid_argument");
    EXPECT_NE(bad.error().message.find("is not loaded"), std::string::npos) << bad.error().message;
  }
  EXPECT_NE(error_of(f.mounted->select(std::string_view("c"))).find("'c'"), std::string::npos);
  EXPECT_NE(error_of(f.mounted->select(std::string_view("a+"))).find("empty adapter name"),
            std::string::npos);
  // Failed selections hold nothing.
  EXPECT_EQ(f.mounted->find("a")->users, 1);
}

TEST(MountedAdapters, UnloadWaitsForEveryLease) {
  Fixture f;
  ASSERT_TRUE(f.load("a").ok());
  ASSERT_TRUE(f.load("b").ok());
  {
    auto first = f.mounted->select(std::string_view("a"));
    auto second = f.mounted->select(std::string_view("a+b"));
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(f.mounted->find("a")->users, 2);
    EXPECT_EQ(f.mounted->find("b")->users, 1);
    Status busy = f.mounted->unload("a", f.engine.unmount());
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.error().code, "in_use");
    EXPECT_NE(busy.error().message.find("2 requests"), std::string::npos) << busy.error().message;
    AdapterLease moved = std::move(first).value();  // moving a lease does not release it
    EXPECT_EQ(f.mounted->find("a")->users, 2);
    EXPECT_TRUE(moved.route().n == 1);
  }
  EXPECT_EQ(f.mounted->find("a")->users, 0);
  EXPECT_EQ(f.mounted->find("b")->users, 0);
  ASSERT_TRUE(f.mounted->unload("a", f.engine.unmount()).ok());
  EXPECT_FALSE(f.mounted->find("a").has_value());
  EXPECT_EQ(f.engine.slots.count(0), 0u);
  EXPECT_EQ(f.mounted->unload("a", f.engine.unmount()).error().code, "not_found");
  auto gone = f.mounted->select(std::string_view("a"));
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("'a' is not loaded"), std::string::npos);

  f.engine.fail_unmount = true;
  EXPECT_FALSE(f.mounted->unload("b", f.engine.unmount()).ok());
  EXPECT_TRUE(f.mounted->find("b").has_value());  // still loaded and selectable
  EXPECT_TRUE(f.mounted->select(std::string_view("b")).ok());
}

TEST(MountedAdapters, DefaultSelectionAppliesWhenTheRequestNamesNone) {
  Fixture f;
  ASSERT_TRUE(f.load("a").ok());
  EXPECT_FALSE(f.mounted->set_default(*parse_adapter_spec("b")).ok());  // not loaded
  ASSERT_TRUE(f.mounted->set_default(*parse_adapter_spec("a@0.5")).ok());
  EXPECT_EQ(f.mounted->default_selection().to_string(), "a@0.5");

  auto by_default = f.mounted->select(std::nullopt);
  ASSERT_TRUE(by_default.ok());
  EXPECT_EQ(by_default->route().n, 1);
  EXPECT_EQ(by_default->route().scale[0], 0.5f);
  auto base = f.mounted->select(std::string_view("none"));  // a request may still ask for the base model
  ASSERT_TRUE(base.ok());
  EXPECT_TRUE(base->route().empty());

  Status unload = f.mounted->unload("a", f.engine.unmount());
  ASSERT_FALSE(unload.ok());
  EXPECT_EQ(unload.error().code, "in_use");
  EXPECT_NE(unload.error().message.find("default"), std::string::npos);
}

TEST(MountedAdapters, ConcurrentSelectsKeepCountsExact) {
  Fixture f;
  ASSERT_TRUE(f.load("a").ok());
  ASSERT_TRUE(f.load("b").ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto lease = f.mounted->select(std::string_view(t % 2 ? "a+b" : "b"));
        if (!lease.ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(f.mounted->find("a")->users, 0);
  EXPECT_EQ(f.mounted->find("b")->users, 0);
}

// What --max-loaded-adapters unloads: the least recently used adapter that
// no lease holds, never the default, never one the caller keeps; and the
// idle callback fires when an adapter's last lease goes.
TEST(MountedAdapters, LeastRecentlyUsedIdleSkipsLeasesAndTheDefault) {
  Fixture f;
  ASSERT_TRUE(f.load("a").ok());
  ASSERT_TRUE(f.load("b").ok());
  ASSERT_TRUE(f.load("c").ok());
  EXPECT_EQ(f.mounted->size(), 3u);
  EXPECT_EQ(f.mounted->least_recently_used_idle(), "a");  // loaded first, never used since
  int idle_calls = 0;
  f.mounted->set_on_idle([&] { ++idle_calls; });
  {
    auto lease = f.mounted->select(std::string_view("a"));
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(f.mounted->least_recently_used_idle(), "b");  // a is in use
    EXPECT_EQ(idle_calls, 0);
  }
  EXPECT_EQ(idle_calls, 1);
  EXPECT_EQ(f.mounted->least_recently_used_idle(), "b");  // a was used after b
  EXPECT_EQ(f.mounted->least_recently_used_idle({"b"}), "c");
  ASSERT_TRUE(f.mounted->set_default(*parse_adapter_spec("b")).ok());
  EXPECT_EQ(f.mounted->least_recently_used_idle(), "c");
  auto c = f.mounted->select(std::string_view("c"));
  auto a = f.mounted->select(std::string_view("a"));
  EXPECT_FALSE(f.mounted->least_recently_used_idle().has_value());  // b is the default, a and c in use
  f.mounted->set_on_idle(nullptr);
}

TEST(LoadAndSelect, LoadsWhatTheSpecNamesFromTheStore) {
  Fixture f;
  auto lease = load_and_select("a@0.5+c", *f.store, *f.mounted, f.engine.mount());
  ASSERT_TRUE(lease.ok()) << error_of(lease);
  EXPECT_EQ(lease->route().n, 2);
  EXPECT_EQ(f.mounted->list().size(), 2u);
  // Already loaded adapters are reused, not loaded twice.
  auto again = load_and_select("c", *f.store, *f.mounted, f.engine.mount());
  ASSERT_TRUE(again.ok()) << error_of(again);
  EXPECT_EQ(f.engine.slots.size(), 2u);

  auto unknown = load_and_select("a+nope", *f.store, *f.mounted, f.engine.mount());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, "not_found");
  EXPECT_NE(unknown.error().message.find("'nope'"), std::string::npos);
  auto corrupt = load_and_select("corrupt", *f.store, *f.mounted, f.engine.mount());
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.error().code, "invalid_adapter");
  EXPECT_EQ(f.mounted->list().size(), 2u);
}

TEST(ForceAdapter, ByIdSpecOrPathBecomesTheDefault) {
  Fixture f;
  auto by_path = force_adapter((f.root / "c" / "c.gguf").string(), *f.store, *f.mounted, f.engine.mount());
  ASSERT_TRUE(by_path.ok()) << error_of(by_path);
  EXPECT_EQ(by_path->to_string(), "c");  // the file's stem
  EXPECT_EQ(f.mounted->default_selection().to_string(), "c");

  auto by_spec = force_adapter("a@0.5+b", *f.store, *f.mounted, f.engine.mount());
  ASSERT_TRUE(by_spec.ok()) << error_of(by_spec);
  EXPECT_EQ(f.mounted->default_selection().to_string(), "a@0.5+b");
  auto lease = f.mounted->select(std::nullopt);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->route().n, 2);

  EXPECT_EQ(force_adapter("missing/folder", *f.store, *f.mounted, f.engine.mount()).error().code,
            "not_found");
  EXPECT_EQ(force_adapter("nope", *f.store, *f.mounted, f.engine.mount()).error().code, "not_found");
  EXPECT_EQ(f.mounted->default_selection().to_string(), "a@0.5+b");  // failures change nothing
  EXPECT_TRUE(looks_like_path("./x"));
  EXPECT_TRUE(looks_like_path("x.gguf"));
  EXPECT_FALSE(looks_like_path("x.v2"));
}

}  // namespace
}  // namespace graft
