// ChatTemplate's contract: errors with lines, what it does to requests before
// rendering, capabilities, and rendering from many threads.
#include <gtest/gtest.h>

#include <thread>

#include "chat/template.h"
#include "conversations.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft {
namespace {

ChatTemplate load(const std::string& name) {
  Result<std::string> source = read_file(testing::bundle_template(name));
  EXPECT_TRUE(source.ok()) << name;
  Result<ChatTemplate> t = ChatTemplate::parse(source.ok() ? *source : "");
  EXPECT_TRUE(t.ok()) << name << ": " << t.error().message;
  return std::move(t).value();
}

ChatTemplate parse(const std::string& source) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  EXPECT_TRUE(t.ok()) << t.error().message;
  return std::move(t).value();
}

std::string render(const ChatTemplate& t, const std::string& messages, ChatRenderOptions opts = {}) {
  Result<std::string> out = t.render(ChatJson::parse(messages), nullptr, opts);
  return out.ok() ? *out : "error " + out.error().code + ": " + out.error().message;
}

TEST(ChatTemplate, SyntaxErrorsComeBackWithTheLine) {
  Result<ChatTemplate> t = ChatTemplate::parse("{{ bos_token }}\n{% for m in messages %}\n{{ m.content }}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, "template_error");
  EXPECT_EQ(t.error().message, "chat template, line 3: unexpected end of template: expected '{% endfor %}'");
}

TEST(ChatTemplate, RaisedExceptionsComeBackWithTheLine) {
  ChatTemplate t = load("google-gemma-2-2b-it");
  Result<std::string> out = t.render_raw(testing::basic_conversation(), nullptr, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "template_error");
  EXPECT_EQ(out.error().message, "chat template, line 1: System role not supported");
  ChatTemplate qwen35 = load("Qwen3.5-4B");
  EXPECT_EQ(render(qwen35, R"([{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"}])"),
            "error template_error: chat template, line 144: Unexpected message role.");
}

