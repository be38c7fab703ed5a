// The OpenAI routes on a real tiny model (random weights, Qwen3 chat template):
// response shapes, streaming = whole, batching = alone, bad input, cancel on
// disconnect, prefix reuse, request hooks.
#include <gtest/gtest.h>

#include <future>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "server/http_client.h"
#include "server/server.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft::server {
namespace {

using graft::testing::format_request;
using graft::testing::http_request;
using graft::testing::HttpReply;
using graft::testing::RawConnection;
using graft::testing::sse_payloads;
using namespace std::chrono_literals;

class OpenAiApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestModelSpec spec = graft::testing::tiny_spec("qwen3", "qwen2", "f16");
    auto tmpl = read_file(graft::testing::bundle_template("Qwen-Qwen3-0.6B"));
    ASSERT_TRUE(tmpl.ok());
    spec.chat_template = *tmpl;
    ServeOptions options;
    options.model_path = graft::testing::test_model_path(spec);
    options.model_id = "tiny";
    options.n_ctx = 256;
    options.kv_budget_tokens = 2048;
    options.parallel = 4;
    options.threads = 2;
    auto model = ServedModel::load(options);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model).release();
    ServerOptions server_options;
    server_options.http.port = 0;
    server_options.http.body_limit = 1 << 20;
    server_ = new Server(*model_, server_options);
    server_->add_request_hook(
        [](const RequestJson& body, GenerationRequest&) -> std::optional<ApiError> {
          if (body.contains("reject_me")) return bad_request("'reject_me' is refused by a hook", "reject_me");
          return std::nullopt;
        },
        {"reject_me", "tag"});
    server_->add_health_hook([](json& body) { body["extra"] = "from a hook"; });
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
  }
  static void TearDownTestSuite() {
    if (server_) server_->stop();
    delete model_;  // the engine stops before the HTTP side goes
    delete server_;
    model_ = nullptr;
    server_ = nullptr;
  }

  static HttpReply post(const std::string& path, const json& body) {
    return http_request(port_, "POST", path, body.dump());
  }
  static json post_json(const std::string& path, const json& body, int expect_status = 200) {
    HttpReply reply = post(path, body);
    EXPECT_EQ(reply.status, expect_status) << reply.body;
    return reply.body.empty() ? json() : json::parse(reply.body);
  }
  static std::vector<json> post_stream(const std::string& path, json body) {
    body["stream"] = true;
    HttpReply reply = post(path, body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.header("content-type"), "text/event-stream");
    std::vector<json> chunks;
    auto payloads = sse_payloads(reply.body);
    EXPECT_FALSE(payloads.empty());
    EXPECT_EQ(payloads.empty() ? "" : payloads.back(), "[DONE]");
    for (const auto& p : payloads) {
      if (p != "[DONE]") chunks.push_back(json::parse(p));
    }
    return chunks;
  }
  static void expect_healthy() { EXPECT_EQ(http_request(port_, "GET", "/health").status, 200); }
  static void expect_bad_request(const json& body, const std::string& param,
                                 const std::string& path = "/v1/chat/completions") {
    HttpReply reply = http_request(port_, "POST", path, body.dump());
    EXPECT_EQ(reply.status, 400) << body.dump() << " → " << reply.body;
    if (reply.status == 400) {
      json error = json::parse(reply.body)["error"];
      EXPECT_EQ(error["type"], "invalid_request_error");
      EXPECT_EQ(error["param"], param) << reply.body;
      EXPECT_FALSE(error["message"].get<std::string>().empty());
    }
    expect_healthy();
  }
  static json chat(const std::string& text, int max_tokens = 8) {
    return json{
        {"model", "tiny"},
        {"messages",
         {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", text}}}},
        {"max_tokens", max_tokens},
        {"temperature", 0}};
  }
  static json completion(const std::string& prompt, int max_tokens = 8) {
    return json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  }

  static ServedModel* model_;
  static Server* server_;
  static int port_;
};

ServedModel* OpenAiApi::model_ = nullptr;
Server* OpenAiApi::server_ = nullptr;
int OpenAiApi::port_ = 0;

TEST_F(OpenAiApi, ListsTheModel) {
  HttpReply reply = http_request(port_, "GET", "/v1/models");
  ASSERT_EQ(reply.status, 200);
  json body = json::parse(reply.body);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "tiny");
  EXPECT_EQ(body["data"][0]["object"], "model");
  EXPECT_EQ(http_request(port_, "GET", "/v1/models/tiny").status, 200);
  EXPECT_EQ(http_request(port_, "GET", "/v1/models/other").status, 404);
}

