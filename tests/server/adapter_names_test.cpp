// Adapters as model names (vLLM's convention), --alias, the 404 for unknown
// models, and auto-loading: one load for many waiting requests, and a limit
// on loaded adapters that unloads only idle ones.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "adapters/peft.h"
#include "server/http_client.h"
#include "server/routes_adapters.h"
#include "testing/test_models.h"
#include "tools/test_adapter.h"

namespace graft::server {
namespace {

using graft::testing::http_request;
using graft::testing::HttpReply;
namespace fs = std::filesystem;

// Twelve adapters "a" … "l" for the tiny model, in a store of their own.
const fs::path& adapter_store(const std::string& model_path) {
  static const fs::path root = [&] {
    fs::path dir = fs::path(graft::testing::scratch_dir()) / "adapter-names";
    fs::remove_all(dir);
    auto base = BaseModel::open(model_path);
    EXPECT_TRUE(base.ok());
    for (int i = 0; i < 12; ++i) {
      TestAdapterSpec spec;
      spec.base_path = model_path;
      spec.rank = 4;
      spec.alpha = 8.0f;
      spec.seed = uint64_t(i + 1);
      spec.strength = 1.0f;
      auto adapter = make_test_adapter(spec, *base);
      EXPECT_TRUE(adapter.ok());
      EXPECT_TRUE(
          write_peft(dir / std::string(1, char('a' + i)), *adapter, {"", SafetensorsDtype::f16}).ok());
    }
    return dir;
  }();
  return root;
}

struct Running {
  std::unique_ptr<ServedModel> model;
  std::unique_ptr<AdapterService> adapters;
  std::unique_ptr<Server> server;
  int port = 0;

  ~Running() {
    if (server) server->stop();
    adapters.reset();
    model.reset();
    server.reset();
  }

