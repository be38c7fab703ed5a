// Tool calls and reasoning through the whole server path: a scripted
// "model" emits canned text (the real Qwen tokenizer's tokens), and the chat
// route must turn it into OpenAI tool_calls / reasoning_content, whole and
// streamed.
#include <gtest/gtest.h>

#include "io/gguf_file.h"
#include "server/http_client.h"
#include "server/server.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft::server {
namespace {

using graft::testing::http_request;
using graft::testing::HttpReply;
using graft::testing::sse_payloads;

// Every request gets the same scripted tokens, then end-of-generation.
class ScriptedExecutor : public Executor {
 public:
  ScriptedExecutor(std::vector<TokenId> script, TokenId end, int n_vocab)
      : script_(std::move(script)), end_(end) {
    limits_ = ExecutorLimits{1024, n_vocab, 8, 4096, 10, 512};
  }
  const ExecutorLimits& limits() const override { return limits_; }
  Result<std::unique_ptr<RowSampler>> new_sampler(const SamplingOptions&, std::span<const TokenId>,
                                                  int) override {
    return std::unique_ptr<RowSampler>(std::make_unique<Cursor>());
  }
  Result<std::vector<RowResult>> step(const Batch&, std::span<RowSampler* const> samplers) override {
    std::vector<RowResult> out;
    for (RowSampler* s : samplers) {
      auto* c = static_cast<Cursor*>(s);
      out.push_back(GeneratedToken{c->next < script_.size() ? script_[c->next++] : end_, 0.0f, {}});
    }
    return out;
  }
  void seq_free(SeqId) override {}
  void seq_truncate(SeqId, int) override {}
  Status seq_copy_prefix(SeqId, SeqId, int) override { return {}; }

 private:
  struct Cursor : RowSampler {
    size_t next = 0;
  };
  std::vector<TokenId> script_;
  TokenId end_;
  ExecutorLimits limits_;
};

class ScriptedChat : public ::testing::Test {
 protected:
  void start(const std::string& canned) {
    auto vocab = GgufFile::open(graft::testing::bundle_vocab("qwen2"));
    ASSERT_TRUE(vocab.ok());
    auto tok = Tokenizer::from_gguf(*vocab);
    ASSERT_TRUE(tok.ok());
    auto source = read_file(graft::testing::bundle_template("Qwen-Qwen3-0.6B"));
    ASSERT_TRUE(source.ok());
    auto tmpl = ChatTemplate::parse(*source);
    ASSERT_TRUE(tmpl.ok());
    auto script = (*tok)->encode(canned, false, true);
    ASSERT_TRUE(script.ok());
    TokenId end = (*tok)->eot() >= 0 ? (*tok)->eot() : (*tok)->eos();
    auto executor = std::make_unique<ScriptedExecutor>(*script, end, (*tok)->n_vocab());
    model_ = ServedModel::assemble("scripted", *tok, std::move(*tmpl), std::move(executor), EngineConfig{});
    ServerOptions options;
    options.http.port = 0;
    server_ = std::make_unique<Server>(*model_, options);
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    if (server_) server_->stop();
    model_.reset();
    server_.reset();
  }
  json ask(bool tools, bool stream = false) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}, {"max_tokens", 100}};
    if (tools) {
      body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    }
    body["stream"] = stream;
    HttpReply reply = http_request(server_->port(), "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(reply.status, 200) << reply.body;
    if (!stream) return json::parse(reply.body);
    json chunks = json::array();
    for (const auto& p : sse_payloads(reply.body)) {
      if (p != "[DONE]") chunks.push_back(json::parse(p));
    }
    return chunks;
  }

  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<Server> server_;
};

const char* kToolCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

TEST_F(ScriptedChat, AToolCallBecomesToolCallsWithFinishReasonToolCalls) {
  start(kToolCall);
  json body = ask(/*tools=*/true);
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << body.dump();
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_TRUE(call["id"].is_string());
  EXPECT_TRUE(choice["message"]["content"].is_null());
}

