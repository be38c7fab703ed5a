// The shared selection file: written and read back, what a damaged file
// says, and the check of a selection against loaded adapters and the store.
#include "adapters/shared_selection.h"

#include <gtest/gtest.h>

#include "fixtures.h"

namespace graft {
namespace {

using testing::error_of;

TEST(SharedSelection, NoFileMeansNoSelection) {
  const fs::path dir = testing::fresh_dir("shared-selection-none");
  auto saved = read_shared_selection(dir / "selection.json");
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_FALSE(saved->has_value());
  EXPECT_TRUE(clear_shared_selection(dir / "selection.json").ok());  // nothing to clear is fine
}

TEST(SharedSelection, WrittenAndReadBack) {
  const fs::path file = testing::fresh_dir("shared-selection") / "state" / "selection.json";
  for (const std::string spec : {"a", "a@0.5+b", "none"}) {
    auto selection = parse_adapter_spec(spec);
    ASSERT_TRUE(selection.ok());
    auto written = write_shared_selection(file, *selection);
    ASSERT_TRUE(written.ok()) << written.error().message;
    auto saved = read_shared_selection(file);
    ASSERT_TRUE(saved.ok()) << saved.error().message;
    ASSERT_TRUE(saved->has_value());
    EXPECT_EQ((*saved)->selection, *selection) << spec;
    EXPECT_EQ((*saved)->updated, written->updated);
    EXPECT_EQ((*saved)->updated.size(), 20u) << (*saved)->updated;  // 2026-12-02T00:10:00Z
  }
  ASSERT_TRUE(clear_shared_selection(file).ok());
  EXPECT_FALSE(fs::exists(file));
}

TEST(SharedSelection, ADamagedFileIsAnErrorNamingIt) {
  const fs::path file = testing::fresh_dir("shared-selection-bad") / "selection.json";
  for (const std::string text : {"not json", "[]", R"({"adapter": 3})", R"({"adapter": "a+"})", "{}"}) {
    testing::write_text(file, text);
    auto saved = read_shared_selection(file);
    ASSERT_FALSE(saved.ok()) << text;
    EXPECT_NE(saved.error().message.find(file.string()), std::string::npos) << saved.error().message;
    EXPECT_NE(saved.error().message.find("graft adapters use"), std::string::npos) << saved.error().message;
  }
}

TEST(SharedSelection, CheckedAgainstLoadedAdaptersAndTheStore) {
  const std::string base = testing::tiny_base();
  const fs::path store = testing::fresh_dir("shared-selection-store");
  testing::write_peft_or_fail(store / "a", testing::make_adapter(testing::tiny_adapter_spec(base, 1)));
  testing::write_text(store / "broken.gguf", "not a GGUF file");
  TestModelSpec wider = testing::tiny_base_spec();
  wider.n_ff = 384;  // a wider MLP
  const std::string other = testing::test_model_path(wider);
  testing::write_peft_or_fail(store / "misfit", testing::make_adapter(testing::tiny_adapter_spec(other, 2)));
  const AdapterStore adapters({store});
  const BaseModel& info = testing::base_info(base);
  auto check = [&](const std::string& spec, const std::function<bool(std::string_view)>& loaded = {}) {
    auto selection = parse_adapter_spec(spec);
    EXPECT_TRUE(selection.ok()) << spec;
    return check_selectable(*selection, adapters, &info, loaded);
  };
  EXPECT_TRUE(check("none").ok());
  EXPECT_TRUE(check("a").ok()) << error_of(check("a"));
  Status unknown = check("a+nosuch");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, "not_found");
  EXPECT_NE(unknown.error().message.find("'nosuch'"), std::string::npos);
  // Loaded adapters need not be in the store.
  EXPECT_TRUE(check("a+loaded", [](std::string_view id) { return id == "loaded"; }).ok());
  EXPECT_EQ(check("broken").error().code, "invalid_adapter");
  EXPECT_EQ(check("misfit").error().code, "incompatible_adapter");
  // Without a base model, only the store is asked.
  auto misfit = parse_adapter_spec("misfit");
  EXPECT_TRUE(check_selectable(*misfit, adapters, nullptr).ok());
}

}  // namespace
}  // namespace graft
