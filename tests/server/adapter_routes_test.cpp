// The adapter routes' errors: each kind of bad adapter gets its own code.
#include "server/routes_adapters.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server/http_client.h"
#include "testing/test_models.h"

namespace graft::server {
namespace {

using graft::testing::http_request;
using graft::testing::HttpReply;

TEST(AdapterRoutes, ACorruptAdapterHasItsOwnCode) {
  const std::filesystem::path root = std::filesystem::path(graft::testing::scratch_dir()) / "adapter-routes";
  std::filesystem::create_directories(root / "store");
  ::setenv("XDG_DATA_HOME", (root / "data").c_str(), 1);  // an empty user store
  {
    std::ofstream broken(root / "store" / "broken.gguf", std::ios::binary);
    broken << "GGUF but nothing a GGUF reader can use";
  }
  ServeOptions options;
  options.model_path = graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
  options.n_ctx = 128;
  options.kv_budget_tokens = 512;
  options.threads = 1;
  auto model = ServedModel::load(options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto service = AdapterService::create(**model, {{(root / "store").string()}, ""});
  ASSERT_TRUE(service.ok()) << service.error().message;
  ServerOptions server_options;
  server_options.http.port = 0;
  Server server(**model, server_options);
  (*service)->install(server);
  ASSERT_TRUE(server.start().ok());

  const json request = {{"prompt", "Hello"}, {"max_tokens", 2}, {"adapter", "broken"}};
  HttpReply selected = http_request(server.port(), "POST", "/v1/completions", request.dump());
  ASSERT_EQ(selected.status, 400) << selected.body;
  json error = json::parse(selected.body)["error"];
  EXPECT_EQ(error["code"], "adapter_corrupt") << selected.body;
  EXPECT_EQ(error["param"], "adapter");
  EXPECT_NE(error["message"].get<std::string>().find("broken"), std::string::npos);
  // An adapter that is not there at all keeps its code.
  json unknown = request;
  unknown["adapter"] = "nosuch";
  HttpReply missing = http_request(server.port(), "POST", "/v1/completions", unknown.dump());
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "adapter_not_found") << missing.body;
  // Loading it says the same as selecting it: one code for a corrupt adapter.
  HttpReply loaded = http_request(server.port(), "POST", "/v1/adapters", json{{"id", "broken"}}.dump());
  ASSERT_EQ(loaded.status, 400) << loaded.body;
  EXPECT_EQ(json::parse(loaded.body)["error"]["code"], "adapter_corrupt") << loaded.body;

  server.stop();
  service->reset();
  model->reset();
}

}  // namespace
}  // namespace graft::server