TEST_F(OpenAiApi, HealthAndStatsReport) {
  HttpReply health = http_request(port_, "GET", "/health");
  ASSERT_EQ(health.status, 200);
  json h = json::parse(health.body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["model"], "tiny");
  EXPECT_GE(h["uptime_s"].get<double>(), 0.0);
  EXPECT_EQ(h["extra"], "from a hook");
  HttpReply stats = http_request(port_, "GET", "/stats");
  ASSERT_EQ(stats.status, 200);
  json s = json::parse(stats.body);
  for (const char* key : {"rows", "pending_rows", "kv_bytes", "kv_budget_bytes"}) {
    EXPECT_TRUE(s["batch"].contains(key)) << key;
  }
  EXPECT_EQ(s["batch"]["kv_budget_tokens"], 2048);
  EXPECT_TRUE(s["requests"].contains("served"));
  EXPECT_TRUE(s["prefix_cache"].contains("hit_tokens"));
}

TEST_F(OpenAiApi, CompletionHasTextUsageAndFinishReason) {
  json body = post_json("/v1/completions", completion("The capital of France is", 6));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_TRUE(body["choices"][0]["text"].is_string());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 3);
  EXPECT_EQ(body["usage"]["total_tokens"].get<int>(),
            body["usage"]["prompt_tokens"].get<int>() + body["usage"]["completion_tokens"].get<int>());
  EXPECT_TRUE(body["usage"]["prompt_tokens_details"].contains("cached_tokens"));
}

TEST_F(OpenAiApi, ChatAnswersAsTheAssistant) {
  json body = post_json("/v1/chat/completions", chat("Say hello"));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(body["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAiApi, StreamedEqualsWholeForGreedyRequests) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    bool is_chat = std::string(path) == "/v1/chat/completions";
    json request = is_chat ? chat("Tell me a story", 12) : completion("Once upon a time", 12);
    json whole = post_json(path, request);
    std::string whole_text = is_chat ? whole["choices"][0]["message"]["content"].get<std::string>()
                                     : whole["choices"][0]["text"].get<std::string>();
    std::vector<json> chunks = post_stream(path, request);
    std::string streamed;
    std::string finish;
    for (const auto& c : chunks) {
      ASSERT_EQ(c["choices"].size(), 1u) << c.dump();
      const json& choice = c["choices"][0];
      if (is_chat) {
        EXPECT_EQ(c["object"], "chat.completion.chunk");
        if (choice["delta"].contains("content")) streamed += choice["delta"]["content"].get<std::string>();
      } else {
        streamed += choice["text"].get<std::string>();
      }
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
    EXPECT_EQ(streamed, whole_text) << path;
    EXPECT_EQ(finish, "length");
    if (is_chat) {
      EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
    }
    EXPECT_TRUE(chunks.back().contains("usage"));
  }
}

TEST_F(OpenAiApi, EchoPutsThePromptFirst) {
  json request = completion("Echo me", 4);
  request["echo"] = true;
  std::string whole = post_json("/v1/completions", request)["choices"][0]["text"];
  EXPECT_EQ(whole.rfind("Echo me", 0), 0u) << whole;
  EXPECT_GT(whole.size(), std::string("Echo me").size());
  std::string streamed;
  for (const auto& c : post_stream("/v1/completions", request))
    streamed += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, whole);
}

TEST_F(OpenAiApi, IncludeUsageSendsAUsageChunkLast) {
  json request = completion("Hello", 4);
  request["stream_options"] = {{"include_usage", true}};
  std::vector<json> chunks = post_stream("/v1/completions", request);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 4);
}

