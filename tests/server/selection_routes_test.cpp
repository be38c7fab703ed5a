// The shared selection over HTTP (GET/PUT /v1/adapters/selection) and the
// per-adapter request counters of /v1/adapters and /stats.
#include "server/routes_selection.h"

#include <gtest/gtest.h>

#include "adapters/fixtures.h"
#include "server/http_client.h"

namespace graft::server {
namespace {

using graft::testing::http_request;
using graft::testing::HttpReply;

class SelectionRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = graft::testing::fresh_dir("selection-routes");
    ::setenv("XDG_DATA_HOME", (root_ / "data").c_str(), 1);  // an empty user store
    ::setenv("HF_HOME", (root_ / "hf").c_str(), 1);
    const std::string base =
        graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
    for (const char* id : {"a", "b", "c"}) {
      const uint64_t seed = static_cast<uint64_t>(id[0]);
      graft::testing::write_peft_or_fail(
          root_ / "store" / id, graft::testing::make_adapter(graft::testing::tiny_adapter_spec(base, seed)));
    }
    // An adapter for a model of another shape.
    TestModelSpec other_spec = graft::testing::tiny_spec("qwen3", "qwen2", "f16");
    other_spec.n_ff = 384;
    const std::string other = graft::testing::test_model_path(other_spec);
    graft::testing::write_peft_or_fail(
        root_ / "store" / "misfit",
        graft::testing::make_adapter(graft::testing::tiny_adapter_spec(other, 9)));

    ServeOptions options;
    options.model_path = base;
    options.n_ctx = 128;
    options.kv_budget_tokens = 512;
    options.threads = 1;
    auto model = ServedModel::load(options);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(model).value();
    auto adapters = AdapterService::create(*model_, {{(root_ / "store").string()}, ""});
    ASSERT_TRUE(adapters.ok()) << adapters.error().message;
    adapters_ = std::move(adapters).value();
    selection_ = std::make_unique<SelectionService>(*adapters_, file());
    ServerOptions server_options;
    server_options.http.port = 0;
    server_ = std::make_unique<Server>(*model_, server_options);
    adapters_->install(*server_);
    selection_->install(*server_);
    ASSERT_TRUE(server_->start().ok());
    for (const char* id : {"a", "b"}) ASSERT_EQ(call("POST", "/v1/adapters", {{"id", id}}).status, 200);
  }
  void TearDown() override {
    if (server_) server_->stop();
    selection_.reset();
    adapters_.reset();
    server_.reset();
    model_.reset();
  }

  fs::path file() const { return root_ / "state" / "selection.json"; }
  HttpReply call(const std::string& method, const std::string& path, const json& body = nullptr) {
    return http_request(server_->port(), method, path, body.is_null() ? "" : body.dump());
  }
  HttpReply put_text(const std::string& text) {
    return http_request(server_->port(), "PUT", "/v1/adapters/selection", text);
  }
  json selection() {
    HttpReply got = call("GET", "/v1/adapters/selection");
    EXPECT_EQ(got.status, 200) << got.body;
    return json::parse(got.body);
  }
  void complete(const json& extra) {
    json body = {{"prompt", "Hello"}, {"max_tokens", 1}};
    body.update(extra);
    HttpReply reply = call("POST", "/v1/completions", body);
    ASSERT_EQ(reply.status, 200) << reply.body;
  }

  fs::path root_;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<AdapterService> adapters_;
  std::unique_ptr<SelectionService> selection_;
  std::unique_ptr<Server> server_;
};

TEST_F(SelectionRoutes, NoSelectionUntilOneIsPut) {
  const json none = selection();
  EXPECT_TRUE(none["adapter"].is_null()) << none;
  EXPECT_TRUE(none["updated"].is_null()) << none;
  EXPECT_FALSE(fs::exists(file()));
}

