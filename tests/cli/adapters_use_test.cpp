// `graft adapters use`: the shared selection, checked against the running
// server when one answers, else against the adapter store.
#include <gtest/gtest.h>

#include "adapters/shared_selection.h"
#include "cli_server.h"

namespace graft {
namespace {

using testing::contains;
using testing::run_graft;

// A port nothing listens on.
const std::string kNoServer = "http://127.0.0.1:1";

std::string saved_spec(const fs::path& file) {
  auto saved = read_shared_selection(file);
  EXPECT_TRUE(saved.ok()) << saved.error().message;
  return saved.ok() && saved->has_value() ? (*saved)->selection.to_string() : "";
}

TEST(AdaptersUse, WithoutAServerChecksTheStore) {
  const fs::path root = testing::fresh_dir("use-store");
  const std::string base = testing::test_model_path(testing::tiny_spec("qwen3", "qwen2", "f16"));
  testing::write_peft_or_fail(root / "data" / "graft" / "adapters" / "a",
                              testing::make_adapter(testing::tiny_adapter_spec(base, 1)));
  testing::write_peft_or_fail(root / "extra" / "b",
                              testing::make_adapter(testing::tiny_adapter_spec(base, 2)));
  const std::string env = "XDG_DATA_HOME=" + (root / "data").string() + " HF_HOME=" + (root / "hf").string();
  const fs::path file = root / "data" / "graft" / "selection.json";

  testing::Output unknown = run_graft(env, "adapters use a+nosuch --url " + kNoServer);
  EXPECT_EQ(unknown.status, 1) << unknown.text;
  EXPECT_TRUE(contains(unknown.text, "unknown adapter 'nosuch'")) << unknown.text;
  EXPECT_FALSE(fs::exists(file));

  testing::Output bad = run_graft(env, "adapters use 'a@x' --url " + kNoServer);
  EXPECT_EQ(bad.status, 1) << bad.text;
  EXPECT_FALSE(fs::exists(file));

  testing::Output used = run_graft(
      env, "adapters use a@0.5+b --adapter-dir " + (root / "extra").string() + " --url " + kNoServer);
  ASSERT_EQ(used.status, 0) << used.text;
  EXPECT_TRUE(contains(used.text, "no server at")) << used.text;
  EXPECT_EQ(saved_spec(file), "a@0.5+b");

  // b is only in --adapter-dir: without it, it is unknown, and the selection stays.
  testing::Output hidden = run_graft(env, "adapters use b --url " + kNoServer);
  EXPECT_EQ(hidden.status, 1) << hidden.text;
  EXPECT_EQ(saved_spec(file), "a@0.5+b");

  ASSERT_EQ(run_graft(env, "adapters use none --url " + kNoServer).status, 0);
  EXPECT_EQ(saved_spec(file), "none");
  ASSERT_EQ(run_graft(env, "adapters use --clear --url " + kNoServer).status, 0);
  EXPECT_FALSE(fs::exists(file));

  testing::Output both = run_graft(env, "adapters use a --clear --url " + kNoServer);
  EXPECT_EQ(both.status, 1) << both.text;
  testing::Output neither = run_graft(env, "adapters use --url " + kNoServer);
  EXPECT_EQ(neither.status, 1) << neither.text;
}

TEST(AdaptersUse, ARunningServerChecksAndSavesIt) {
  const fs::path root = testing::fresh_dir("use-server");
  ::setenv("XDG_DATA_HOME", (root / "server-data").c_str(), 1);
  ::setenv("HF_HOME", (root / "hf").c_str(), 1);
  testing::TestServer server(root);
  // The command's own state folder stays untouched: the server saves the selection.
  const std::string env = "XDG_DATA_HOME=" + (root / "cli-data").string();

  testing::Output used = run_graft(env, "adapters use a+b --url " + server.url());
  ASSERT_EQ(used.status, 0) << used.text;
  EXPECT_TRUE(contains(used.text, "a+b")) << used.text;
  EXPECT_EQ(saved_spec(server.state_file()), "a+b");
  EXPECT_FALSE(fs::exists(root / "cli-data"));

  testing::Output unknown = run_graft(env, "adapters use nosuch --url " + server.url());
  EXPECT_EQ(unknown.status, 1) << unknown.text;
  EXPECT_TRUE(contains(unknown.text, "unknown adapter 'nosuch'")) << unknown.text;
  EXPECT_EQ(saved_spec(server.state_file()), "a+b");

  // c is in the server's store though not loaded: a valid choice.
  ASSERT_EQ(run_graft(env, "adapters use c --url " + server.url()).status, 0);
  EXPECT_EQ(saved_spec(server.state_file()), "c");
  ASSERT_EQ(run_graft(env, "adapters use none --url " + server.url()).status, 0);
  EXPECT_EQ(saved_spec(server.state_file()), "none");
}

}  // namespace
}  // namespace graft
