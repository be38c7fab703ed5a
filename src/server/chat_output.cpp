#include "server/chat_output.h"

namespace graft::server {

ChatOutput::ChatOutput(const ChatTemplate& chat_template, bool tools, bool thinking_open)
    : format_(tools ? detect_tool_call_format(chat_template.source()) : ToolCallFormat::none),
      thinking_(chat_template.caps().thinking),
      thinking_open_(thinking_open),
      parser_(format_, thinking_, thinking_open_) {}

std::vector<RequestJson> ChatOutput::push(const std::string& text) {
  if (text.empty()) return {};
  return parser_.push(text);
}

std::vector<RequestJson> ChatOutput::finish() {
  return parser_.finish();
}

RequestJson ChatOutput::message(const std::string& text) {
  ParsedMessage parsed = parse_model_output(text, format_, thinking_, thinking_open_);
  saw_tool_calls_ = !parsed.tool_calls.empty();
  return assistant_message_json(parsed);
}

}  // namespace graft::server
