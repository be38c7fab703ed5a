// The path a chat request with tools takes through the chat layer, with canned
// model output in place of a model (a random-weight model never calls tools):
// render the prompt, parse the reply (whole and streamed) into an OpenAI
// message, send that message back with the tool's result, render again.
#include <gtest/gtest.h>

#include <string>

#include "chat/template.h"
#include "chat/tool_calls.h"
#include "conversations.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft {
namespace {

ChatTemplate load(const std::string& name) {
  Result<std::string> source = read_file(testing::bundle_template(name));
  EXPECT_TRUE(source.ok());
  Result<ChatTemplate> t = ChatTemplate::parse(source.ok() ? *source : "");
  EXPECT_TRUE(t.ok()) << t.error().message;
  return std::move(t).value();
}

ChatJson weather_question() {
  return ChatJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris?"}
  ])");
}

struct Reply {
  ChatJson message;              // the non-streamed response's message
  std::string finish_reason;     // what the server reports
  std::vector<ChatJson> deltas;  // the streamed response's deltas
  bool streamed_tool_calls = false;
};

// What the server does with the model's text: one parse for a plain
// response, a streaming parse over small pieces for SSE.
Reply respond(const ChatTemplate& t, const std::string& prompt, const std::string& output) {
  ToolCallFormat format = detect_tool_call_format(t.source());
  bool thinking = t.caps().thinking;
  bool open = prompt_opens_thinking(prompt);
  Reply r;
  ParsedMessage parsed = parse_model_output(output, format, thinking, open);
  r.message = assistant_message_json(parsed);
  r.finish_reason = parsed.tool_calls.empty() ? "stop" : "tool_calls";
  StreamingOutputParser stream(format, thinking, open);
  for (std::size_t i = 0; i < output.size(); i += 3) {
    for (ChatJson& d : stream.push(output.substr(i, 3))) r.deltas.push_back(std::move(d));
  }
  for (ChatJson& d : stream.finish()) r.deltas.push_back(std::move(d));
  r.streamed_tool_calls = stream.saw_tool_calls();
  return r;
}

// The next prompt: the weather question, the assistant's reply message as
// the server returned it, and the tool's answer to its first call.
Result<std::string> render_with_tool_result(const ChatTemplate& t, const ChatJson& reply,
                                            const std::string& result, const ChatRenderOptions& opts = {}) {
  ChatJson next = weather_question();
  next.push_back(reply);
  next.push_back(
      ChatJson{{"role", "tool"}, {"tool_call_id", reply["tool_calls"][0]["id"]}, {"content", result}});
  return t.render(next, testing::weather_tools(), opts);
}

TEST(ChatRoundTrip, Qwen3ToolCallComesBackAsOpenAIToolCallsAndRendersIntoTheNextPrompt) {
  ChatTemplate t = load("Qwen-Qwen3-0.6B");
  ChatRenderOptions opts;
  Result<std::string> prompt = t.render(weather_question(), testing::weather_tools(), opts);
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  EXPECT_FALSE(prompt_opens_thinking(*prompt));

  Reply reply =
      respond(t, *prompt,
              "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
              "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(reply.finish_reason, "tool_calls");
  EXPECT_TRUE(reply.streamed_tool_calls);
  const ChatJson& m = reply.message;
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "The user wants the weather.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");

  // Streamed: reasoning first, then the call in one delta.
  ASSERT_FALSE(reply.deltas.empty());
  EXPECT_TRUE(reply.deltas.front().contains("reasoning_content"));
  EXPECT_TRUE(reply.deltas.back().contains("tool_calls"));

  // The client sends the message back with the tool's answer.
  Result<std::string> again = render_with_tool_result(t, m, "18 degrees and sunny", opts);
  ASSERT_TRUE(again.ok()) << again.error().message;
  const std::string tail =
      "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nThe user wants the weather.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n18 degrees and sunny\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  ASSERT_GE(again->size(), tail.size());
  EXPECT_EQ(again->substr(again->size() - tail.size()), tail);
}

