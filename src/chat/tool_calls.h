// Turns a model's generated text back into an OpenAI assistant message:
// content, reasoning_content (<think>...</think>, or Gemma 4's
// <|channel>thought ...<channel|>) and tool_calls, for the
// tool-call formats of the model families graft serves. Whole-output parsing
// (non-streamed responses) and streaming parsing (SSE deltas) share one state
// machine, so the streamed deltas always add up to the whole-output result,
// however the text was split into pieces.
//
// Tool calls are recognised only in the text the detokenizer returns: the
// markers ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", ...) must be decoded
// as text, not dropped as special tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/template.h"

namespace graft {

enum class ToolCallFormat {
  none,         // no tool calls: all text is content
  hermes,       // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen2.5, Qwen3)
  llama3_json,  // the whole reply is {"name": ..., "parameters": {...}} (Llama 3.1-3.3)
  mistral,      // [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}
  qwen_xml,     // <tool_call><function=name><parameter=k>v</parameter></function></tool_call> (Qwen3.5,
                // Qwen3-Coder)
  gemma4,       // <|tool_call>call:name{key:<|"|>text<|"|>,n:1}<tool_call|> (Gemma 4)
  minicpm5,     // <function name="f"><param name="k">v or <![CDATA[text]]></param></function> (MiniCPM5)
};

// The format a template's own text asks the model to use.
ToolCallFormat detect_tool_call_format(std::string_view template_source);
std::string_view tool_call_format_name(ToolCallFormat format);

// A fresh tool call id: "call_" + 24 letters and digits; Mistral's
// templates insist on exactly 9 letters and digits, so mistral gets those.
std::string make_tool_call_id(ToolCallFormat format);

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  // [{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}]
  ChatJson tool_calls = ChatJson::array();
};

// Whole-output parse. thinking: <think>...</think> at the start becomes
// reasoning_content; thinking_open: the prompt already opened the <think>
// block (prompt_opens_thinking), so the output starts inside it. Whitespace
// around the think block and around tool calls is dropped. A malformed tool
// call stays in content as written; this never fails.
ParsedMessage parse_model_output(std::string_view text, ToolCallFormat format, bool thinking,
                                 bool thinking_open = false);

// The assistant `message` of a non-streamed chat.completion: role, content
// (null when empty and there are tool calls), reasoning_content when there is
// some, tool_calls when there are any. finish_reason should then be
// "tool_calls" when message.tool_calls is non-empty.
ChatJson assistant_message_json(const ParsedMessage& message);

// Streaming parse: feed decoded text pieces, get OpenAI delta objects ready to
// put in SSE chunks: {"content": "..."}, {"reasoning_content": "..."} or
// {"tool_calls": [{"index", "id", "type", "function": {"name", "arguments"}}]}.
// Text that may still turn out to be a marker or a tool call is held back
// until it is decided; each tool call arrives whole, in one delta.
class StreamingOutputParser {
 public:
  StreamingOutputParser(ToolCallFormat format, bool thinking, bool thinking_open = false);
  std::vector<ChatJson> push(std::string_view piece);
  // Flushes held-back text; an unfinished or malformed call becomes content.
  std::vector<ChatJson> finish();
  bool saw_tool_calls() const { return tool_call_count_ > 0; }  // -> finish_reason "tool_calls"

 private:
  enum class State { start, reasoning, content, tagged_call, mistral_call, json_call };

  void run(bool at_end);
  bool step_start(bool at_end);
  bool step_reasoning(bool at_end);
  bool step_content(bool at_end);
  bool step_tagged_call(bool at_end);
  bool step_mistral_call(bool at_end);
  bool step_json_call(bool at_end);

  void emit_reasoning(std::string_view text, bool final_piece);
  void emit_content(std::string_view text);
  void emit_call(ChatJson call);
  void malformed(std::string_view raw);  // a call that did not parse: its text goes to content

  ToolCallFormat format_;
  State state_;
  std::string pending_;               // received, not yet decided
  std::string held_whitespace_;       // trailing whitespace, emitted once more text follows
  std::string call_prefix_;           // the marker (and whitespace before it) of the call being read
  std::string_view reasoning_close_;  // </think>, or <channel|> after Gemma's <|channel>
  bool reasoning_started_ = false;
  bool drop_leading_whitespace_ = false;  // after </think> and after a tool call
  bool content_started_ = false;          // llama3_json: a call may only open the reply
  int tool_call_count_ = 0;
  std::vector<ChatJson> out_;
};

}  // namespace graft
