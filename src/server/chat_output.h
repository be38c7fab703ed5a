// ChatOutput: turns a chat model's generated text into the assistant message
// fields — content, reasoning_content, tool_calls — whole, or as streamed
// deltas, with the parser of src/chat/tool_calls.h for the template's format.
#pragma once

#include <string>
#include <vector>

#include "chat/template.h"
#include "chat/tool_calls.h"
#include "server/openai_params.h"

namespace graft::server {

class ChatOutput {
 public:
  // tools: the request offered tools (tool calls are looked for only then);
  // thinking_open: the rendered prompt leaves the model inside a <think> block.
  ChatOutput(const ChatTemplate& chat_template, bool tools, bool thinking_open);

  // The format's markers are control tokens in some vocabularies: their text
  // must then be kept in the generated text.
  bool needs_special_text() const { return format_ != ToolCallFormat::none; }

  // Streaming: the deltas (content / reasoning_content / tool_calls) this
  // piece of text completes, and those still held back at the end.
  std::vector<RequestJson> push(const std::string& text);
  std::vector<RequestJson> finish();

  // Whole: the assistant message for the full text.
  RequestJson message(const std::string& text);

  // finish_reason "tool_calls" instead of "stop".
  bool saw_tool_calls() const { return saw_tool_calls_ || parser_.saw_tool_calls(); }

 private:
  ToolCallFormat format_;
  bool thinking_;
  bool thinking_open_;
  StreamingOutputParser parser_;
  bool saw_tool_calls_ = false;
};

}  // namespace graft::server
