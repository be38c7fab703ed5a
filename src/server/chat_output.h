// ChatOutput: turns a chat model's generated text into the assistant message
// fields — content, reasoning_content, tool_calls — whole, or as streamed
// deltas.
#pragma once

#include <string>
#include <vector>

#include "server/openai_params.h"

namespace graft::server {

class ChatOutput {
 public:
  // template_source: the chat template (it tells the tool-call format);
  // thinking: the prompt leaves the model inside a <think> block.
  ChatOutput(const std::string& template_source, bool tools, bool thinking);
  ~ChatOutput();

  // Streaming: the deltas (objects with content / reasoning_content /
  // tool_calls) this piece of text completes.
  std::vector<RequestJson> push(const std::string& text);
  std::vector<RequestJson> finish();

  // Whole: the assistant message for the full text.
  RequestJson message(const std::string& text) const;

  bool saw_tool_calls() const { return saw_tool_calls_; }

 private:
  bool tools_;
  bool thinking_;
  bool saw_tool_calls_ = false;
};

}  // namespace graft::server
