#include "server/api_translation.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

namespace graft::server {

namespace {

struct FieldError {
  ApiError error;
};

[[noreturn]] void fail(const std::string& field, const std::string& message,
                       ApiCode code = ApiCode::kInvalidValue) {
  throw FieldError{bad_request(message, field, code)};
}

[[noreturn]] void unsupported(const std::string& field, const std::string& message) {
  fail(field, message, ApiCode::kUnsupportedParameter);
}

const RequestJson* find(const RequestJson& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string read_text(const RequestJson& v, const std::string& field) {
  if (!v.is_string()) fail(field, fmt::format("'{}' must be a string", field), ApiCode::kInvalidType);
  return v.get<std::string>();
}

const RequestJson& require(const RequestJson& body, const std::string& name, const std::string& field) {
  const RequestJson* v = find(body, name);
  if (!v) fail(field, fmt::format("'{}' is required", field), ApiCode::kMissingParameter);
  return *v;
}

void check_fields(const RequestJson& object, const std::string& where,
                  std::initializer_list<const char*> known) {
  for (const auto& [key, value] : object.items()) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      const std::string field = where.empty() ? key : where + "." + key;
      fail(field, fmt::format("unknown field '{}'", field), ApiCode::kUnknownParameter);
    }
  }
}

// Top-level fields: `known` are read here, `refused` are known to the API but
// ask for something graft lacks (400 naming the field), `extra` are the hooks'.
void check_top_level(const RequestJson& body, std::initializer_list<const char*> known,
                     std::initializer_list<std::pair<const char*, const char*>> refused,
                     const std::vector<std::string>& extra) {
  for (const auto& [key, value] : body.items()) {
    if (std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) continue;
    if (std::find(extra.begin(), extra.end(), key) != extra.end()) continue;
    for (const auto& [name, why] : refused) {
      if (key == name && !value.is_null())
        unsupported(key, fmt::format("'{}' is not supported: {}", key, why));
    }
    if (std::any_of(refused.begin(), refused.end(), [&](const auto& r) { return key == r.first; })) continue;
    fail(key, fmt::format("unknown field '{}'", key), ApiCode::kUnknownParameter);
  }
}

void copy_if(const RequestJson& from, const char* name, RequestJson& to, const char* as = nullptr) {
  if (const RequestJson* v = find(from, name)) to[as ? as : name] = *v;
}

const char* kForced =
    "graft cannot force a tool call yet (that needs constrained decoding); use \"auto\" and let the model "
    "choose";

// ---- Anthropic

// A tool_result's content: a string or text blocks.
std::string tool_result_text(const RequestJson& block, const std::string& field) {
  const RequestJson* content = find(block, "content");
  if (!content) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array())
    fail(field + ".content", fmt::format("'{}.content' must be a string or a list of text blocks", field),
         ApiCode::kInvalidType);
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const RequestJson& b = (*content)[i];
    const std::string bf = fmt::format("{}.content[{}]", field, i);
    if (!b.is_object() || !b.contains("type") || b["type"] != "text") {
      unsupported(bf, fmt::format("'{}': graft takes text blocks only in a tool_result", bf));
    }
    check_fields(b, bf, {"type", "text", "cache_control", "citations"});
    if (find(b, "citations")) unsupported(bf + ".citations", "citations are not supported");
    if (!text.empty()) text += "\n";
    text += read_text(require(b, "text", bf + ".text"), bf + ".text");
  }
  return text;
}