TEST_F(OpenAiApi, ConcurrentGreedyRequestsGiveTheTextEachGetsAlone) {
  std::vector<json> requests = {chat("one", 10), chat("two two", 10), completion("three three three", 10),
                                completion("four", 10)};
  auto text_of = [](const json& body) {
    const json& c = body["choices"][0];
    return c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
  };
  auto path_of = [](const json& r) {
    return r.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
  };
  std::vector<std::string> alone;
  for (const auto& r : requests) alone.push_back(text_of(post_json(path_of(r), r)));
  std::vector<std::future<HttpReply>> futures;
  for (const auto& r : requests) {
    futures.push_back(std::async(std::launch::async, [&, r] { return post(path_of(r), r); }));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    HttpReply reply = futures[i].get();
    ASSERT_EQ(reply.status, 200);
    EXPECT_EQ(text_of(json::parse(reply.body)), alone[i]) << "request " << i;
  }
}

TEST_F(OpenAiApi, StopStringsEndTheTextBeforeThem) {
  json whole = post_json("/v1/completions", completion("A list of words:", 24));
  std::string text = whole["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  std::string stop = text.substr(8, 3);
  json request = completion("A list of words:", 24);
  request["stop"] = {stop, "\x01never"};
  json stopped = post_json("/v1/completions", request);
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
}

TEST_F(OpenAiApi, ReturnsLogprobsInBothShapes) {
  json c = completion("Numbers:", 3);
  c["logprobs"] = 2;
  json body = post_json("/v1/completions", c);
  json lp = body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  ASSERT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);

  json r = chat("Numbers", 3);
  r["logprobs"] = true;
  r["top_logprobs"] = 2;
  json chat_body = post_json("/v1/chat/completions", r);
  json content = chat_body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_TRUE(content[0]["token"].is_string());
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST_F(OpenAiApi, ReusesTheCachedPromptPrefix) {
  json request = completion("The same long prompt, sent twice, shares every token but the last one", 3);
  json first = post_json("/v1/completions", request);
  json second = post_json("/v1/completions", request);
  int prompt = second["usage"]["prompt_tokens"];
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], prompt - 1);
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST_F(OpenAiApi, RefusesBadInputAndKeepsServing) {
  {
    HttpReply reply = http_request(port_, "POST", "/v1/chat/completions", "{\"messages\": [");
    EXPECT_EQ(reply.status, 400);
    EXPECT_EQ(json::parse(reply.body)["error"]["code"], "invalid_json");
    reply = http_request(port_, "POST", "/v1/chat/completions", "{\"temperature\": NaN, \"messages\": []}");
    EXPECT_EQ(reply.status, 400);
    reply = http_request(port_, "POST", "/v1/chat/completions", "[1, 2]");
    EXPECT_EQ(reply.status, 400);
  }
  json base = chat("hi");
  auto with = [&](const char* key, json value) {
    json r = base;
    r[key] = value;
    return r;
  };
  expect_bad_request(with("temperature", "hot"), "temperature");
  expect_bad_request(with("temperature", 7.5), "temperature");
  expect_bad_request(with("max_tokens", -5), "max_tokens");
  expect_bad_request(with("max_tokens", 0), "max_tokens");
  expect_bad_request(with("max_tokens", 2.5), "max_tokens");
  expect_bad_request(with("top_p", 1.5), "top_p");
  expect_bad_request(with("n", 2), "n");
  expect_bad_request(with("stop", 5), "stop");
  expect_bad_request(with("stream", "yes"), "stream");
  expect_bad_request(with("logit_bias", json{{"abc", 1}}), "logit_bias");
  expect_bad_request(with("logit_bias", json{{"5", 1000}}), "logit_bias");
  expect_bad_request(with("messages", json::array()), "messages");
  expect_bad_request(with("messages", json{{{"role", "wizard"}, {"content", "x"}}}), "messages[0].role");
  expect_bad_request(with("messages", json{{{"role", "user"}, {"content", 42}}}), "messages[0].content");
  expect_bad_request(with("tools", json{{{"type", "function"}, {"function", {{"name", 3}}}}}),
                     "tools[0].function.name");
  expect_bad_request(with("reject_me", true), "reject_me");
  expect_bad_request(json{{"prompt", 12}}, "prompt", "/v1/completions");
  expect_bad_request(json{{"prompt", {1, 2, -3}}}, "prompt", "/v1/completions");
  expect_bad_request(json{{"prompt", {1, 2, 99999999}}}, "prompt", "/v1/completions");
  expect_bad_request(json{{"max_tokens", 5}}, "prompt", "/v1/completions");
  // A prompt longer than the context (256 tokens).
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " word";
  HttpReply too_long = post("/v1/completions", completion(long_prompt));
  EXPECT_EQ(too_long.status, 400);
  json error = json::parse(too_long.body)["error"];
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_EQ(error["param"], "prompt");
  expect_healthy();
  // Still generating.
  EXPECT_EQ(post_json("/v1/completions", completion("still", 2))["usage"]["completion_tokens"], 2);
}