TEST(ChatTemplate, TruncatedTemplatesFailCleanly) {
  Result<std::string> source = read_file(testing::bundle_template("Qwen-Qwen3-0.6B"));
  ASSERT_TRUE(source.ok());
  int parsed = 0, failed = 0;
  for (std::size_t n = 0; n < source->size(); n += 7) {
    Result<ChatTemplate> t = ChatTemplate::parse(source->substr(0, n));
    if (!t.ok()) {
      ++failed;
      EXPECT_NE(t.error().message.find("line"), std::string::npos) << t.error().message;
      continue;
    }
    ++parsed;
    Result<std::string> out = t->render(testing::tool_conversation(), testing::weather_tools(), {});
    if (!out.ok()) {
      EXPECT_EQ(out.error().code, "template_error");
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

TEST(ChatTemplate, BadRequestsAreInvalidArgumentsThatNameTheField) {
  ChatTemplate t = load("Qwen-Qwen3-0.6B");
  EXPECT_EQ(render(t, R"({"role": "user"})"), "error invalid_argument: messages must be an array");
  EXPECT_EQ(render(t, R"(["hi"])"), "error invalid_argument: messages[0] must be an object");
  EXPECT_EQ(render(t, R"([{"content": "hi"}])"), "error invalid_argument: messages[0].role must be a string");
  EXPECT_EQ(render(t, R"([{"role": "user", "content": 5}])"),
            "error invalid_argument: messages[0].content must be a string, an array of parts or null");
  EXPECT_EQ(
      render(t, R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
      "error invalid_argument: messages[0].content[0]: only text parts are supported (got type 'image_url')");
  ChatTemplate typed = load("Qwen3.5-4B");  // takes parts, images included, but graft serves text
  EXPECT_EQ(
      render(typed, R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
      "error invalid_argument: messages[0].content[0]: only text parts are supported (got type 'image_url')");
  EXPECT_EQ(render(t, R"([{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}])"),
            "error invalid_argument: messages[0].tool_calls[0] must have a function object");
  Result<std::string> out = t.render(ChatJson::array(), ChatJson::object(), {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "tools must be an array");
  ChatRenderOptions opts;
  opts.extra_kwargs = {{"messages", 1}};
  EXPECT_EQ(render(t, R"([{"role": "user", "content": "hi"}])", opts),
            "error invalid_argument: chat template arguments cannot set 'messages'");
}

TEST(ChatTemplate, DeeplyNestedRequestsAreRefused) {
  ChatTemplate t = load("Qwen-Qwen3-0.6B");
  std::string deep = std::string(600, '[') + std::string(600, ']');
  std::string messages =
      R"([{"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
      "function": {"name": "f", "arguments": {"x": )" +
      deep + "}}}]}]";
  EXPECT_EQ(render(t, messages), "error invalid_argument: messages nest more than 496 levels deep");
  // Arguments sent as JSON text are checked once parsed.
  EXPECT_EQ(render(t, R"([{"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
      "function": {"name": "f", "arguments": )" +
                          ChatJson("{\"x\": " + deep + "}").dump() + "}}]}]"),
            "error invalid_argument: messages[0].tool_calls[0] arguments nest more than 496 levels deep");
  ChatRenderOptions opts;
  opts.extra_kwargs = {{"deep", ChatJson::parse(deep)}};
  EXPECT_EQ(render(t, R"([{"role": "user", "content": "hi"}])", opts),
            "error invalid_argument: chat template arguments nest more than 496 levels deep");
}

TEST(ChatTemplate, AdaptsOpenAIRequestsToWhatTemplatesExpect) {
  ChatTemplate qwen3 = load("Qwen-Qwen3-0.6B");
  // Null content next to tool calls becomes "" (the template would add None to a string).
  EXPECT_EQ(
      render(qwen3, R"([{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
                              "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}])"),
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": "
      "1}}\n</tool_call><|im_end|>\n"
      "<|im_start|>assistant\n");
  // Arguments that are not JSON are passed on as text.
  EXPECT_EQ(
      render(qwen3, R"([{"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
                              "function": {"name": "f", "arguments": "not json"}}]}])"),
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": not "
      "json}\n</tool_call><|im_end|>\n"
      "<|im_start|>assistant\n");
  // "developer" is "system" to a template that does not know it.
  EXPECT_EQ(
      render(qwen3, R"([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}])"),
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Text parts become one string for a template that only takes strings...
  EXPECT_EQ(
      render(
          qwen3,
          R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])"),
      "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n");
  // ...and stay parts for one that takes them (Qwen3.5 joins them itself).
  ChatTemplate qwen35 = load("Qwen3.5-4B");
  EXPECT_EQ(
      render(
          qwen35,
          R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])"),
      "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n<think>\n");
  // A null tool_calls is no tool calls (Hermes 3 would iterate it).
  ChatTemplate hermes = load("NousResearch-Hermes-3-Llama-3.1-8B-tool_use");
  std::string out = render(
      hermes,
      R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": null}])");
  EXPECT_NE(out.find("<|im_start|>assistant\nyo<|im_end|>\n"), std::string::npos) << out;
}

TEST(ChatTemplate, OptionsReachTheTemplate) {
  ChatTemplate qwen3 = load("Qwen-Qwen3-0.6B");
  const std::string hi = R"([{"role": "user", "content": "hi"}])";
  ChatRenderOptions opts;
  opts.extra_kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(render(qwen3, hi, opts),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  opts = {};
  opts.add_generation_prompt = false;
  EXPECT_EQ(render(qwen3, hi, opts), "<|im_start|>user\nhi<|im_end|>\n");
  ChatTemplate phi = load("microsoft-Phi-3.5-mini-instruct");
  opts.eos_token = "<|endoftext|>";
  EXPECT_EQ(render(phi, hi, opts), "<|user|>\nhi<|end|>\n<|endoftext|>");
  ChatTemplate llama32 = load("meta-llama-Llama-3.2-3B-Instruct");
  opts = {};
  opts.now = testing::fixed_now();
  EXPECT_NE(render(llama32, hi, opts).find("Today Date: 14 Mar 2025"), std::string::npos);
}

TEST(ChatTemplate, CapabilitiesComeFromProbing) {
  ChatTemplateCaps qwen3 = load("Qwen-Qwen3-0.6B").caps();
  EXPECT_TRUE(qwen3.system_role);
  EXPECT_TRUE(qwen3.tools);
  EXPECT_TRUE(qwen3.tool_calls);
  EXPECT_TRUE(qwen3.tool_responses);
  EXPECT_TRUE(qwen3.object_arguments);
  EXPECT_FALSE(qwen3.typed_content);
  EXPECT_TRUE(qwen3.thinking);
  EXPECT_TRUE(load("Qwen3.5-4B").caps().typed_content);
  ChatTemplateCaps gemma2 = load("google-gemma-2-2b-it").caps();
  EXPECT_FALSE(gemma2.system_role);
  EXPECT_FALSE(gemma2.tools);
  EXPECT_FALSE(load("microsoft-Phi-3.5-mini-instruct").caps().tool_calls);
  EXPECT_FALSE(
      load("meetkai-functionary-medium-v3.2").caps().object_arguments);  // concatenates arguments text
  // A template that renders nothing graft can probe keeps the defaults.
  EXPECT_TRUE(parse("{{ raise_exception('needs kwargs') }}").caps().system_role);
}

TEST(ChatTemplate, RendersConcurrentlyFromOneParse) {
  ChatTemplate t = load("google-gemma-4-31B-it");
  ChatTemplate copy = t;  // copies share the parsed program
  ChatRenderOptions opts;
  opts.bos_token = "<bos>";
  Result<std::string> expected = t.render(testing::tool_conversation(), testing::weather_tools(), opts);
  ASSERT_TRUE(expected.ok());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      const ChatTemplate& mine = i % 2 ? t : copy;
      for (int k = 0; k < 50; ++k) {
        Result<std::string> out = mine.render(testing::tool_conversation(), testing::weather_tools(), opts);
        if (!out.ok() || *out != *expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(PromptOpensThinking, SeesAnOpenThinkBlockAtTheEnd) {
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

}  // namespace
}  // namespace graft