void anthropic_message(const RequestJson& m, const std::string& field, RequestJson& out) {
  if (!m.is_object()) fail(field, fmt::format("'{}' must be an object", field), ApiCode::kInvalidType);
  check_fields(m, field, {"role", "content"});
  const std::string role = read_text(require(m, "role", field + ".role"), field + ".role");
  if (role != "user" && role != "assistant")
    fail(field + ".role", fmt::format("'{}.role' must be \"user\" or \"assistant\" (got '{}')", field, role));
  const RequestJson& content = require(m, "content", field + ".content");
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content.get<std::string>()}});
    return;
  }
  if (!content.is_array())
    fail(field + ".content", fmt::format("'{}.content' must be a string or a list of blocks", field),
         ApiCode::kInvalidType);
  std::string text;
  std::string thinking;
  RequestJson calls = RequestJson::array();
  RequestJson results = RequestJson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const RequestJson& b = content[i];
    const std::string bf = fmt::format("{}.content[{}]", field, i);
    if (!b.is_object()) fail(bf, fmt::format("'{}' must be an object", bf), ApiCode::kInvalidType);
    const std::string type = read_text(require(b, "type", bf + ".type"), bf + ".type");
    if (type == "text") {
      check_fields(b, bf, {"type", "text", "cache_control", "citations"});
      if (find(b, "citations")) unsupported(bf + ".citations", "citations are not supported");
      text += read_text(require(b, "text", bf + ".text"), bf + ".text");
    } else if (type == "tool_use" && role == "assistant") {
      check_fields(b, bf, {"type", "id", "name", "input", "cache_control"});
      const std::string id = read_text(require(b, "id", bf + ".id"), bf + ".id");
      const std::string name = read_text(require(b, "name", bf + ".name"), bf + ".name");
      const RequestJson& input = require(b, "input", bf + ".input");
      if (!input.is_object())
        fail(bf + ".input", fmt::format("'{}.input' must be an object", bf), ApiCode::kInvalidType);
      calls.push_back(
          {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      check_fields(b, bf, {"type", "tool_use_id", "content", "is_error", "cache_control"});
      const std::string id = read_text(require(b, "tool_use_id", bf + ".tool_use_id"), bf + ".tool_use_id");
      std::string result = tool_result_text(b, bf);
      if (const RequestJson* is_error = find(b, "is_error")) {
        if (!is_error->is_boolean())
          fail(bf + ".is_error", fmt::format("'{}.is_error' must be true or false", bf),
               ApiCode::kInvalidType);
        if (is_error->get<bool>()) result = "Error: " + result;
      }
      results.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else if (type == "thinking" && role == "assistant") {
      check_fields(b, bf, {"type", "thinking", "signature"});
      thinking += read_text(require(b, "thinking", bf + ".thinking"), bf + ".thinking");
    } else if (type == "tool_use" || type == "tool_result" || type == "thinking") {
      fail(bf + ".type", fmt::format("'{}': a {} block cannot be in a {} message", bf, type, role));
    } else {
      unsupported(bf + ".type", fmt::format("'{}': content of type '{}' is not supported (graft takes text, "
                                            "tool_use, tool_result and thinking blocks)",
                                            bf, type));
    }
  }
  for (auto& r : results) out.push_back(std::move(r));
  if (role == "assistant") {
    RequestJson msg = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out.push_back(std::move(msg));
  } else if (!text.empty() || results.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

std::string anthropic_system(const RequestJson& system) {
  if (system.is_string()) return system.get<std::string>();
  if (!system.is_array())
    fail("system", "'system' must be a string or a list of text blocks", ApiCode::kInvalidType);
  std::string text;
  for (size_t i = 0; i < system.size(); ++i) {
    const RequestJson& b = system[i];
    const std::string bf = fmt::format("system[{}]", i);
    if (!b.is_object() || !b.contains("type") || b["type"] != "text")
      fail(bf, fmt::format("'{}' must be a text block", bf));
    check_fields(b, bf, {"type", "text", "cache_control", "citations"});
    if (find(b, "citations")) unsupported(bf + ".citations", "citations are not supported");
    if (!text.empty()) text += "\n\n";
    text += read_text(require(b, "text", bf + ".text"), bf + ".text");
  }
  return text;
}

RequestJson anthropic_tools(const RequestJson& tools) {
  if (!tools.is_array()) fail("tools", "'tools' must be a list", ApiCode::kInvalidType);
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const RequestJson& t = tools[i];
    const std::string f = fmt::format("tools[{}]", i);
    if (!t.is_object()) fail(f, fmt::format("'{}' must be an object", f), ApiCode::kInvalidType);
    if (const RequestJson* type = find(t, "type"); type && *type != "custom") {
      unsupported(f + ".type", fmt::format("'{}.type': graft runs no server tools; give a custom tool with "
                                           "name and input_schema",
                                           f));
    }
    check_fields(t, f, {"type", "name", "description", "input_schema", "cache_control"});
    const std::string name = read_text(require(t, "name", f + ".name"), f + ".name");
    if (name.empty()) fail(f + ".name", fmt::format("'{}.name' must not be empty", f));
    const RequestJson& schema = require(t, "input_schema", f + ".input_schema");
    if (!schema.is_object())
      fail(f + ".input_schema", fmt::format("'{}.input_schema' must be a JSON schema object", f),
           ApiCode::kInvalidType);
    RequestJson fn = {{"name", name}};
    if (const RequestJson* d = find(t, "description")) fn["description"] = read_text(*d, f + ".description");
    fn["parameters"] = schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

std::string anthropic_tool_choice(const RequestJson& choice) {
  if (!choice.is_object())
    fail("tool_choice", "'tool_choice' must be an object with a 'type'", ApiCode::kInvalidType);
  check_fields(choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"});
  const std::string type = read_text(require(choice, "type", "tool_choice.type"), "tool_choice.type");
  if (const RequestJson* p = find(choice, "disable_parallel_tool_use")) {
    if (!p->is_boolean())
      fail("tool_choice.disable_parallel_tool_use",
           "'tool_choice.disable_parallel_tool_use' must be true or false", ApiCode::kInvalidType);
    if (p->get<bool>())
      unsupported(
          "tool_choice.disable_parallel_tool_use",
          "'tool_choice.disable_parallel_tool_use' is not supported: graft cannot limit the model to one "
          "tool call");
  }
  if (type == "any" || type == "tool") {
    unsupported("tool_choice",
                fmt::format("'tool_choice' of type \"{}\" is not supported: {}", type, kForced));
  }
  if (type != "auto" && type != "none")
    fail("tool_choice.type",
         fmt::format("'tool_choice.type' must be auto, any, tool or none (got '{}')", type));
  return type;
}

void anthropic_all(const RequestJson& body, AnthropicKind kind, const std::vector<std::string>& extra,
                   RequestJson& chat) {
  const bool messages = kind == AnthropicKind::kMessages;
  if (messages) {
    check_top_level(body,
                    {"model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature",
                     "top_p", "top_k", "tools", "tool_choice", "metadata"},
                    {{"thinking", "graft cannot bound or switch the model's thinking per request"},
                     {"service_tier", "graft has one tier"},
                     {"container", "graft runs no containers"},
                     {"mcp_servers", "graft connects to no MCP servers"},
                     {"context_management", "graft does not edit the context"}},
                    extra);
  } else {
    check_top_level(body, {"model", "messages", "system", "tools", "tool_choice"},
                    {{"thinking", "graft cannot bound or switch the model's thinking per request"},
                     {"mcp_servers", "graft connects to no MCP servers"},
                     {"context_management", "graft does not edit the context"}},
                    extra);
  }
  chat = RequestJson::object();
  chat["model"] = read_text(require(body, "model", "model"), "model");
  RequestJson out = RequestJson::array();
  if (const RequestJson* system = find(body, "system")) {
    std::string text = anthropic_system(*system);
    if (!text.empty()) out.push_back({{"role", "system"}, {"content", text}});
  }
  const RequestJson& msgs = require(body, "messages", "messages");
  if (!msgs.is_array()) fail("messages", "'messages' must be a list", ApiCode::kInvalidType);
  if (msgs.empty()) fail("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs.size(); ++i) anthropic_message(msgs[i], fmt::format("messages[{}]", i), out);
  if (messages && msgs.back().is_object() && msgs.back().value("role", "") == "assistant") {
    const std::string f = fmt::format("messages[{}]", msgs.size() - 1);
    unsupported(f,
                fmt::format("'{}': a last assistant message (a prefill to continue) is not supported: graft "
                            "answers after the last user turn",
                            f));
  }
  chat["messages"] = out;
  std::string choice = "auto";
  if (const RequestJson* c = find(body, "tool_choice")) choice = anthropic_tool_choice(*c);
  if (const RequestJson* tools = find(body, "tools")) {
    RequestJson t = anthropic_tools(*tools);
    if (!t.empty() && choice != "none") chat["tools"] = t;
  }
  if (messages) {
    const RequestJson& max = require(body, "max_tokens", "max_tokens");
    if (!max.is_number_integer())
      fail("max_tokens", "'max_tokens' must be an integer", ApiCode::kInvalidType);
    chat["max_tokens"] = max;
    if (const RequestJson* stop = find(body, "stop_sequences")) {
      if (!stop->is_array())
        fail("stop_sequences", "'stop_sequences' must be a list of strings", ApiCode::kInvalidType);
      chat["stop"] = *stop;
    }
    if (const RequestJson* t = find(body, "temperature"); t && t->is_number() && t->get<double>() > 1) {
      fail("temperature", fmt::format("'temperature' must be between 0 and 1 (got {})", t->get<double>()));
    }
    for (const char* name : {"stream", "temperature", "top_p", "top_k"}) copy_if(body, name, chat);
    if (const RequestJson* meta = find(body, "metadata")) {
      if (!meta->is_object()) fail("metadata", "'metadata' must be an object", ApiCode::kInvalidType);
      check_fields(*meta, "metadata", {"user_id"});
      if (const RequestJson* user = find(*meta, "user_id"))
        chat["user"] = read_text(*user, "metadata.user_id");
    }
  } else {
    chat["max_tokens"] = 1;
  }
  for (const std::string& name : extra) copy_if(body, name.c_str(), chat);
}

// ---- Responses

RequestJson text_parts(const RequestJson& content, const std::string& field) {
  if (content.is_string()) return content;
  if (!content.is_array())
    fail(field, fmt::format("'{}' must be a string or a list of parts", field), ApiCode::kInvalidType);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const RequestJson& p = content[i];
    const std::string pf = fmt::format("{}[{}]", field, i);
    if (!p.is_object()) fail(pf, fmt::format("'{}' must be an object", pf), ApiCode::kInvalidType);
    const std::string type = read_text(require(p, "type", pf + ".type"), pf + ".type");
    if (type != "input_text" && type != "output_text") {
      unsupported(pf + ".type",
                  fmt::format("'{}': content of type '{}' is not supported (input_text and output_text only)",
                              pf, type));
    }
    check_fields(p, pf, {"type", "text", "annotations", "logprobs"});
    if (const RequestJson* a = find(p, "annotations"); a && !(a->is_array() && a->empty()))
      unsupported(pf + ".annotations", "annotations are not supported");
    text += read_text(require(p, "text", pf + ".text"), pf + ".text");
  }
  return text;
}

void input_items(const RequestJson& input, RequestJson& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) fail("input", "'input' must be a string or a list of items", ApiCode::kInvalidType);
  std::string reasoning;  // a reasoning item: the reasoning of the assistant message after it
  // Items of one assistant turn (message, function_call) make one assistant message.
  auto assistant = [&]() -> RequestJson& {
    if (out.empty() || out.back()["role"] != "assistant")
      out.push_back({{"role", "assistant"}, {"content", ""}});
    RequestJson& m = out.back();
    if (!reasoning.empty()) {
      m["reasoning_content"] = reasoning;
      reasoning.clear();
    }
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const RequestJson& item = input[i];
    const std::string f = fmt::format("input[{}]", i);
    if (!item.is_object()) fail(f, fmt::format("'{}' must be an object", f), ApiCode::kInvalidType);
    std::string type = "message";
    if (const RequestJson* t = find(item, "type")) type = read_text(*t, f + ".type");
    if (type == "message") {
      check_fields(item, f, {"type", "role", "content", "id", "status"});
      const std::string role = read_text(require(item, "role", f + ".role"), f + ".role");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        fail(f + ".role",
             fmt::format("'{}.role' must be user, assistant, system or developer (got '{}')", f, role));
      RequestJson text = text_parts(require(item, "content", f + ".content"), f + ".content");
      if (role == "assistant") {
        RequestJson& m = assistant();
        m["content"] = m["content"].get<std::string>() + text.get<std::string>();
      } else {
        out.push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
      }
    } else if (type == "function_call") {
      check_fields(item, f, {"type", "call_id", "name", "arguments", "id", "status"});
      const std::string id = read_text(require(item, "call_id", f + ".call_id"), f + ".call_id");
      const std::string name = read_text(require(item, "name", f + ".name"), f + ".name");
      const std::string args = read_text(require(item, "arguments", f + ".arguments"), f + ".arguments");
      RequestJson& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = RequestJson::array();
      m["tool_calls"].push_back(
          {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
      check_fields(item, f, {"type", "call_id", "output", "id", "status"});
      const std::string id = read_text(require(item, "call_id", f + ".call_id"), f + ".call_id");
      RequestJson text = text_parts(require(item, "output", f + ".output"), f + ".output");
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", text}});
    } else if (type == "reasoning") {
      check_fields(item, f, {"type", "id", "summary", "content", "encrypted_content", "status"});
      if (find(item, "encrypted_content"))
        unsupported(f + ".encrypted_content", "graft encrypts no reasoning");
      if (const RequestJson* c = find(item, "content")) {
        if (!c->is_array())
          fail(f + ".content", fmt::format("'{}.content' must be a list", f), ApiCode::kInvalidType);
        for (size_t k = 0; k < c->size(); ++k) {
          const std::string pf = fmt::format("{}.content[{}]", f, k);
          const RequestJson& p = (*c)[k];
          if (!p.is_object() || !p.contains("type") || p["type"] != "reasoning_text")
            fail(pf, fmt::format("'{}' must be a reasoning_text part", pf));
          reasoning += read_text(require(p, "text", pf + ".text"), pf + ".text");
        }
      }
    } else {
      unsupported(f + ".type",
                  fmt::format("'{}': items of type '{}' are not supported (message, function_call, "
                              "function_call_output and reasoning only)",
                              f, type));
    }
  }
}

RequestJson responses_tools(const RequestJson& tools) {
  if (!tools.is_array()) fail("tools", "'tools' must be a list", ApiCode::kInvalidType);
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const RequestJson& t = tools[i];
    const std::string f = fmt::format("tools[{}]", i);
    if (!t.is_object()) fail(f, fmt::format("'{}' must be an object", f), ApiCode::kInvalidType);
    const std::string type = read_text(require(t, "type", f + ".type"), f + ".type");
    if (type != "function")
      unsupported(
          f + ".type",
          fmt::format("'{}.type': graft runs no built-in tools ('{}'); give function tools", f, type));
    check_fields(t, f, {"type", "name", "description", "parameters", "strict"});
    const std::string name = read_text(require(t, "name", f + ".name"), f + ".name");
    if (name.empty()) fail(f + ".name", fmt::format("'{}.name' must not be empty", f));
    if (const RequestJson* s = find(t, "strict"); s && s->is_boolean() && s->get<bool>())
      unsupported(f + ".strict",
                  fmt::format("'{}.strict': graft has no constrained decoding to enforce the schema", f));
    RequestJson fn = {{"name", name}};
    if (const RequestJson* d = find(t, "description")) fn["description"] = read_text(*d, f + ".description");
    if (const RequestJson* p = find(t, "parameters")) {
      if (!p->is_object())
        fail(f + ".parameters", fmt::format("'{}.parameters' must be a JSON schema object", f),
             ApiCode::kInvalidType);
      fn["parameters"] = *p;
    }
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

void responses_all(const RequestJson& body, const RequestJson& history, const std::vector<std::string>& extra,
                   RequestJson& chat) {
  check_top_level(
      body,
      {"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p",
       "stream", "store", "previous_response_id", "metadata", "user", "parallel_tool_calls", "text",
       "truncation", "include"},
      {{"reasoning", "graft cannot set the model's reasoning effort"},
       {"background", "graft answers in the foreground"},
       {"top_logprobs", "the Responses API of graft returns no logprobs; use /v1/chat/completions"},
       {"prompt", "graft stores no prompt templates"},
       {"service_tier", "graft has one tier"},
       {"max_tool_calls", "graft cannot limit the model's tool calls"},
       {"conversation", "graft keeps no conversations; use previous_response_id"},
       {"stream_options", "graft has no stream options for responses"},
       {"safety_identifier", "graft has no safety checks"},
       {"prompt_cache_key", "graft's prefix cache needs no key"}},
      extra);
  chat = RequestJson::object();
  if (const RequestJson* m = find(body, "model")) chat["model"] = read_text(*m, "model");
  RequestJson messages = history.is_array() ? history : RequestJson::array();
  if (const RequestJson* ins = find(body, "instructions")) {
    // Instructions are not carried over from a previous response: they lead this request alone.
    messages.insert(messages.begin(),
                    RequestJson{{"role", "system"}, {"content", read_text(*ins, "instructions")}});
  }
  input_items(require(body, "input", "input"), messages);
  chat["messages"] = messages;
  std::string choice = "auto";
  if (const RequestJson* c = find(body, "tool_choice")) {
    if (c->is_object())
      unsupported("tool_choice", fmt::format("'tool_choice' naming a tool is not supported: {}", kForced));
    choice = read_text(*c, "tool_choice");
    if (choice == "required")
      unsupported("tool_choice", fmt::format("'tool_choice': \"required\" is not supported: {}", kForced));
    if (choice != "auto" && choice != "none")
      fail("tool_choice", fmt::format("'tool_choice' must be \"auto\" or \"none\" (got '{}')", choice));
  }
  if (const RequestJson* tools = find(body, "tools")) {
    RequestJson t = responses_tools(*tools);
    if (!t.empty() && choice != "none") chat["tools"] = t;
  }
  copy_if(body, "max_output_tokens", chat, "max_tokens");
  for (const char* name : {"temperature", "top_p", "stream", "user"}) copy_if(body, name, chat);
  if (const RequestJson* p = find(body, "parallel_tool_calls")) {
    if (!p->is_boolean())
      fail("parallel_tool_calls", "'parallel_tool_calls' must be true or false", ApiCode::kInvalidType);
    if (!p->get<bool>())
      unsupported("parallel_tool_calls",
                  "'parallel_tool_calls': false is not supported: graft cannot limit the "
                  "model to one tool call");
  }
  if (const RequestJson* s = find(body, "store"); s && !s->is_boolean())
    fail("store", "'store' must be true or false", ApiCode::kInvalidType);
  if (const RequestJson* m = find(body, "metadata")) {
    if (!m->is_object()) fail("metadata", "'metadata' must be an object", ApiCode::kInvalidType);
    for (const auto& [k, v] : m->items()) {
      if (!v.is_string())
        fail("metadata." + k, fmt::format("'metadata.{}' must be a string", k), ApiCode::kInvalidType);
    }
  }
  if (const RequestJson* t = find(body, "text")) {
    const RequestJson* format = t->is_object() ? find(*t, "format") : nullptr;
    if (!t->is_object()) fail("text", "'text' must be an object", ApiCode::kInvalidType);
    check_fields(*t, "text", {"format", "verbosity"});
    if (find(*t, "verbosity")) unsupported("text.verbosity", "graft cannot set the model's verbosity");
    if (format && !(format->is_object() && format->value("type", "") == "text"))
      unsupported("text.format",
                  "'text.format' other than {\"type\": \"text\"} is not supported: graft has no "
                  "constrained decoding yet");
  }
  if (const RequestJson* t = find(body, "truncation"); t && *t != "disabled")
    unsupported("truncation",
                "'truncation' other than \"disabled\" is not supported: graft does not drop input");
  if (const RequestJson* inc = find(body, "include"); inc && !(inc->is_array() && inc->empty()))
    unsupported("include", "'include' is not supported: graft has no extra output to include");
  for (const std::string& name : extra) copy_if(body, name.c_str(), chat);
}

template <typename Fn>
std::optional<ApiError> guarded(Fn fn) {
  try {
    fn();
  } catch (const FieldError& e) {
    return e.error;
  } catch (const RequestJson::exception& e) {
    return bad_request(fmt::format("cannot read the request: {}", e.what()));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> anthropic_to_chat(const RequestJson& body, AnthropicKind kind,
                                          const std::vector<std::string>& extra_fields, RequestJson& chat) {
  return guarded([&] { anthropic_all(body, kind, extra_fields, chat); });
}

RequestJson anthropic_error_json(const ApiError& error) {
  std::string type;
  switch (error.status()) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      type = error.status() < 500 ? "invalid_request_error" : "api_error";
      break;
  }
  return RequestJson{{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}};
}

std::string anthropic_stop_reason(FinishReason reason, bool tool_calls, const std::string& stop) {
  if (tool_calls) return "tool_use";
  if (!stop.empty()) return "stop_sequence";
  return reason == FinishReason::kLength ? "max_tokens" : "end_turn";
}

RequestJson anthropic_content(const RequestJson& message) {
  RequestJson blocks = RequestJson::array();
  if (const RequestJson* r = find(message, "reasoning_content"); r && !r->get<std::string>().empty())
    blocks.push_back({{"type", "thinking"}, {"thinking", *r}, {"signature", ""}});
  if (const RequestJson* c = find(message, "content"); c && !c->get<std::string>().empty())
    blocks.push_back({{"type", "text"}, {"text", *c}});
  if (const RequestJson* calls = find(message, "tool_calls")) {
    for (const RequestJson& call : *calls) {
      RequestJson input =
          RequestJson::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
      if (input.is_discarded() || !input.is_object()) input = RequestJson::object();
      blocks.push_back(
          {{"type", "tool_use"}, {"id", call["id"]}, {"name", call["function"]["name"]}, {"input", input}});
    }
  }
  return blocks;
}

std::optional<ApiError> responses_to_chat(const RequestJson& body, const RequestJson& history,
                                          const std::vector<std::string>& extra_fields, RequestJson& chat) {
  return guarded([&] { responses_all(body, history, extra_fields, chat); });
}

std::optional<ApiError> responses_input_messages(const RequestJson& input, RequestJson& messages) {
  messages = RequestJson::array();
  return guarded([&] { input_items(input, messages); });
}

RequestJson responses_output(const RequestJson& message, const std::string& id_seed) {
  RequestJson items = RequestJson::array();
  if (const RequestJson* r = find(message, "reasoning_content"); r && !r->get<std::string>().empty()) {
    items.push_back({{"type", "reasoning"},
                     {"id", "rs_" + id_seed},
                     {"summary", RequestJson::array()},
                     {"content", RequestJson::array({{{"type", "reasoning_text"}, {"text", *r}}})}});
  }
  if (const RequestJson* c = find(message, "content"); c && !c->get<std::string>().empty()) {
    items.push_back({{"type", "message"},
                     {"id", "msg_" + id_seed},
                     {"status", "completed"},
                     {"role", "assistant"},
                     {"content", RequestJson::array({{{"type", "output_text"},
                                                      {"text", *c},
                                                      {"annotations", RequestJson::array()},
                                                      {"logprobs", RequestJson::array()}}})}});
  }
  if (const RequestJson* calls = find(message, "tool_calls")) {
    for (size_t i = 0; i < calls->size(); ++i) {
      const RequestJson& call = (*calls)[i];
      items.push_back({{"type", "function_call"},
                       {"id", fmt::format("fc_{}_{}", id_seed, i)},
                       {"call_id", call["id"]},
                       {"name", call["function"]["name"]},
                       {"arguments", call["function"]["arguments"]},
                       {"status", "completed"}});
    }
  }
  return items;
}

RequestJson responses_usage(const Usage& usage) {
  return RequestJson{{"input_tokens", usage.prompt_tokens},
                     {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
                     {"output_tokens", usage.completion_tokens},
                     {"output_tokens_details", {{"reasoning_tokens", 0}}},
                     {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

std::string random_api_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += digits[rng() % 62];
  return id;
}

}  // namespace graft::server