TEST_F(SelectionRoutes, PutWritesTheFileGetReadsIt) {
  HttpReply put = call("PUT", "/v1/adapters/selection", {{"adapter", "a@0.5+b"}});
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(json::parse(put.body)["adapter"], "a@0.5+b");
  auto saved = read_shared_selection(file());
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->selection.to_string(), "a@0.5+b");
  const json got = selection();
  EXPECT_EQ(got["adapter"], "a@0.5+b");
  EXPECT_TRUE(got["updated"].is_string());
  EXPECT_EQ(got["not_loaded"], json::array());

  // "none" is a choice of its own (the base model); null clears the selection.
  ASSERT_EQ(call("PUT", "/v1/adapters/selection", {{"adapter", "none"}}).status, 200);
  EXPECT_EQ(selection()["adapter"], "none");
  ASSERT_EQ(put_text(R"({"adapter": null})").status, 200);
  EXPECT_TRUE(selection()["adapter"].is_null());
  EXPECT_FALSE(fs::exists(file()));
}

TEST_F(SelectionRoutes, AnAvailableAdapterMayBeChosenBeforeItIsLoaded) {
  HttpReply put = call("PUT", "/v1/adapters/selection", {{"adapter", "a+c"}});
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(json::parse(put.body)["not_loaded"], json::array({"c"}));
}

TEST_F(SelectionRoutes, BadSelectionsAre400sAndWriteNothing) {
  ASSERT_EQ(call("PUT", "/v1/adapters/selection", {{"adapter", "a"}}).status, 200);
  struct Case {
    std::string body;
    std::string code;
    std::string says;
  };
  const Case cases[] = {
      {R"({"adapter": "nosuch"})", "adapter_not_found", "nosuch"},
      {R"({"adapter": "a+nosuch"})", "adapter_not_found", "nosuch"},
      {R"({"adapter": "misfit"})", "adapter_incompatible", "misfit"},
      {R"({"adapter": "a+"})", "invalid_adapter_spec", "a+"},
      {R"({"adapter": 5})", "invalid_type", "must be a string"},
      {R"({"adapter": ["a"]})", "invalid_type", "must be a string"},
      {R"({})", "missing_parameter", "adapter"},
      {R"({"adapter": "a", "scope": "all"})", "unknown_parameter", "scope"},
      {R"({"adapter": )", "invalid_json", ""},
      {R"(["a"])", "invalid_json", ""},
  };
  for (const Case& c : cases) {
    HttpReply reply = put_text(c.body);
    EXPECT_EQ(reply.status, 400) << c.body << ": " << reply.body;
    const json error = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << reply.body;
    EXPECT_EQ(error["error"]["code"], c.code) << c.body << ": " << reply.body;
    EXPECT_NE(error["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << c.body << ": " << reply.body;
    EXPECT_EQ(selection()["adapter"], "a") << c.body;  // unchanged
  }
}

TEST_F(SelectionRoutes, AFileThatIsNotASelectionIsAnErrorThatNamesIt) {
  fs::create_directories(file().parent_path());
  ASSERT_TRUE(write_file_atomic(file(), R"({"adapter": 3})").ok());
  HttpReply got = call("GET", "/v1/adapters/selection");
  EXPECT_EQ(got.status, 500) << got.body;
  EXPECT_NE(got.body.find("selection.json"), std::string::npos) << got.body;
}

TEST_F(SelectionRoutes, EachAdapterCountsTheRequestsThatUsedIt) {
  complete({{"adapter", "a"}});
  complete({{"adapter", "a+b"}});
  complete({{"adapter", "a@0.5+b"}});
  complete({{"adapter", "none"}});
  complete(json::object());  // the default: the base model

  const json loaded = json::parse(call("GET", "/v1/adapters").body);
  std::map<std::string, int> by_id;
  for (const json& a : loaded["data"]) by_id[a["id"]] = a["requests"];
  EXPECT_EQ(by_id, (std::map<std::string, int>{{"a", 3}, {"b", 2}})) << loaded;

  const json stats = json::parse(call("GET", "/stats").body);
  EXPECT_EQ(stats["adapters"]["requests"], (json{{"none", 2}, {"a", 3}, {"b", 2}})) << stats;
  for (const json& a : stats["adapters"]["loaded"]) EXPECT_EQ(a["requests"], by_id[a["id"]]) << a;

  // A refused selection counts for nothing.
  HttpReply refused =
      call("POST", "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 1}, {"adapter", "c"}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(call("GET", "/stats").body)["adapters"]["requests"], stats["adapters"]["requests"]);
}

}  // namespace
}  // namespace graft::server