TEST(ChatRoundTrip, Qwen35StartsInsideThinkingAndUsesTheXmlForm) {
  ChatTemplate t = load("Qwen3.5-4B");
  Result<std::string> prompt = t.render(weather_question(), testing::weather_tools(), {});
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  EXPECT_TRUE(prompt_opens_thinking(*prompt));  // the generation prompt ends with "<think>\n"
  Reply reply =
      respond(t, *prompt,
              "Need the weather tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
              "Paris\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(reply.finish_reason, "tool_calls");
  EXPECT_EQ(reply.message["reasoning_content"], "Need the weather tool.");
  EXPECT_EQ(reply.message["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  Result<std::string> again = render_with_tool_result(t, reply.message, "sunny");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_NE(
      again->find("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                  "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>"),
      std::string::npos)
      << *again;
}

TEST(ChatRoundTrip, MiniCpm5CallsComeBackAndRenderAsItsXml) {
  ChatTemplate t = load("openbmb-MiniCPM5-1B");
  Result<std::string> prompt = t.render(weather_question(), testing::weather_tools(), {});
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  EXPECT_NE(prompt->find(R"(<function name="function-name">)"), std::string::npos);  // the instructions
  Reply reply = respond(t, *prompt,
                        "<think>\nNeed the weather tool.\n</think>\n\nLet me check.\n"
                        R"(<function name="get_weather"><param name="city">Paris</param></function>)");
  EXPECT_EQ(reply.finish_reason, "tool_calls");
  EXPECT_TRUE(reply.streamed_tool_calls);
  EXPECT_EQ(reply.message["reasoning_content"], "Need the weather tool.");
  EXPECT_EQ(reply.message["content"], "Let me check.");
  EXPECT_EQ(reply.message["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  Result<std::string> again = render_with_tool_result(t, reply.message, "sunny");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_NE(again->find("Let me check.\n<function name=\"get_weather\"><param name=\"city\">Paris</param>"
                        "</function><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>"),
            std::string::npos)
      << *again;
}

TEST(ChatRoundTrip, MistralIdsSatisfyTheTemplateWhenSentBack) {
  ChatTemplate t = load("mistralai-Mistral-Nemo-Instruct-2407");
  ChatJson question = ChatJson::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  ChatRenderOptions opts;
  opts.bos_token = "<s>";
  opts.eos_token = "</s>";
  Result<std::string> prompt = t.render(question, testing::weather_tools(), opts);
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  Reply reply =
      respond(t, *prompt, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]");
  ASSERT_EQ(reply.message["tool_calls"].size(), 1u);
  std::string id = reply.message["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 9u);
  question.push_back(reply.message);
  question.push_back(ChatJson{{"role", "tool"}, {"tool_call_id", id}, {"content", "sunny"}});
  question.push_back(ChatJson{{"role", "assistant"}, {"content", "It is sunny."}});
  question.push_back(ChatJson{{"role", "user"}, {"content", "Thanks!"}});
  Result<std::string> again = t.render(question, testing::weather_tools(), opts);
  ASSERT_TRUE(again.ok()) << again.error().message;  // the template raises on ids that are not 9 long
  EXPECT_NE(
      again->find(
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"" + id +
          "\"}]</s>[TOOL_RESULTS]{\"content\": sunny, \"call_id\": \"" + id + "\"}[/TOOL_RESULTS]"),
      std::string::npos)
      << *again;
}

TEST(ChatRoundTrip, Llama31JsonReplyBecomesACall) {
  ChatTemplate t = load("meta-llama-Llama-3.1-8B-Instruct");
  Result<std::string> prompt = t.render(weather_question(), testing::weather_tools(), {});
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  Reply reply = respond(t, *prompt, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  EXPECT_EQ(reply.finish_reason, "tool_calls");
  EXPECT_EQ(reply.message["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  Reply plain = respond(t, *prompt, "I cannot check the weather.");
  EXPECT_EQ(plain.finish_reason, "stop");
  EXPECT_EQ(plain.message["content"], "I cannot check the weather.");
  EXPECT_FALSE(plain.message.contains("tool_calls"));
}

}  // namespace
}  // namespace graft