TEST_F(ScriptedChat, AStreamedToolCallArrivesAsADelta) {
  start(kToolCall);
  json chunks = ask(/*tools=*/true, /*stream=*/true);
  json calls = json::array();
  std::string finish;
  std::string content;
  for (const auto& c : chunks) {
    const json& choice = c["choices"][0];
    if (choice["delta"].contains("tool_calls")) {
      for (const auto& call : choice["delta"]["tool_calls"]) calls.push_back(call);
    }
    if (choice["delta"].contains("content") && choice["delta"]["content"].is_string()) {
      content += choice["delta"]["content"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(content, "");
}

TEST_F(ScriptedChat, WithoutToolsTheSameTextStaysContent) {
  start(kToolCall);
  json body = ask(/*tools=*/false);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(body["choices"][0]["message"]["content"].get<std::string>().find("get_weather"),
            std::string::npos);
}

TEST_F(ScriptedChat, ThinkingBecomesReasoningContent) {
  start("<think>\nThe user wants weather.\n</think>\n\nIt is sunny.");
  json body = ask(/*tools=*/false);
  const json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "The user wants weather.");
  EXPECT_EQ(message["content"], "It is sunny.");
  json chunks = ask(/*tools=*/false, /*stream=*/true);
  std::string reasoning, content;
  for (const auto& c : chunks) {
    const json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content") && delta["content"].is_string())
      content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "The user wants weather.");
  EXPECT_EQ(content, "It is sunny.");
}

TEST_F(ScriptedChat, MalformedToolCallsComeBackAsContent) {
  start("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": </tool_call>");
  json body = ask(/*tools=*/true);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(body["choices"][0]["message"]["content"].get<std::string>().find("get_weather"),
            std::string::npos);
}

// ---- The Anthropic Messages and Responses APIs: the same parsed output in their shapes.

struct NamedEvent {
  std::string type;
  json data;
};

// "event: <type>\ndata: <json>\n\n" events; the event name must match data.type.
std::vector<NamedEvent> named_events(const std::string& body) {
  std::vector<NamedEvent> out;
  size_t pos = 0;
  while ((pos = body.find("event: ", pos)) != std::string::npos) {
    size_t eol = body.find('\n', pos);
    size_t end = body.find("\n\n", eol);
    EXPECT_EQ(body.compare(eol + 1, 6, "data: "), 0);
    NamedEvent e{body.substr(pos + 7, eol - pos - 7), json::parse(body.substr(eol + 7, end - eol - 7))};
    EXPECT_EQ(e.data["type"], e.type);
    out.push_back(std::move(e));
    pos = end + 2;
  }
  return out;
}

const char* kThinkThenCall =
    "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}\n</tool_call>";

json anthropic_body(bool stream) {
  json body = json::parse(R"({"model": "scripted", "max_tokens": 100,
      "messages": [{"role": "user", "content": "Weather in Paris?"}],
      "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]})");
  body["stream"] = stream;
  return body;
}

json responses_body(bool stream) {
  return json{
      {"model", "scripted"},
      {"max_output_tokens", 100},
      {"stream", stream},
      {"input", "Weather in Paris?"},
      {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
}

TEST_F(ScriptedChat, AnthropicMessageHoldsThinkingAndToolUseBlocks) {
  start(kThinkThenCall);
  HttpReply reply = http_request(server_->port(), "POST", "/v1/messages", anthropic_body(false).dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = json::parse(reply.body);
  EXPECT_EQ(body["stop_reason"], "tool_use");
  ASSERT_EQ(body["content"].size(), 2u) << body.dump();
  EXPECT_EQ(body["content"][0]["type"], "thinking");
  EXPECT_EQ(body["content"][0]["thinking"], "The user wants weather.");
  EXPECT_EQ(body["content"][1]["type"], "tool_use");
  EXPECT_EQ(body["content"][1]["name"], "get_weather");
  EXPECT_EQ(body["content"][1]["input"], json({{"city", "Paris"}}));
  EXPECT_TRUE(body["content"][1]["id"].is_string());
}

TEST_F(ScriptedChat, AnthropicStreamSendsItsEventSequence) {
  start(kThinkThenCall);
  HttpReply reply = http_request(server_->port(), "POST", "/v1/messages", anthropic_body(true).dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<NamedEvent> events = named_events(reply.body);
  std::vector<std::string> types;
  std::string thinking;
  std::string input;
  for (const auto& e : events) {
    types.push_back(e.type);
    if (e.type == "content_block_delta" && e.data["delta"]["type"] == "thinking_delta")
      thinking += e.data["delta"]["thinking"].get<std::string>();
    if (e.type == "content_block_delta" && e.data["delta"]["type"] == "input_json_delta") {
      EXPECT_EQ(e.data["index"], 1);
      input += e.data["delta"]["partial_json"].get<std::string>();
    }
  }
  ASSERT_GE(types.size(), 9u) << reply.body;
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types[1], "content_block_start");
  EXPECT_EQ(events[1].data["content_block"]["type"], "thinking");
  const std::vector<std::string> tail = {"content_block_stop", "content_block_start", "content_block_delta",
                                         "content_block_stop", "message_delta",       "message_stop"};
  EXPECT_EQ(std::vector<std::string>(types.end() - 6, types.end()), tail) << reply.body;
  const json& start_tool = events[events.size() - 5].data;
  EXPECT_EQ(start_tool["content_block"]["type"], "tool_use");
  EXPECT_EQ(start_tool["content_block"]["name"], "get_weather");
  EXPECT_EQ(thinking, "The user wants weather.");
  EXPECT_EQ(json::parse(input), json({{"city", "Paris"}}));
  EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_reason"], "tool_use");
}

TEST_F(ScriptedChat, ResponsesOutputHoldsReasoningAndFunctionCallItems) {
  start(kThinkThenCall);
  HttpReply reply = http_request(server_->port(), "POST", "/v1/responses", responses_body(false).dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  json body = json::parse(reply.body);
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 2u) << body.dump();
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "The user wants weather.");
  const json& call = body["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_TRUE(call["call_id"].is_string());
}

TEST_F(ScriptedChat, ResponsesStreamSendsFunctionCallEvents) {
  start(kThinkThenCall);
  HttpReply reply = http_request(server_->port(), "POST", "/v1/responses", responses_body(true).dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<NamedEvent> events = named_events(reply.body);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["sequence_number"], i);
    types.push_back(events[i].type);
  }
  ASSERT_GE(types.size(), 9u) << reply.body;
  const std::vector<std::string> tail = {"response.reasoning_text.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(std::vector<std::string>(types.end() - 7, types.end()), tail) << reply.body;
  const json& done = events[events.size() - 3].data;
  EXPECT_EQ(done["name"], "get_weather");
  EXPECT_EQ(json::parse(done["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  const json& response = events.back().data["response"];
  ASSERT_EQ(response["output"].size(), 2u);
  EXPECT_EQ(response["output"][1]["call_id"], events[events.size() - 2].data["item"]["call_id"]);
}

}  // namespace
}  // namespace graft::server
