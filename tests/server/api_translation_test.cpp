// The translation of Anthropic Messages and Responses requests into graft's
// chat request, and of the assistant message back into their shapes.
#include "server/api_translation.h"

#include "server/response_store.h"

#include <gtest/gtest.h>

namespace graft::server {
namespace {

RequestJson J(const char* text) {
  return RequestJson::parse(text);
}

TEST(AnthropicToChat, TurnsBlocksIntoChatMessages) {
  RequestJson body = J(R"({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]},
        {"type": "text", "text": "Thanks"}]}],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"}, "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
    "metadata": {"user_id": "u"}, "adapter": "a"})");
  RequestJson chat;
  ASSERT_FALSE(anthropic_to_chat(body, AnthropicKind::kMessages, {"adapter"}, chat));
  RequestJson want = J(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Looking.", "reasoning_content": "hm", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}}],
    "max_tokens": 5, "stop": ["END"], "temperature": 0.5, "top_k": 3, "user": "u", "adapter": "a"})");
  EXPECT_EQ(chat, want) << chat.dump(2);
}

TEST(AnthropicToChat, NamesTheFieldAtFault) {
  struct Case {
    const char* body;
    const char* param;
    ApiCode code;
  };
  const Case cases[] = {
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", "max_tokens",
       ApiCode::kMissingParameter},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})", "model",
       ApiCode::kMissingParameter},
      {R"({"model": "m", "max_tokens": "1", "messages": [{"role": "user", "content": "x"}]})", "max_tokens",
       ApiCode::kInvalidType},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": 3}]})",
       "messages[0].content", ApiCode::kInvalidType},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a",
         "name": "b", "input": {}}]}]})",
       "messages[0].content[0].type", ApiCode::kInvalidValue},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}})",
       "tool_choice", ApiCode::kUnsupportedParameter},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}})",
       "thinking", ApiCode::kUnsupportedParameter},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "metadata": {"x": 1}})",
       "metadata.x", ApiCode::kUnknownParameter},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "adapter": "a"})",
       "adapter", ApiCode::kUnknownParameter},
      {R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}, {"role": "assistant",
         "content": "Sure,"}]})",
       "messages[1]", ApiCode::kUnsupportedParameter},
  };
  for (const Case& c : cases) {
    RequestJson chat;
    auto error = anthropic_to_chat(J(c.body), AnthropicKind::kMessages, {}, chat);
    ASSERT_TRUE(error) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    EXPECT_EQ(error->code, c.code) << c.body << ": " << error->message;
  }
}

TEST(AnthropicToChat, CountTokensTakesNoMaxTokens) {
  RequestJson chat;
  EXPECT_FALSE(anthropic_to_chat(J(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})"),
                                 AnthropicKind::kCountTokens, {}, chat));
  auto error = anthropic_to_chat(
      J(R"({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]})"),
      AnthropicKind::kCountTokens, {}, chat);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "max_tokens");
}

TEST(AnthropicErrors, HaveAnthropicsShapeAndType) {
  EXPECT_EQ(anthropic_error_json(bad_request("bad", "x")),
            J(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_EQ(anthropic_error_json(api_error(ApiCode::kNotFound, "gone"))["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error_json(api_error(ApiCode::kOverloaded, "busy"))["error"]["type"],
            "overloaded_error");
  EXPECT_EQ(anthropic_error_json(api_error(ApiCode::kInternal, "bug"))["error"]["type"], "api_error");
}

TEST(AnthropicContent, HasThinkingTextAndToolUseBlocks) {
  RequestJson message = J(R"({"role": "assistant", "content": "Hi", "reasoning_content": "hm", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})");
  EXPECT_EQ(anthropic_content(message), J(R"([{"type": "thinking", "thinking": "hm", "signature": ""},
    {"type": "text", "text": "Hi"}, {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}])"));
  EXPECT_EQ(anthropic_stop_reason(FinishReason::kStop, true), "tool_use");
  EXPECT_EQ(anthropic_stop_reason(FinishReason::kLength, false), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(FinishReason::kStop, false), "end_turn");
  EXPECT_EQ(anthropic_stop_reason(FinishReason::kStop, false, "END"), "stop_sequence");
}

TEST(ResponsesToChat, TurnsItemsIntoChatMessagesAfterTheHistory) {
  RequestJson history =
      J(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])");
  RequestJson body = J(R"({"model": "m", "instructions": "Be brief.", "max_output_tokens": 7, "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "reasoning", "id": "rs", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}], "store": false})");
  RequestJson chat;
  ASSERT_FALSE(responses_to_chat(body, history, {}, chat));
  RequestJson want = J(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "reasoning_content": "hm", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "max_tokens": 7})");
  EXPECT_EQ(chat, want) << chat.dump(2);
}

TEST(ResponsesToChat, NamesTheFieldAtFault) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"model": "m"})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": [{"type": "web_search_call"}]})", "input[0].type"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", "input[0].content[0].type"},
      {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
      {R"({"input": "x", "parallel_tool_calls": false})", "parallel_tool_calls"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "strict": true}]})", "tools[0].strict"},
      {R"({"input": "x", "truncation": "auto"})", "truncation"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "wat": 1})", "wat"},
  };
  for (const Case& c : cases) {
    RequestJson chat;
    auto error = responses_to_chat(J(c.body), RequestJson::array(), {}, chat);
    ASSERT_TRUE(error) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body << ": " << error->message;
  }
}

TEST(ResponsesOutput, HasReasoningMessageAndFunctionCallItems) {
  RequestJson message = J(R"({"role": "assistant", "content": "Hi", "reasoning_content": "hm", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})");
  RequestJson items = responses_output(message, "x");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "hm");
  EXPECT_EQ(items[1]["type"], "message");
  EXPECT_EQ(items[1]["content"][0]["text"], "Hi");
  EXPECT_EQ(items[2],
            J(R"({"type": "function_call", "id": "fc_x_0", "call_id": "c1", "name": "f", "arguments": "{}",
    "status": "completed"})"));
  Usage usage{10, 4, 2};
  EXPECT_EQ(responses_usage(usage)["total_tokens"], 14);
}

}  // namespace
}  // namespace graft::server

namespace graft::server {
namespace {

TEST(ResponseStore, KeepsTheMostRecentlyUsed) {
  ResponseStore store(2);
  store.put("a", {RequestJson{{"id", "a"}}, RequestJson::array()});
  store.put("b", {RequestJson{{"id", "b"}}, RequestJson::array()});
  ASSERT_TRUE(store.get("a"));  // a is now the most recent
  store.put("c", {RequestJson{{"id", "c"}}, RequestJson::array()});
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.get("b"));
  EXPECT_EQ(store.get("a")->response["id"], "a");
  EXPECT_TRUE(store.get("c"));
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_FALSE(store.get("a"));
  store.put("c", {RequestJson{{"id", "c2"}}, RequestJson::array()});  // replaces
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.get("c")->response["id"], "c2");
}

}  // namespace
}  // namespace graft::server
