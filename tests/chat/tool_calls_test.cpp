// Parsing model output back into content, reasoning_content and tool_calls,
// whole and streamed.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "chat/tool_calls.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft {
namespace {

// A call without its (random) id, for comparisons.
ChatJson call(const std::string& name, const std::string& arguments) {
  return ChatJson{{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

ChatJson without_ids(ChatJson calls) {
  for (ChatJson& c : calls) c.erase("id");
  return calls;
}

struct Expect {
  std::string content;
  std::string reasoning;
  ChatJson calls = ChatJson::array();
};

void expect_parse(std::string_view text, ToolCallFormat format, bool thinking, const Expect& expected,
                  bool thinking_open = false) {
  SCOPED_TRACE(std::string(text));
  ParsedMessage m = parse_model_output(text, format, thinking, thinking_open);
  EXPECT_EQ(m.content, expected.content);
  EXPECT_EQ(m.reasoning_content, expected.reasoning);
  EXPECT_EQ(without_ids(m.tool_calls), expected.calls);
}

TEST(ToolCallFormat, DetectedFromTheTemplateText) {
  auto detect = [](const std::string& name) {
    Result<std::string> source = read_file(testing::bundle_template(name));
    EXPECT_TRUE(source.ok()) << name;
    return detect_tool_call_format(source.ok() ? *source : "");
  };
  EXPECT_EQ(detect("Qwen-Qwen3-0.6B"), ToolCallFormat::hermes);
  EXPECT_EQ(detect("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), ToolCallFormat::hermes);
  EXPECT_EQ(detect("Qwen-Qwen2.5-7B-Instruct"), ToolCallFormat::hermes);
  EXPECT_EQ(detect("Qwen3.5-4B"), ToolCallFormat::qwen_xml);
  EXPECT_EQ(detect("Qwen3-Coder"), ToolCallFormat::qwen_xml);
  EXPECT_EQ(detect("meta-llama-Llama-3.1-8B-Instruct"), ToolCallFormat::llama3_json);
  EXPECT_EQ(detect("meta-llama-Llama-3.2-3B-Instruct"), ToolCallFormat::llama3_json);
  EXPECT_EQ(detect("mistralai-Mistral-Nemo-Instruct-2407"), ToolCallFormat::mistral);
  EXPECT_EQ(detect("google-gemma-2-2b-it"), ToolCallFormat::none);
  EXPECT_EQ(detect("google-gemma-4-31B-it"), ToolCallFormat::gemma4);
  EXPECT_EQ(detect("openbmb-MiniCPM5-1B"), ToolCallFormat::minicpm5);
  EXPECT_EQ(detect("microsoft-Phi-3.5-mini-instruct"), ToolCallFormat::none);
}

TEST(ToolCallIds, AreUniqueAndShapedForTheFormat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = make_tool_call_id(ToolCallFormat::hermes);
    ASSERT_EQ(id.size(), 29u);
    ASSERT_EQ(id.substr(0, 5), "call_");
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
  std::string mistral = make_tool_call_id(ToolCallFormat::mistral);
  EXPECT_EQ(mistral.size(), 9u);
  for (char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << mistral;
}

TEST(ParseModelOutput, HermesAndQwenToolCalls) {
  expect_parse(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>",
      ToolCallFormat::hermes, false, {"Let me check.", "", {call("get_weather", R"({"city":"Paris"})")}});
  expect_parse(
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
      "\"arguments\": "
      "{\"x\": [1, 2]}}\n</tool_call>",
      ToolCallFormat::hermes, false, {"", "", {call("a", "{}"), call("b", R"({"x":[1,2]})")}});
  // Qwen3 thinks first.
  expect_parse(
      "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>",
      ToolCallFormat::hermes, true,
      {"", "The user wants the weather.", {call("get_weather", R"({"city":"Paris"})")}});
  // Arguments given as JSON text are kept as they are.
  expect_parse("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": 1}\"}</tool_call>",
               ToolCallFormat::hermes, false, {"", "", {call("f", R"({"k": 1})")}});
  // Non-ASCII survives.
  expect_parse("<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Zürich\"}}</tool_call>",
               ToolCallFormat::hermes, false, {"", "", {call("f", "{\"city\":\"Zürich\"}")}});
  // An unclosed call that is nevertheless complete (the model stopped at EOS).
  expect_parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", ToolCallFormat::hermes, false,
               {"", "", {call("f", "{}")}});
  // Qwen3.5's XML form.
  expect_parse(
      "I'll "
      "look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</"
      "parameter>\n<parameter=days>\n3\n"
      "</parameter>\n<parameter=note>\ntwo\nlines\n</parameter>\n</function>\n</tool_call>",
      ToolCallFormat::qwen_xml, false,
      {"I'll look.", "", {call("get_weather", R"({"city":"Paris","days":3,"note":"two\nlines"})")}});
}

TEST(ParseModelOutput, Llama3JsonToolCalls) {
  expect_parse("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               ToolCallFormat::llama3_json, false, {"", "", {call("get_weather", R"({"city":"Paris"})")}});
  expect_parse("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", ToolCallFormat::llama3_json, false,
               {"", "", {call("f", "{}")}});
  expect_parse("{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 1}}",
               ToolCallFormat::llama3_json, false, {"", "", {call("a", "{}"), call("b", R"({"n":1})")}});
  expect_parse("Paris is the capital of France.", ToolCallFormat::llama3_json, false,
               {"Paris is the capital of France.", "", ChatJson::array()});
  // JSON that is not a call is the answer itself.
  expect_parse("{\"answer\": 42}", ToolCallFormat::llama3_json, false,
               {"{\"answer\": 42}", "", ChatJson::array()});
  // A call can only open the reply.
  expect_parse("Sure: {\"name\": \"f\", \"parameters\": {}}", ToolCallFormat::llama3_json, false,
               {"Sure: {\"name\": \"f\", \"parameters\": {}}", "", ChatJson::array()});
}

TEST(ParseModelOutput, MistralToolCalls) {
  ParsedMessage m = parse_model_output(
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
      "\"abc123XYZ\"}]",
      ToolCallFormat::mistral, false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0]["id"], "abc123XYZ");  // the model's own id is kept
  EXPECT_EQ(without_ids(m.tool_calls), ChatJson::array({call("get_weather", R"({"city":"Paris"})")}));
  expect_parse("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
               ToolCallFormat::mistral, false,
               {"", "", {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")}});
  m = parse_model_output("[TOOL_CALLS]f[ARGS]{}", ToolCallFormat::mistral, false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0]["id"].get<std::string>().size(), 9u);  // Mistral's templates insist on 9
}

TEST(ParseModelOutput, MalformedCallsStayInContentAsWritten) {
  const char* broken[] = {
      "Here: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call> done",
      "<tool_call>{\"arguments\": {}}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>",
      "<tool_call>\n{\"name\": \"f\"",
      "<tool_call><function=f><parameter=x>1</function></tool_call>",
      "a < b and <tool",
  };
  for (const char* text : broken)
    expect_parse(text, ToolCallFormat::hermes, false, {text, "", ChatJson::array()});
  const char* mistral_broken[] = {"[TOOL_CALLS][{\"name\": 5}]", "[TOOL_CALLS] not a call",
                                  "[TOOL_CALLS]f[ARGS]{\"x\":"};
  for (const char* text : mistral_broken) {
    expect_parse(text, ToolCallFormat::mistral, false, {text, "", ChatJson::array()});
  }
  // Arguments nested deeper than any tool takes are not a call.
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": " + std::string(200, '[') +
                     std::string(200, ']') + "}}</tool_call>";
  expect_parse(deep, ToolCallFormat::hermes, false, {deep, "", ChatJson::array()});
  // One good call, one bad: the good one is a call, the bad one content.
  expect_parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>",
               ToolCallFormat::hermes, false, {"<tool_call>oops</tool_call>", "", {call("f", "{}")}});
  // A format without tool calls leaves markers alone.
  expect_parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", ToolCallFormat::none, false,
               {"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "", ChatJson::array()});
}

TEST(ParseModelOutput, ThinkBlocksBecomeReasoningContent) {
  expect_parse("<think>\nStep one.\nStep two.\n</think>\n\nParis.", ToolCallFormat::none, true,
               {"Paris.", "Step one.\nStep two.", ChatJson::array()});
  // The prompt opened the block (Qwen3.5 ends its generation prompt with "<think>\n").
  expect_parse("Easy.\n</think>\n\nParis.", ToolCallFormat::qwen_xml, true,
               {"Paris.", "Easy.", ChatJson::array()},
               /*thinking_open=*/true);
  // No think block at all, or thinking off: all content.
  expect_parse("Paris.", ToolCallFormat::hermes, true, {"Paris.", "", ChatJson::array()});
  expect_parse("<think>x</think>Paris.", ToolCallFormat::hermes, false,
               {"<think>x</think>Paris.", "", ChatJson::array()});
  // Cut off while thinking.
  expect_parse("<think>\nStill thinking", ToolCallFormat::hermes, true,
               {"", "Still thinking", ChatJson::array()});
  // Calls written while thinking are thoughts, not calls.
  expect_parse("<think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call></think>ok",
               ToolCallFormat::hermes, true,
               {"ok", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", ChatJson::array()});
  // Plain text keeps its whitespace.
  expect_parse("  two spaces and a newline\n", ToolCallFormat::hermes, false,
               {"  two spaces and a newline\n", "", ChatJson::array()});
}

// Gemma 4 writes its calls in its own argument syntax (the bundle's
// gemma-4 template renders them so): strings between <|"|> quotes, bare keys.
TEST(ParseModelOutput, Gemma4ToolCalls) {
  expect_parse("<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:3,metric:true}<tool_call|>",
               ToolCallFormat::gemma4, false,
               {"", "", {call("get_weather", R"({"city":"Paris, \"FR\"","days":3,"metric":true})")}});
  // Nested objects and arrays, a quoted key, two calls, text before them.
  expect_parse(
      "Checking.<|tool_call>call:plan{steps:[<|\"|>a<|\"|>,{n:-1.5,x:null}],<|\"|>my key<|\"|>:{}}"
      "<tool_call|><|tool_call>call:noop{}<tool_call|>",
      ToolCallFormat::gemma4, false,
      {"Checking.",
       "",
       {call("plan", R"({"steps":["a",{"n":-1.5,"x":null}],"my key":{}})"), call("noop", "{}")}});
  // Cut off after the call's closing brace: still a whole call.
  expect_parse("<|tool_call>call:f{a:1}", ToolCallFormat::gemma4, false, {"", "", {call("f", R"({"a":1})")}});
  // Malformed calls stay in content as written.
  const char* broken[] = {
      "<|tool_call>call:f{a:<|\"|>unterminated}<tool_call|>",
      "<|tool_call>f{a:1}<tool_call|>",
      "<|tool_call>call:f{a:1<tool_call|>",
      "<|tool_call>call:f{a:1} trailing<tool_call|>",
      "<|tool_call>call:f{a:bare words}<tool_call|>",
      "<|tool_call>call:{a:1}<tool_call|>",
      "<|tool_call>call:f{:1}<tool_call|>",
      "<|tool_call>call:f{a:1,}<tool_call|>",
      "<|tool_call>call:f{a:1",
  };
  for (const char* text : broken)
    expect_parse(text, ToolCallFormat::gemma4, false, {text, "", ChatJson::array()});
}

TEST(ParseModelOutput, MiniCpm5ToolCalls) {
  expect_parse(R"(<function name="get_weather"><param name="city">Paris</param><param name="days">3</param>)"
               R"(</function>)",
               ToolCallFormat::minicpm5, false,
               {"", "", {call("get_weather", R"({"city":"Paris","days":3})")}});
  // CDATA values are strings as written, even when they hold markup or the
  // closing marker; text before, two calls, whitespace between.
  expect_parse(
      "Writing it.\n<function name=\"write\"><param name=\"path\">a.txt</param><param name=\"text\">"
      "<![CDATA[x < y && </param></function>\nline 2]]></param></function>\n"
      "<function name=\"noop\"></function>",
      ToolCallFormat::minicpm5, false,
      {"Writing it.",
       "",
       {call("write", R"({"path":"a.txt","text":"x < y && </param></function>\nline 2"})"),
        call("noop", "{}")}});
  // Reasoning first.
  expect_parse(
      "<think>\nNeed the weather.\n</think>\n\n<function name=\"w\"><param name=\"c\">Oslo</param>"
      "</function>",
      ToolCallFormat::minicpm5, true, {"", "Need the weather.", {call("w", R"({"c":"Oslo"})")}});
  // Text after a call is content.
  expect_parse(R"(<function name="f"></function> Done.)", ToolCallFormat::minicpm5, false,
               {"Done.", "", {call("f", "{}")}});
  // Malformed calls stay in content as written.
  const char* broken[] = {
      R"(<function name="f"><param name="a">1</param>)",
      R"(<function name="f"><param name="a">1</function>)",
      R"(<function name="f"><param name="a">x < y</param></function>)",
      R"(<function name="f"><param name="a"><![CDATA[open</param></function>)",
      R"(<function name="f"><param name="a"><![CDATA[x]]> tail</param></function>)",
      R"(<function name="f"><param name="">1</param></function>)",
      R"(<function name="f"><param name="a">1</param><param name="a">2</param></function>)",
      R"(<function name="f"><arg name="a">1</arg></function>)",
      R"(<function name="two words"></function>)",
  };
  for (const char* text : broken) {
    ParsedMessage m = parse_model_output(text, ToolCallFormat::minicpm5, false);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
    EXPECT_NE(m.content.find("<function name="), std::string::npos) << text;
  }
}

// Gemma 4 reasons in a thought channel.
TEST(ParseModelOutput, Gemma4ThoughtChannelBecomesReasoningContent) {
  expect_parse("<|channel>thought\nThe user wants weather.<channel|>It is sunny.", ToolCallFormat::gemma4,
               true, {"It is sunny.", "The user wants weather.", ChatJson::array()});
  expect_parse("<|channel>thought\nNeed data.<channel|><|tool_call>call:w{c:<|\"|>Oslo<|\"|>}<tool_call|>",
               ToolCallFormat::gemma4, true, {"", "Need data.", {call("w", R"({"c":"Oslo"})")}});
  // Cut off while thinking; and a template without tools (format none) still reasons.
  expect_parse("<|channel>thought\nHmm", ToolCallFormat::none, true, {"", "Hmm", ChatJson::array()});
  // Thinking off: the markers are content.
  expect_parse("<|channel>thought\nx<channel|>y", ToolCallFormat::none, false,
               {"<|channel>thought\nx<channel|>y", "", ChatJson::array()});
}

TEST(ParseModelOutput, AssistantMessageJsonIsOpenAIShaped) {
  ParsedMessage m = parse_model_output("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                                       ToolCallFormat::hermes, false);
  ChatJson msg = assistant_message_json(m);
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_FALSE(msg.contains("reasoning_content"));
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "f");
  msg = assistant_message_json(parse_model_output("<think>hm</think>Hi", ToolCallFormat::hermes, true));
  EXPECT_EQ(msg["content"], "Hi");
  EXPECT_EQ(msg["reasoning_content"], "hm");
  EXPECT_FALSE(msg.contains("tool_calls"));
}

// --- streaming ---

struct Sample {
  std::string text;
  ToolCallFormat format;
  bool thinking;
  bool thinking_open;
};

const Sample kSamples[] = {
    {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Zürich\"}}\n</tool_call>\n"
     "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>  tail",
     ToolCallFormat::hermes, false, false},
    {"<think>\nHmm, the weather.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": "
     "\"a}b\\\"\"}}\n"
     "</tool_call>",
     ToolCallFormat::hermes, true, false},
    {"Reasoning here.\n</think>\n\nI'll "
     "call.\n<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n"
     "</tool_call>",
     ToolCallFormat::qwen_xml, true, true},
    {"Here: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call> done <tool",
     ToolCallFormat::hermes, false, false},
    {"<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": "
     "{}}",
     ToolCallFormat::llama3_json, false, false},
    {"{\"answer\": 42} is the JSON", ToolCallFormat::llama3_json, false, false},
    {"Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"]\"}]}, \"id\": "
     "\"abc123XYZ\"}]",
     ToolCallFormat::mistral, false, false},
    {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]broken[ARGS]nope",
     ToolCallFormat::mistral, false, false},
    {"  <think> a </think>  answer  \n", ToolCallFormat::none, true, false},
    {"<thinking is not a tag", ToolCallFormat::none, true, false},
    {"<think>Überlegung 🤔</think>Grüße aus Zürich 😀 <tool_call>", ToolCallFormat::hermes, true,
     false},
    {"<|channel>thought\nDas Wetter 🤔<channel|>Moment. <|tool_call>call:w{c:<|\"|>Zürich<|\"|>,n:[1,2]}"
     "<tool_call|> <|tool_call>call:broken{x:<tool_call|> tail <|tool",
     ToolCallFormat::gemma4, true, false},
    {"<think>\nDas Wetter 🤔\n</think>\n\nMoment.\n<function name=\"w\"><param name=\"c\"><![CDATA[Zürich "
     "</function>]]></param></function> <function name=\"broken\"><param name=\"x\">1</function> tail "
     "<function name",
     ToolCallFormat::minicpm5, true, false},
};

struct Merged {
  std::string content, reasoning;
  ChatJson calls = ChatJson::array();
};

void merge(Merged& m, const std::vector<ChatJson>& deltas) {
  for (const ChatJson& d : deltas) {
    ASSERT_TRUE(d.is_object());
    ASSERT_NO_THROW(d.dump()) << "a delta holds part of a UTF-8 character";
    ASSERT_EQ(d.size(), 1u) << d.dump();
    if (d.contains("content")) {
      ASSERT_FALSE(d["content"].get<std::string>().empty());
      m.content += d["content"].get<std::string>();
    } else if (d.contains("reasoning_content")) {
      ASSERT_FALSE(d["reasoning_content"].get<std::string>().empty());
      m.reasoning += d["reasoning_content"].get<std::string>();
    } else {
      ASSERT_TRUE(d.contains("tool_calls")) << d.dump();
      for (const ChatJson& c : d["tool_calls"]) {
        EXPECT_EQ(c["index"].get<int>(), static_cast<int>(m.calls.size()));
        EXPECT_TRUE(c["id"].is_string());
        EXPECT_EQ(c["type"], "function");
        ChatJson arguments = ChatJson::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
        EXPECT_TRUE(arguments.is_object()) << c.dump();
        m.calls.push_back(call(c["function"]["name"], c["function"]["arguments"]));
      }
    }
  }
}

// Feeds `text` in pieces cut at `cuts` (byte offsets) and merges the deltas.
Merged stream(const Sample& s, const std::vector<std::size_t>& cuts) {
  StreamingOutputParser parser(s.format, s.thinking, s.thinking_open);
  Merged m;
  std::size_t from = 0;
  for (std::size_t cut : cuts) {
    merge(m, parser.push(std::string_view(s.text).substr(from, cut - from)));
    from = cut;
  }
  merge(m, parser.push(std::string_view(s.text).substr(from)));
  merge(m, parser.finish());
  return m;
}

void expect_same(const Merged& streamed, const ParsedMessage& whole, const std::string& how) {
  EXPECT_EQ(streamed.content, whole.content) << how;
  EXPECT_EQ(streamed.reasoning, whole.reasoning_content) << how;
  EXPECT_EQ(streamed.calls, without_ids(whole.tool_calls)) << how;
}

TEST(StreamingOutputParser, DeltasAddUpToTheWholeParseWhereverTheTextIsSplit) {
  for (const Sample& s : kSamples) {
    SCOPED_TRACE(s.text);
    ParsedMessage whole = parse_model_output(s.text, s.format, s.thinking, s.thinking_open);
    for (std::size_t cut = 0; cut <= s.text.size(); ++cut) {
      expect_same(stream(s, {cut}), whole, "split at byte " + std::to_string(cut));
    }
    std::vector<std::size_t> every_byte;
    for (std::size_t i = 1; i < s.text.size(); ++i) every_byte.push_back(i);
    expect_same(stream(s, every_byte), whole, "one byte at a time");
  }
}

TEST(StreamingOutputParser, ReportsToolCallsAndHoldsBackOnlyWhatIsUndecided) {
  StreamingOutputParser parser(ToolCallFormat::hermes, false);
  std::vector<ChatJson> d = parser.push("Let me check");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["content"], "Let me check");  // plain text goes out at once
  d = parser.push(". <tool_");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["content"], ".");  // "<tool_" might open a call; the space waits too
  d = parser.push("call>{\"name\": \"f\", ");
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(parser.saw_tool_calls());
  d = parser.push("\"arguments\": {}}</tool_call>");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(d[0]["tool_calls"][0]["index"], 0);
  EXPECT_TRUE(parser.saw_tool_calls());
  EXPECT_TRUE(parser.finish().empty());

  StreamingOutputParser thinking(ToolCallFormat::none, true);
  EXPECT_TRUE(thinking.push("<thi").empty());
  d = thinking.push("nk>\nHmm");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["reasoning_content"], "Hmm");
  d = thinking.finish();
  EXPECT_TRUE(d.empty());
}

}  // namespace
}  // namespace graft
