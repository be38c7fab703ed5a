// `graft pi install`: graft's provider in Pi's models.json and graft's
// extension, written into a temporary HOME from a running server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/pi_config.h"
#include "cli_server.h"

namespace graft {
namespace {

using ojson = nlohmann::ordered_json;
using testing::contains;
using testing::run_graft;

ojson read_json(const fs::path& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << path;
  return text.ok() ? ojson::parse(*text, nullptr, false) : ojson();
}

TEST(PiConfig, MergeWritesGraftsProviderAndKeepsTheRest) {
  const std::string existing = R"({
    "providers": {
      "ollama": {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "models": [{"id": "x"}]},
      "graft": {"baseUrl": "http://old:1/v1", "headers": {"x-team": "mine"}, "models": [{"id": "old"}]}
    },
    "someSetting": true
  })";
  cli::PiModel model{"http://127.0.0.1:8080/v1", "tiny", 4096, 1024};
  auto merged = cli::merge_pi_models(existing, model);
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  const ojson& j = *merged;
  EXPECT_EQ(j["someSetting"], true);
  EXPECT_EQ(j["providers"]["ollama"]["models"][0]["id"], "x");
  const ojson& graft = j["providers"]["graft"];
  EXPECT_EQ(graft["baseUrl"], "http://127.0.0.1:8080/v1");
  EXPECT_EQ(graft["api"], "openai-completions");
  EXPECT_EQ(graft["apiKey"], "GRAFT_API_KEY");
  EXPECT_EQ(graft["headers"]["x-team"], "mine");  // the user's own field
  EXPECT_EQ(graft["compat"]["supportsReasoningEffort"], false);
  ASSERT_EQ(graft["models"].size(), 1u);
  EXPECT_EQ(graft["models"][0]["id"], "tiny");
  EXPECT_EQ(graft["models"][0]["contextWindow"], 4096);
  EXPECT_EQ(graft["models"][0]["maxTokens"], 1024);
  // Merging again changes nothing.
  auto again = cli::merge_pi_models(j.dump(), model);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dump(), j.dump());
}

TEST(PiConfig, MergeRefusesWhatIsNotAModelsFile) {
  cli::PiModel model{"http://127.0.0.1:8080/v1", "tiny", 4096, 1024};
  EXPECT_FALSE(cli::merge_pi_models("[1, 2]", model).ok());
  EXPECT_FALSE(cli::merge_pi_models("{\"providers\": 3}", model).ok());
  EXPECT_FALSE(cli::merge_pi_models("{ not json", model).ok());
  EXPECT_TRUE(cli::merge_pi_models("", model).ok());
}

TEST(PiInstall, WritesTheProviderAndTheExtensionIdempotently) {
  const fs::path root = testing::fresh_dir("pi-install");
  ::setenv("XDG_DATA_HOME", (root / "server-data").c_str(), 1);
  ::setenv("HF_HOME", (root / "hf").c_str(), 1);
  testing::TestServer server(root);
  const fs::path home = root / "home";
  const fs::path agent = home / ".pi" / "agent";
  fs::create_directories(agent);
  ASSERT_TRUE(write_file_atomic(
                  agent / "models.json",
                  R"({"providers": {"ollama": {"baseUrl": "http://localhost:11434/v1", "models": []}}})")
                  .ok());
  const std::string env = "-u PI_CODING_AGENT_DIR HOME=" + home.string();

  // From another folder than the build's: the extension comes from the binary.
  testing::Output first = run_graft(env, "pi install --url " + server.url(), "/");
  ASSERT_EQ(first.status, 0) << first.text;
  EXPECT_TRUE(contains(first.text, "wrote Pi's provider 'graft'")) << first.text;
  const ojson models = read_json(agent / "models.json");
  EXPECT_TRUE(models["providers"].contains("ollama")) << models;
  const ojson& graft = models["providers"]["graft"];
  EXPECT_EQ(graft["baseUrl"], server.url() + "/v1");
  EXPECT_EQ(graft["models"][0]["id"], "tiny");
  EXPECT_EQ(graft["models"][0]["contextWindow"], 128);
  EXPECT_EQ(graft["models"][0]["maxTokens"], 32);

  auto installed = read_file(agent / "extensions" / "graft-adapter.ts");
  ASSERT_TRUE(installed.ok());
  auto source = read_file(fs::path(GRAFT_SOURCE_DIR) / "integrations" / "pi" / "graft-adapter.ts");
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(*installed, *source);
  EXPECT_TRUE(contains(*installed, "before_provider_request"));

  testing::Output second = run_graft(env, "pi install --url " + server.url());
  ASSERT_EQ(second.status, 0) << second.text;
  EXPECT_TRUE(contains(second.text, "kept Pi's provider 'graft'")) << second.text;
  EXPECT_TRUE(contains(second.text, "kept graft's adapter extension")) << second.text;
  EXPECT_EQ(read_json(agent / "models.json"), models);

  // --max-tokens, and PI_CODING_AGENT_DIR moves Pi's folder.
  const fs::path elsewhere = root / "pi-dir";
  testing::Output moved = run_graft("HOME=" + home.string() + " PI_CODING_AGENT_DIR=" + elsewhere.string(),
                                    "pi install --max-tokens 16 --url " + server.url());
  ASSERT_EQ(moved.status, 0) << moved.text;
  EXPECT_EQ(read_json(elsewhere / "models.json")["providers"]["graft"]["models"][0]["maxTokens"], 16);
  EXPECT_TRUE(fs::exists(elsewhere / "extensions" / "graft-adapter.ts"));
}

TEST(PiInstall, ABrokenModelsFileIsLeftAsItIs) {
  const fs::path root = testing::fresh_dir("pi-install-broken");
  ::setenv("XDG_DATA_HOME", (root / "server-data").c_str(), 1);
  ::setenv("HF_HOME", (root / "hf").c_str(), 1);
  testing::TestServer server(root);
  const fs::path agent = root / "home" / ".pi" / "agent";
  fs::create_directories(agent);
  ASSERT_TRUE(write_file_atomic(agent / "models.json", "{ \"providers\": ").ok());
  testing::Output out = run_graft("-u PI_CODING_AGENT_DIR HOME=" + (root / "home").string(),
                                  "pi install --url " + server.url());
  EXPECT_EQ(out.status, 1) << out.text;
  EXPECT_TRUE(contains(out.text, "models.json: it is not a JSON object")) << out.text;
  EXPECT_EQ(*read_file(agent / "models.json"), "{ \"providers\": ");
}

TEST(PiInstall, NoServerNoInstall) {
  const fs::path home = testing::fresh_dir("pi-install-none");
  testing::Output out =
      run_graft("-u PI_CODING_AGENT_DIR HOME=" + home.string(), "pi install --url http://127.0.0.1:1");
  EXPECT_EQ(out.status, 1) << out.text;
  EXPECT_TRUE(contains(out.text, "cannot reach graft serve")) << out.text;
  EXPECT_FALSE(fs::exists(home / ".pi"));
}

}  // namespace
}  // namespace graft