  HttpReply post(const std::string& path, const json& body) const {
    return http_request(port, "POST", path, body.dump());
  }
  json get(const std::string& path) const { return json::parse(http_request(port, "GET", path).body); }
  // The greedy text of a completion, or the error body.
  std::string complete(const json& extra) const {
    json body = {{"prompt", "The quick brown fox"}, {"max_tokens", 8}, {"temperature", 0}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    HttpReply reply = post("/v1/completions", body);
    if (reply.status != 200) return "HTTP " + std::to_string(reply.status) + " " + reply.body;
    return json::parse(reply.body)["choices"][0]["text"].get<std::string>();
  }
  uint64_t loads() const { return get("/stats")["adapters"]["auto_load"]["loads"].get<uint64_t>(); }
};

std::unique_ptr<Running> start(AdapterServiceOptions adapter_options, int parallel = 4) {
  const std::string model_path =
      graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
  const fs::path& store = adapter_store(model_path);
  ::setenv("XDG_DATA_HOME", (store.parent_path() / "adapter-names-data").c_str(), 1);  // an empty user store
  auto r = std::make_unique<Running>();
  ServeOptions options;
  options.model_path = model_path;
  options.model_id = "tiny";
  options.aliases = {"tiny-alias"};
  options.n_ctx = 128;
  options.kv_budget_tokens = 2048;
  options.parallel = parallel;
  options.threads = 2;
  auto model = ServedModel::load(options);
  EXPECT_TRUE(model.ok()) << model.error().message;
  r->model = std::move(*model);
  adapter_options.adapter_dirs = {store.string()};
  auto service = AdapterService::create(*r->model, adapter_options);
  EXPECT_TRUE(service.ok()) << (service.ok() ? "" : service.error().message);
  r->adapters = std::move(*service);
  ServerOptions server_options;
  server_options.http.port = 0;
  r->server = std::make_unique<Server>(*r->model, server_options);
  r->adapters->install(*r->server);
  EXPECT_TRUE(r->server->start().ok());
  r->port = r->server->port();
  return r;
}

void load(const Running& r, const std::string& id) {
  HttpReply reply = r.post("/v1/adapters", json{{"id", id}});
  ASSERT_EQ(reply.status, 200) << reply.body;
}

TEST(AdapterNames, ModelsListsTheBaseItsAliasesAndEveryLoadedAdapter) {
  auto r = start({});
  load(*r, "a");
  load(*r, "b");
  json data = r->get("/v1/models")["data"];
  ASSERT_EQ(data.size(), 4u) << data.dump();
  EXPECT_EQ(data[0]["id"], "tiny");
  EXPECT_TRUE(data[0]["parent"].is_null());
  EXPECT_EQ(data[1]["id"], "tiny-alias");
  EXPECT_EQ(data[1]["root"], "tiny");
  EXPECT_EQ(data[2]["id"], "a");
  EXPECT_EQ(data[2]["parent"], "tiny");
  EXPECT_EQ(data[3]["id"], "b");
  EXPECT_EQ(data[3]["parent"], "tiny");
  EXPECT_EQ(r->get("/v1/models/b")["parent"], "tiny");
  EXPECT_EQ(http_request(r->port, "GET", "/v1/models/c").status, 404);
}

TEST(AdapterNames, AModelNamingAnAdapterSelectsItOnEveryApi) {
  auto r = start({});
  load(*r, "a");
  load(*r, "b");
  const std::string base = r->complete({{"model", "tiny"}});
  const std::string by_field = r->complete({{"model", "tiny"}, {"adapter", "a"}});
  EXPECT_NE(by_field, base) << "the adapter should change greedy output";
  EXPECT_EQ(r->complete({{"model", "a"}}), by_field);
  EXPECT_EQ(r->complete({{"model", "tiny-alias"}, {"adapter", "a"}}), by_field);
  EXPECT_EQ(r->complete({{"model", "a"}, {"adapter", "a@1"}}), by_field);  // the same selection twice
  EXPECT_EQ(r->complete({{"model", "a@0.5+b"}}), r->complete({{"adapter", "a@0.5+b"}}));
  EXPECT_EQ(r->complete({}), base);

  // Chat, Anthropic Messages and Responses: "model" gives what "adapter" gives.
  const json messages = json::array({{{"role", "user"}, {"content", "Hello there"}}});
  auto chat = [&](const json& extra) {
    json body = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    HttpReply reply = r->post("/v1/chat/completions", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.status == 200 ? json::parse(reply.body)["choices"][0]["message"]["content"] : json();
  };
  EXPECT_EQ(chat({{"model", "b"}}), chat({{"model", "tiny"}, {"adapter", "b"}}));
  auto anthropic = [&](const json& extra) {
    json body = {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    HttpReply reply = r->post("/v1/messages", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.status == 200 ? json::parse(reply.body)["content"] : json();
  };
  EXPECT_EQ(anthropic({{"model", "b"}}), anthropic({{"adapter", "b"}}));
  auto responses = [&](const json& extra) {
    json body = {{"model", "tiny"}, {"input", "Hello there"}, {"max_output_tokens", 8}, {"temperature", 0}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    HttpReply reply = r->post("/v1/responses", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.status == 200 ? json::parse(reply.body)["output"] : json();
  };
  json via_model = responses({{"model", "a+b"}});
  json via_field = responses({{"adapter", "a+b"}});
  ASSERT_FALSE(via_model.empty());
  EXPECT_EQ(via_model[0]["content"], via_field[0]["content"]);
}

TEST(AdapterNames, AModelAndAnAdapterThatDisagreeAreA400) {
  auto r = start({});
  load(*r, "a");
  load(*r, "b");
  HttpReply reply = r->post("/v1/completions", json{{"model", "a"}, {"adapter", "b"}, {"prompt", "x"}});
  ASSERT_EQ(reply.status, 400) << reply.body;
  json error = json::parse(reply.body)["error"];
  EXPECT_EQ(error["param"], "adapter");
  const std::string message = error["message"].get<std::string>();
  EXPECT_NE(message.find("'model' selects adapter a but 'adapter' selects b"), std::string::npos) << message;
  reply = r->post("/v1/chat/completions",
                  json{{"model", "a"},
                       {"adapter", "none"},
                       {"messages", json::array({{{"role", "user"}, {"content", "x"}}})}});
  EXPECT_EQ(reply.status, 400) << reply.body;
}

TEST(AdapterNames, AnUnknownModelIsA404InEachApisShape) {
  auto r = start({});
  load(*r, "a");
  const json messages = json::array({{{"role", "user"}, {"content", "x"}}});
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
           {"/v1/completions", {{"model", "gpt-4o"}, {"prompt", "x"}}},
           {"/v1/chat/completions", {{"model", "gpt-4o"}, {"messages", messages}}},
           {"/v1/responses", {{"model", "gpt-4o"}, {"input", "x"}}},
           {"/v1/completions", {{"model", "a+zzz"}, {"prompt", "x"}}},
       }) {
    HttpReply reply = r->post(path, body);
    ASSERT_EQ(reply.status, 404) << path << " " << reply.body;
    json error = json::parse(reply.body)["error"];
    EXPECT_EQ(error["code"], "model_not_found") << reply.body;
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["param"], "model");
    EXPECT_NE(error["message"].get<std::string>().find("'tiny'"), std::string::npos) << reply.body;
  }
  HttpReply reply =
      r->post("/v1/messages", {{"model", "claude-sonnet-4"}, {"max_tokens", 4}, {"messages", messages}});
  ASSERT_EQ(reply.status, 404) << reply.body;
  json body = json::parse(reply.body);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "not_found_error") << reply.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find("claude-sonnet-4"), std::string::npos);
  // The base's id and aliases keep working, as does leaving "model" out.
  EXPECT_EQ(r->post("/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 1}}).status, 200);
  EXPECT_EQ(r->post("/v1/completions", {{"model", "tiny-alias"}, {"prompt", "x"}, {"max_tokens", 1}}).status,
            200);
  EXPECT_EQ(r->post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}).status, 200);
}

TEST(AdapterNames, WithoutAutoLoadingAnUnloadedAdapterSaysHowToLoadIt) {
  auto r = start({});
  for (const json& pick : {json{{"model", "c"}}, json{{"adapter", "c"}}}) {
    json body = {{"prompt", "x"}, {"max_tokens", 1}};
    body.update(pick);
    HttpReply reply = r->post("/v1/completions", body);
    ASSERT_EQ(reply.status, 400) << reply.body;
    json error = json::parse(reply.body)["error"];
    EXPECT_EQ(error["code"], "adapter_not_loaded");
    EXPECT_EQ(error["param"], pick.begin().key());
    const std::string message = error["message"].get<std::string>();
    EXPECT_NE(message.find("POST /v1/adapters"), std::string::npos) << message;
    EXPECT_NE(message.find("--auto-load-adapters"), std::string::npos) << message;
  }
  EXPECT_TRUE(r->get("/v1/adapters")["data"].empty());
}

TEST(AdapterNames, ConcurrentRequestsForAnUnloadedAdapterWaitForOneLoad) {
  AdapterServiceOptions options;
  options.auto_load = true;
  auto r = start(options, 8);
  std::vector<std::string> texts(16);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      texts[i] = r->complete({{"model", i % 2 ? "c" : "tiny"}, {"adapter", "c"}});
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& text : texts) EXPECT_EQ(text, texts[0]);
  EXPECT_EQ(texts[0].rfind("HTTP", 0), std::string::npos) << texts[0];
  EXPECT_EQ(r->loads(), 1u);
  EXPECT_EQ(r->get("/v1/adapters")["data"].size(), 1u);
  // A stack loads what it lacks; an adapter nowhere to be found is still a 404 (by model) or 400 (by field).
  EXPECT_EQ(r->complete({{"model", "c+d"}}).rfind("HTTP", 0), std::string::npos);
  EXPECT_EQ(r->loads(), 2u);
  HttpReply missing = r->post("/v1/completions", {{"model", "nosuch"}, {"prompt", "x"}});
  EXPECT_EQ(missing.status, 404) << missing.body;
  missing = r->post("/v1/completions", {{"adapter", "nosuch"}, {"prompt", "x"}});
  EXPECT_EQ(missing.status, 400) << missing.body;
  EXPECT_EQ(json::parse(missing.body)["error"]["code"], "adapter_not_found");
}

TEST(AdapterNames, RotatingOverMoreAdaptersThanTheLimitUnloadsOnlyIdleOnes) {
  AdapterServiceOptions options;
  options.auto_load = true;
  options.max_loaded = 4;
  options.force = "a";  // the default: never unloaded
  auto r = start(options, 8);
  // Each adapter's own text, one request at a time.
  std::map<std::string, std::string> want;
  for (int i = 1; i < 12; ++i) {
    const std::string id(1, char('a' + i));
    want[id] = r->complete({{"model", id}});
    ASSERT_EQ(want[id].rfind("HTTP", 0), std::string::npos) << want[id];
    ASSERT_LE(r->get("/v1/adapters")["data"].size(), 4u);
  }
  // 8 streams rotating over 11 adapters (and the default) with room for 4:
  // every request gets its own adapter's text, so none was unloaded under it.
  std::atomic<int> failures = 0;
  std::atomic<bool> done = false;
  std::atomic<size_t> most_loaded = 0;
  std::thread watcher([&] {
    while (!done) {
      size_t n = r->get("/v1/adapters")["data"].size();
      if (n > most_loaded) most_loaded = n;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> streams;
  for (int s = 0; s < 8; ++s) {
    streams.emplace_back([&, s] {
      for (int k = 0; k < 6; ++k) {
        const std::string id(1, char('b' + (s * 3 + k) % 11));
        const std::string got = r->complete({{"model", id}});
        if (got != want[id]) {
          ++failures;
          ADD_FAILURE() << "stream " << s << " adapter " << id << ": " << got << " != " << want[id];
        }
      }
    });
  }
  for (auto& t : streams) t.join();
  done = true;
  watcher.join();
  EXPECT_EQ(failures, 0);
  EXPECT_LE(most_loaded.load(), 4u);
  json adapters = r->get("/v1/adapters");
  EXPECT_EQ(adapters["default"], "a");
  bool a_loaded = false;
  for (const json& a : adapters["data"]) a_loaded = a_loaded || a["id"] == "a";
  EXPECT_TRUE(a_loaded) << "the default adapter is never unloaded";
  json stats = r->get("/stats")["adapters"];
  EXPECT_GT(stats["auto_load"]["evictions"].get<int>(), 0) << stats.dump();
  EXPECT_EQ(stats["auto_load"]["waiting"], 0);
  EXPECT_EQ(stats["auto_load"]["max_loaded"], 4);
}

TEST(AdapterNames, TheLimitMustLeaveRoomBesideTheDefault) {
  const std::string model_path =
      graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
  const fs::path& store = adapter_store(model_path);
  ServeOptions options;
  options.model_path = model_path;
  options.n_ctx = 64;
  options.kv_budget_tokens = 256;
  options.threads = 1;
  auto model = ServedModel::load(options);
  ASSERT_TRUE(model.ok());
  AdapterServiceOptions adapter_options;
  adapter_options.adapter_dirs = {store.string()};
  adapter_options.force = "a+b";
  adapter_options.max_loaded = 2;
  auto service = AdapterService::create(**model, adapter_options);
  ASSERT_FALSE(service.ok());
  EXPECT_NE(service.error().message.find("--max-loaded-adapters 2"), std::string::npos)
      << service.error().message;
}

}  // namespace
}  // namespace graft::server
