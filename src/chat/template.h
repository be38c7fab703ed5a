// A model's chat template (the Jinja source in `tokenizer.chat_template`),
// parsed once and rendered for each chat request the way Hugging Face
// transformers renders it (jinja2 with trim_blocks and lstrip_blocks).
//
// JSON values are nlohmann::ordered_json so that the key order of the request
// reaches the prompt (`tools | tojson` must print "type" before "function",
// as Python would). Plain nlohmann::json converts implicitly but sorts keys.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace graft {

using ChatJson = nlohmann::ordered_json;

namespace jinja {
struct Program;
}

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  ChatJson extra_kwargs = ChatJson::object();  // e.g. {"enable_thinking": false}
  // What strftime_now() sees; the current time when unset.
  std::optional<std::chrono::system_clock::time_point> now;
};

// What a template can render, found once at parse time by rendering small
// probe conversations. render() adapts requests to it (see render()).
struct ChatTemplateCaps {
  bool system_role = true;       // renders a leading system message
  bool tools = false;            // renders the `tools` list
  bool tool_calls = false;       // renders an assistant message's tool_calls
  bool tool_responses = false;   // renders role "tool" messages
  bool object_arguments = true;  // takes tool-call arguments as objects (else as JSON text)
  bool typed_content = false;    // takes content as a list of parts
  bool thinking = false;         // knows <think> blocks (or Gemma 4's thought channel)
};

class ChatTemplate {
 public:
  // Syntax errors (and unknown filters or tests) carry the line number.
  static Result<ChatTemplate> parse(std::string source);

  // messages: an OpenAI-shaped array (role; content as a string, null or a
  // list of parts; tool_calls; tool_call_id; name; reasoning_content).
  // tools: an OpenAI tools array, or null. Before rendering, graft:
  //  - drops optional fields that are null (and an empty tool_calls),
  //  - gives an assistant message with tool_calls and no content "" content,
  //  - parses tool-call arguments given as JSON text into objects (as
  //    transformers templates expect) unless the template wants text,
  //  - joins text parts into one string if the template only takes strings,
  //  - maps role "developer" to "system" unless the template knows it,
  //  - folds a leading system message into the next message when the
  //    template has no system role (Gemma 2 raises on one).
  // `tools` reaches the template only when non-empty (else it is undefined).
  // Bad messages come back as invalid_argument; template errors
  // (raise_exception, type errors, runaway loops) as template_error, with
  // the template's line.
  Result<std::string> render(const ChatJson& messages, const ChatJson& tools,
                             const ChatRenderOptions& opts) const;

  // Renders exactly the given messages, with none of the adaptations above.
  Result<std::string> render_raw(const ChatJson& messages, const ChatJson& tools,
                                 const ChatRenderOptions& opts) const;

  const std::string& source() const { return *source_; }
  const ChatTemplateCaps& caps() const { return caps_; }

 private:
  ChatTemplate() = default;
  Result<ChatJson> normalize(const ChatJson& messages) const;

  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateCaps caps_;
};

// ChatML, for models that carry no chat template (or one graft cannot
// parse): what the server formats chats with then, and what the trainer
// renders `messages` data with.
extern const char* const kChatMlTemplate;

// True when a rendered prompt ends inside an open <think> block (Qwen3.5
// and others put "<think>\n" into the generation prompt): the model's output
// then starts with reasoning, not with "<think>".
bool prompt_opens_thinking(std::string_view prompt);

}  // namespace graft