TEST_F(OpenAiApi, RefusesAToolChoiceItCannotHonour) {
  json request = chat("What is the weather?");
  request["tools"] = json::array(
      {{{"type", "function"}, {"function", {{"name", "weather"}, {"parameters", json::object()}}}}});
  for (json choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "weather"}}}}}) {
    json r = request;
    r["tool_choice"] = choice;
    HttpReply reply = post("/v1/chat/completions", r);
    ASSERT_EQ(reply.status, 400) << choice.dump() << " → " << reply.body;
    json error = json::parse(reply.body)["error"];
    EXPECT_EQ(error["param"], "tool_choice");
    EXPECT_EQ(error["code"], "unsupported_value");
    EXPECT_NE(error["message"].get<std::string>().find("not supported"), std::string::npos);
  }
  for (const char* choice : {"auto", "none"}) {
    json r = request;
    r["tool_choice"] = choice;
    EXPECT_EQ(post("/v1/chat/completions", r).status, 200) << choice;
  }
}

TEST_F(OpenAiApi, RefusesKnownFieldsItDoesNotImplementUnlessTheyAskForNothing) {
  auto with = [](json extra) {
    json r = chat("hi", 2);
    for (auto& [key, value] : extra.items()) r[key] = value;
    return r;
  };
  struct Case {
    json extra;
    const char* param;  // nullptr: accepted
  };
  const Case cases[] = {
      {{{"grammar", "root ::= \"yes\""}}, "grammar"},
      {{{"json_schema", {{"type", "object"}}}}, "json_schema"},
      {{{"best_of", 3}}, "best_of"},
      {{{"mirostat", 2}}, "mirostat"},
      {{{"dry_multiplier", 0.8}, {"dry_base", 1.75}}, "dry_multiplier"},
      {{{"cache_prompt", false}}, "cache_prompt"},
      {{{"lora", {{{"id", 0}, {"scale", 1.0}}}}}, "lora"},
      {{{"samplers", "kt"}}, "samplers"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format"},
      // The values that ask for nothing: what clients sending every option send.
      {{{"grammar", ""},
        {"mirostat", 0},
        {"mirostat_tau", 5},
        {"dry_multiplier", 0},
        {"dry_base", 1.75},
        {"cache_prompt", true},
        {"best_of", 1},
        {"n_probs", 0},
        {"store", false}},
       nullptr},
  };
  for (const Case& c : cases) {
    HttpReply reply = post("/v1/chat/completions", with(c.extra));
    if (!c.param) {
      EXPECT_EQ(reply.status, 200) << c.extra.dump() << " → " << reply.body;
      continue;
    }
    ASSERT_EQ(reply.status, 400) << c.extra.dump() << " → " << reply.body;
    json error = json::parse(reply.body)["error"];
    EXPECT_EQ(error["param"], c.param) << reply.body;
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_TRUE(error["code"] == "unsupported_parameter" || error["code"] == "unsupported_value")
        << reply.body;
  }
  expect_healthy();
}

TEST_F(OpenAiApi, LogsUnknownFieldsAtDebugLevel) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto logger = spdlog::default_logger();
  const auto level = logger->level();
  logger->sinks().push_back(sink);
  logger->set_level(spdlog::level::debug);
  json request = chat("hi", 2);
  request["frobnicate"] = 7;
  request["tag"] = "x";  // read by the fixture's hook: not unknown
  HttpReply reply = post("/v1/chat/completions", request);
  logger->set_level(level);
  logger->sinks().pop_back();
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(log.str().find("unknown field 'frobnicate'"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("unknown field 'max_tokens'"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("unknown field 'tag'"), std::string::npos) << log.str();
}

TEST_F(OpenAiApi, TypicalPAndXtcReachTheSampler) {
  // Sampling over many candidates: two seeds give two different texts,
  // unless a filter leaves one candidate per step.
  auto text = [&](int seed, json extra) {
    json r = completion("Pick some words:", 6);
    r["temperature"] = 1.0;
    r["top_k"] = 1000;
    r["top_p"] = 1.0;
    r["min_p"] = 0.0;
    r["seed"] = seed;
    for (auto& [key, value] : extra.items()) r[key] = value;
    return post_json("/v1/completions", r)["choices"][0]["text"].get<std::string>();
  };
  ASSERT_NE(text(1, json::object()), text(2, json::object()));
  const json typical = {{"typical_p", 0.0001}};
  EXPECT_EQ(text(1, typical), text(2, typical));
  const json xtc = {{"xtc_probability", 1.0}, {"xtc_threshold", 0.0}};
  EXPECT_EQ(text(1, xtc), text(2, xtc));
  json bad = completion("x");
  bad["typical_p"] = 2;
  expect_bad_request(bad, "typical_p", "/v1/completions");
}

TEST_F(OpenAiApi, ADisconnectedStreamIsCancelledAndFreesItsKv) {
  json before = json::parse(http_request(port_, "GET", "/stats").body);
  {
    RawConnection c(port_);
    json request = completion("An endless story:", 200);
    request["stream"] = true;
    request["ignore_eos"] = true;
    c.send(format_request("POST", "/v1/completions", request.dump()));
    std::string acc;
    ASSERT_TRUE(c.read_until(acc, "text_completion"));
    json mid = json::parse(http_request(port_, "GET", "/stats").body);
    EXPECT_EQ(mid["requests"]["running"], 1);
    EXPECT_GT(mid["batch"]["kv_bytes"].get<int64_t>(), 0);
  }
  json after;
  for (int i = 0; i < 500; ++i) {
    after = json::parse(http_request(port_, "GET", "/stats").body);
    if (after["requests"]["cancelled"] != before["requests"]["cancelled"] &&
        after["requests"]["running"] == 0 && after["batch"]["kv_bytes"] == 0) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(after["requests"]["running"], 0);
  EXPECT_EQ(after["batch"]["kv_bytes"], 0);
  EXPECT_EQ(after["requests"]["cancelled"].get<int>(), before["requests"]["cancelled"].get<int>() + 1);
  EXPECT_LT(after["tokens"]["completion"].get<int>() - before["tokens"]["completion"].get<int>(), 200);
}

}  // namespace
}  // namespace graft::server
