#include "chat/template.h"

#include <algorithm>
#include <ctime>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace graft {

const char* const kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
    "endif %}";

namespace {

using jinja::Json;

Error template_error(const jinja::TemplateError& e) {
  if (e.line > 0) return errorf("template_error", "chat template, line {}: {}", e.line, e.message);
  return errorf("template_error", "chat template: {}", e.message);
}

// Markers the capability probes look for in the output.
constexpr const char* kSystemProbe = "graft-system-probe";
constexpr const char* kUserProbe = "graft-user-probe";
constexpr const char* kToolDefProbe = "graft_tool_definition_probe";
constexpr const char* kToolCallProbe = "graft_tool_call_probe";
constexpr const char* kArgumentProbe = "graft-argument-probe";
constexpr const char* kToolResultProbe = "graft-tool-result-probe";

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// How deeply `j` nests, measured without recursion (copying or printing
// deeper JSON would recurse that deep).
int nesting_depth(const ChatJson& j) {
  std::vector<std::pair<const ChatJson*, int>> stack = {{&j, 1}};
  int deepest = 0;
  while (!stack.empty()) {
    auto [value, depth] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, depth);
    if (deepest > jinja::kMaxJsonDepth) break;
    if (value->is_structured()) {
      for (const ChatJson& child : *value) stack.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

Status check_depth(const ChatJson& j, std::string_view what) {
  if (nesting_depth(j) > jinja::kMaxJsonDepth - 16) {
    return errorf("invalid_argument", "{} nest more than {} levels deep", what, jinja::kMaxJsonDepth - 16);
  }
  return {};
}

Json user(std::string text) {
  return Json{{"role", "user"}, {"content", std::move(text)}};
}

Json tool_call_conversation(bool object_arguments) {
  Json arguments = Json{{"probe_argument", kArgumentProbe}};
  Json call = Json{
      {"id", "call00001"},
      {"type", "function"},
      {"function",
       {{"name", kToolCallProbe}, {"arguments", object_arguments ? arguments : Json(arguments.dump())}}}};
  return Json::array({user(kUserProbe),
                      Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}},
                      Json{{"role", "tool"},
                           {"tool_call_id", "call00001"},
                           {"name", kToolCallProbe},
                           {"content", kToolResultProbe}},
                      Json{{"role", "assistant"}, {"content", "done"}}});
}

Json probe_tools() {
  return Json::array(
      {Json{{"type", "function"},
            {"function",
             {{"name", kToolDefProbe},
              {"description", "A probe."},
              {"parameters",
               {{"type", "object"},
                {"properties", {{"probe_argument", {{"type", "string"}, {"description", "A probe."}}}}},
                {"required", Json::array({"probe_argument"})}}}}}}});
}

// Text of a content value given as a list of parts.
Result<std::string> join_text_parts(const Json& parts, std::size_t index) {
  std::string text;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const Json& part = parts[j];
    std::string type = part.is_object() ? part.value("type", "") : "";
    if (type != "text" || !part.contains("text") || !part["text"].is_string()) {
      return errorf("invalid_argument",
                    "messages[{}].content[{}]: only text parts are supported (got type '{}')", index, j,
                    type);
    }
    if (!text.empty()) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  ChatTemplate t;
  try {
    t.program_ = std::make_shared<const jinja::Program>(jinja::parse_program(source));
  } catch (const jinja::TemplateError& e) {
    return template_error(e);
  }
  t.source_ = std::make_shared<const std::string>(std::move(source));

  // Probe what the template renders; a probe that fails says "not supported".
  ChatRenderOptions opts;
  opts.now = std::chrono::system_clock::time_point{};
  auto probe = [&](const Json& messages, const Json& tools) -> std::string {
    Result<std::string> out = t.render_raw(messages, tools, opts);
    return out.ok() ? *out : std::string();
  };
  ChatTemplateCaps& caps = t.caps_;
  caps.thinking = contains(*t.source_, "<think>") || contains(*t.source_, "<|channel>thought");
  // A template that cannot render even one user message (it needs kwargs
  // graft does not know) teaches nothing: keep the defaults.
  if (!contains(probe(Json::array({user(kUserProbe)}), nullptr), kUserProbe)) return t;
  caps.system_role = contains(
      probe(Json::array({Json{{"role", "system"}, {"content", kSystemProbe}}, user(kUserProbe)}), nullptr),
      kSystemProbe);
  caps.tools = contains(probe(Json::array({user(kUserProbe)}), probe_tools()), kToolDefProbe);
  std::string with_objects = probe(tool_call_conversation(true), probe_tools());
  caps.tool_calls = contains(with_objects, kToolCallProbe);
  caps.tool_responses = contains(with_objects, kToolResultProbe);
  if (!contains(with_objects, kArgumentProbe)) {
    std::string with_text = probe(tool_call_conversation(false), probe_tools());
    if (contains(with_text, kArgumentProbe)) {
      caps.object_arguments = false;
      caps.tool_calls = true;
      caps.tool_responses = contains(with_text, kToolResultProbe);
    }
  }
  Json parts = Json::array(
      {Json{{"role", "user"}, {"content", Json::array({Json{{"type", "text"}, {"text", kUserProbe}}})}}});
  std::string typed = probe(parts, nullptr);
  caps.typed_content = contains(typed, kUserProbe) && !contains(typed, "'type': 'text'") &&
                       !contains(typed, "\"type\": \"text\"");
  return t;
}

Result<std::string> ChatTemplate::render_raw(const ChatJson& messages, const ChatJson& tools,
                                             const ChatRenderOptions& opts) const {
  GRAFT_TRY_STATUS(check_depth(messages, "messages"));
  GRAFT_TRY_STATUS(check_depth(tools, "tools"));
  GRAFT_TRY_STATUS(check_depth(opts.extra_kwargs, "chat template arguments"));
  try {
    const auto now = opts.now.value_or(std::chrono::system_clock::now());
    jinja::Interpreter interpreter(*program_, jinja::RenderLimits{}, now);
    interpreter.set_global("messages", jinja::Value::borrowed(messages));
    if (tools.is_array() && !tools.empty()) interpreter.set_global("tools", jinja::Value::borrowed(tools));
    interpreter.set_global("add_generation_prompt", jinja::Value(opts.add_generation_prompt));
    interpreter.set_global("bos_token", jinja::Value(opts.bos_token));
    interpreter.set_global("eos_token", jinja::Value(opts.eos_token));
    // What some templates expect their caller to pass (FireFunction v2:
    // `functions`, the tools as a JSON string, and `datetime`); template
    // arguments may override them.
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm utc{};
    gmtime_r(&t, &utc);
    interpreter.set_global("datetime", jinja::Value(fmt::format("{:%b %d %Y}", utc)));
    interpreter.set_global("functions", jinja::Value(tools.is_array() ? tools.dump(4) : std::string("[]")));
    if (opts.extra_kwargs.is_object()) {
      for (const auto& [key, value] : opts.extra_kwargs.items()) {
        if (key == "messages" || key == "tools" || key == "add_generation_prompt") {
          return errorf("invalid_argument", "chat template arguments cannot set '{}'", key);
        }
        interpreter.set_global(key, jinja::Value::borrowed(value));
      }
    }
    return interpreter.render();
  } catch (const jinja::TemplateError& e) {
    return template_error(e);
  } catch (const std::exception& e) {
    return errorf("template_error", "chat template: {}", e.what());
  }
}

Result<ChatJson> ChatTemplate::normalize(const ChatJson& messages) const {
  if (!messages.is_array()) return make_error("invalid_argument", "messages must be an array");
  static const char* kOptional[] = {"tool_calls",    "tool_call_id", "name", "reasoning_content",
                                    "function_call", "refusal",      "audio"};
  bool knows_developer = contains(*source_, "developer");
  ChatJson out = ChatJson::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatJson& in = messages[i];
    if (!in.is_object()) return errorf("invalid_argument", "messages[{}] must be an object", i);
    if (!in.contains("role") || !in["role"].is_string()) {
      return errorf("invalid_argument", "messages[{}].role must be a string", i);
    }
    ChatJson m = in;
    for (const char* key : kOptional) {
      auto it = m.find(key);
      if (it != m.end() && (it->is_null() || (std::string_view(key) == "tool_calls" && it->empty())))
        m.erase(key);
    }
    if (m["role"] == "developer" && !knows_developer) m["role"] = "system";
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null() &&
        !m["content"].is_array()) {
      return errorf("invalid_argument", "messages[{}].content must be a string, an array of parts or null",
                    i);
    }
    if (m.contains("content") && m["content"].is_array()) {
      // graft serves text models: other parts (images, audio) are refused either way.
      GRAFT_TRY(std::string text, join_text_parts(m["content"], i));
      if (!caps_.typed_content) m["content"] = std::move(text);
    }
    if (m.contains("tool_calls")) {
      if (!m["tool_calls"].is_array())
        return errorf("invalid_argument", "messages[{}].tool_calls must be an array", i);
      if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
      for (std::size_t j = 0; j < m["tool_calls"].size(); ++j) {
        ChatJson& call = m["tool_calls"][j];
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          return errorf("invalid_argument", "messages[{}].tool_calls[{}] must have a function object", i, j);
        }
        ChatJson& function = call["function"];
        if (!function.contains("arguments")) continue;
        ChatJson& arguments = function["arguments"];
        if (caps_.object_arguments && arguments.is_string()) {
          ChatJson parsed = ChatJson::parse(arguments.get<std::string>(), nullptr, false);
          if (!parsed.is_discarded() && parsed.is_object()) {
            GRAFT_TRY_STATUS(check_depth(parsed, fmt::format("messages[{}].tool_calls[{}] arguments", i, j)));
            arguments = std::move(parsed);
          }
        } else if (!caps_.object_arguments && !arguments.is_string()) {
          arguments = arguments.dump();
        }
      }
    }
    out.push_back(std::move(m));
  }
  if (!caps_.system_role && !out.empty() && out[0]["role"] == "system") {
    const ChatJson& system = out[0];
    std::string text = system.contains("content") && system["content"].is_string()
                           ? system["content"].get<std::string>()
                           : "";
    if (out.size() > 1 && out[1].contains("content") && out[1]["content"].is_string()) {
      out[1]["content"] = text + "\n\n" + out[1]["content"].get<std::string>();
      out.erase(out.begin());
    } else {
      out[0]["role"] = "user";
    }
  }
  return out;
}

Result<std::string> ChatTemplate::render(const ChatJson& messages, const ChatJson& tools,
                                         const ChatRenderOptions& opts) const {
  if (!tools.is_null() && !tools.is_array()) return make_error("invalid_argument", "tools must be an array");
  GRAFT_TRY_STATUS(check_depth(messages, "messages"));
  GRAFT_TRY_STATUS(check_depth(tools, "tools"));
  GRAFT_TRY_STATUS(check_depth(opts.extra_kwargs, "chat template arguments"));
  GRAFT_TRY(ChatJson normalized, normalize(messages));
  return render_raw(normalized, tools, opts);
}

bool prompt_opens_thinking(std::string_view prompt) {
  while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == ' ')) prompt.remove_suffix(1);
  constexpr std::string_view kOpen = "<think>";
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

}  // namespace graft
