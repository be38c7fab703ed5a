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

}  // namespace
}  // namespace graft::server
