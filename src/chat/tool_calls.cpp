#include "chat/tool_calls.h"

#include <cctype>
#include <optional>
#include <random>

namespace graft {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::size_t skip_space(std::string_view s, std::size_t i = 0) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view trim(std::string_view s) {
  std::size_t b = skip_space(s);
  std::size_t e = s.size();
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The length of the longest end of `text` that could be the start of `marker`.
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

// The longest prefix of s[0, n) that does not end inside a UTF-8 character,
// so that a piece cut mid-character is never passed on half.
std::size_t whole_characters(std::string_view s, std::size_t n) {
  std::size_t start = n;  // the start of the last character before n
  while (start > 0 && n - start < 4 && (static_cast<unsigned char>(s[start - 1]) & 0xC0) == 0x80) --start;
  if (start == 0) return n;
  unsigned char lead = static_cast<unsigned char>(s[start - 1]);
  std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return (n - (start - 1) < length) ? start - 1 : n;
}

// Where the JSON object or array opening s[0] ends (one past its closing
// bracket), or nullopt while it is unfinished.
std::optional<std::size_t> json_value_end(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      ++depth;
    else if ((c == '}' || c == ']') && --depth == 0)
      return i + 1;
  }
  return std::nullopt;
}

// JSON from model text; discarded when invalid or nested deeper than
// anything a tool call needs (deep nesting would only cost stack later).
ChatJson parse_json(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '{' || c == '[') && ++depth > 128) {
      return ChatJson(ChatJson::value_t::discarded);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return ChatJson::parse(text, nullptr, false);
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name)
    if (is_space(c) || c == '<' || c == '>' || c == '"') return false;
  return true;
}

bool is_alnum_id(const std::string& id, std::size_t length) {
  if (id.size() != length) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}

ChatJson make_call(std::string name, std::string arguments, std::string id) {
  return ChatJson{{"id", std::move(id)},
                  {"type", "function"},
                  {"function", {{"name", std::move(name)}, {"arguments", std::move(arguments)}}}};
}

// {"name": ..., "arguments"|"parameters": {...} or "<JSON text>"} as a call.
std::optional<ChatJson> call_from_json(const ChatJson& j, ToolCallFormat format) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || !valid_name(name->get<std::string>())) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  std::string arguments = "{}";
  if (args != j.end()) {
    if (args->is_object()) {
      arguments = args->dump();
    } else if (args->is_string()) {
      ChatJson parsed = parse_json(args->get<std::string>());
      if (parsed.is_discarded() || !parsed.is_object()) return std::nullopt;
      arguments = args->get<std::string>();
    } else {
      return std::nullopt;
    }
  }
  std::string id;
  auto given = j.find("id");
  if (format == ToolCallFormat::mistral && given != j.end() && given->is_string() &&
      is_alnum_id(given->get<std::string>(), 9)) {
    id = given->get<std::string>();
  } else {
    id = make_tool_call_id(format);
  }
  return make_call(name->get<std::string>(), std::move(arguments), std::move(id));
}

// A parameter value of the XML form: JSON when it reads as a JSON number,
// literal, object or array; a string otherwise.
ChatJson xml_parameter_value(std::string_view text) {
  std::string_view t = trim(text);
  if (!t.empty() && t[0] != '"') {
    ChatJson parsed = parse_json(t);
    if (!parsed.is_discarded()) return parsed;
  }
  return std::string(text);
}

// <function=name><parameter=key>value</parameter>...</function>
std::optional<ChatJson> call_from_xml(std::string_view body) {
  constexpr std::string_view kFunction = "<function=", kParameter = "<parameter=";
  constexpr std::string_view kEndParameter = "</parameter>", kEndFunction = "</function>";
  std::string_view s = trim(body);
  if (!starts_with(s, kFunction)) return std::nullopt;
  std::size_t close = s.find('>');
  if (close == std::string_view::npos) return std::nullopt;
  std::string name(trim(s.substr(kFunction.size(), close - kFunction.size())));
  if (!valid_name(name)) return std::nullopt;
  ChatJson arguments = ChatJson::object();
  std::size_t i = close + 1;
  while (true) {
    i = skip_space(s, i);
    std::string_view rest = s.substr(i);
    if (starts_with(rest, kEndFunction)) {
      if (!trim(rest.substr(kEndFunction.size())).empty()) return std::nullopt;
      break;
    }
    if (!starts_with(rest, kParameter)) return std::nullopt;
    std::size_t key_end = rest.find('>');
    std::size_t value_end = rest.find(kEndParameter);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) {
      return std::nullopt;
    }
    std::string key(trim(rest.substr(kParameter.size(), key_end - kParameter.size())));
    std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
    if (starts_with(value, "\n")) value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    if (key.empty()) return std::nullopt;
    arguments[key] = xml_parameter_value(value);
    i += value_end + kEndParameter.size();
  }
  return make_call(std::move(name), arguments.dump(), make_tool_call_id(ToolCallFormat::qwen_xml));
}

// The body between <tool_call> and </tool_call>: JSON or the XML form.
std::optional<ChatJson> call_from_tagged_body(std::string_view body, ToolCallFormat format) {
  std::string_view t = trim(body);
  if (starts_with(t, "<function=")) return call_from_xml(t);
  if (t.empty() || t[0] != '{' || json_value_end(t) != t.size()) return std::nullopt;
  ChatJson j = parse_json(t);
  if (j.is_discarded()) return std::nullopt;
  return call_from_json(j, format);
}

}  // namespace

ToolCallFormat detect_tool_call_format(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kMistralCalls)) return ToolCallFormat::mistral;
  if (has(kToolCallOpen)) return has("<function=") ? ToolCallFormat::qwen_xml : ToolCallFormat::hermes;
  if (has("<|start_header_id|>") && (has(kPythonTag) || has("\"parameters\"")))
    return ToolCallFormat::llama3_json;
  return ToolCallFormat::none;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::none:
      return "none";
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::llama3_json:
      return "llama3_json";
    case ToolCallFormat::mistral:
      return "mistral";
    case ToolCallFormat::qwen_xml:
      return "qwen_xml";
  }
  return "none";
}

std::string make_tool_call_id(ToolCallFormat format) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  bool mistral = format == ToolCallFormat::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(rng)];
  return id;
}

// --- the state machine --------------------------------------------------------------

StreamingOutputParser::StreamingOutputParser(ToolCallFormat format, bool thinking, bool thinking_open)
    : format_(format),
      state_(thinking ? (thinking_open ? State::reasoning : State::start) : State::content) {}

std::vector<ChatJson> StreamingOutputParser::push(std::string_view piece) {
  pending_.append(piece);
  run(false);
  return std::exchange(out_, {});
}

std::vector<ChatJson> StreamingOutputParser::finish() {
  run(true);
  if (state_ == State::content && !held_whitespace_.empty() && !drop_leading_whitespace_) {
    out_.push_back(ChatJson{{"content", held_whitespace_}});
  }
  held_whitespace_.clear();
  return std::exchange(out_, {});
}

void StreamingOutputParser::run(bool at_end) {
  while (true) {
    bool progressed = false;
    switch (state_) {
      case State::start:
        progressed = step_start(at_end);
        break;
      case State::reasoning:
        progressed = step_reasoning(at_end);
        break;
      case State::content:
        progressed = step_content(at_end);
        break;
      case State::tagged_call:
        progressed = step_tagged_call(at_end);
        break;
      case State::mistral_call:
        progressed = step_mistral_call(at_end);
        break;
      case State::json_call:
        progressed = step_json_call(at_end);
        break;
    }
    if (!progressed) return;
  }
}

// Before anything: does the reply open with <think>?
bool StreamingOutputParser::step_start(bool at_end) {
  std::size_t i = skip_space(pending_);
  std::string_view rest = std::string_view(pending_).substr(i);
  if (starts_with(rest, kThinkOpen)) {
    pending_.erase(0, i + kThinkOpen.size());
    state_ = State::reasoning;
    return true;
  }
  if (!at_end && starts_with(kThinkOpen, rest)) return false;  // still could be
  state_ = State::content;
  return true;
}

bool StreamingOutputParser::step_reasoning(bool at_end) {
  std::size_t close = pending_.find(kThinkClose);
  if (close != std::string::npos) {
    emit_reasoning(std::string_view(pending_).substr(0, close), true);
    pending_.erase(0, close + kThinkClose.size());
    state_ = State::content;
    drop_leading_whitespace_ = true;
    return true;
  }
  std::size_t n = at_end
                      ? pending_.size()
                      : whole_characters(pending_, pending_.size() - partial_marker(pending_, kThinkClose));
  if (n > 0 || at_end) emit_reasoning(std::string_view(pending_).substr(0, n), at_end);
  pending_.erase(0, n);
  return false;
}

bool StreamingOutputParser::step_content(bool at_end) {
  if (format_ == ToolCallFormat::llama3_json && !content_started_) {
    // A Llama 3 tool call is the whole reply: a JSON object, maybe after <|python_tag|>.
    std::string_view rest = std::string_view(pending_).substr(skip_space(pending_));
    if (rest.empty() && !at_end) return false;
    if (!rest.empty() && (rest[0] == '{' || starts_with(rest, kPythonTag))) {
      state_ = State::json_call;
      return true;
    }
    if (!rest.empty() && !at_end && starts_with(kPythonTag, rest)) return false;
    content_started_ = true;
  }
  std::string_view marker;
  if (format_ == ToolCallFormat::hermes || format_ == ToolCallFormat::qwen_xml) marker = kToolCallOpen;
  if (format_ == ToolCallFormat::mistral) marker = kMistralCalls;
  if (!marker.empty()) {
    std::size_t at = pending_.find(marker);
    if (at != std::string::npos) {
      emit_content(std::string_view(pending_).substr(0, at));
      call_prefix_ = held_whitespace_ + std::string(marker);
      held_whitespace_.clear();
      pending_.erase(0, at + marker.size());
      state_ = format_ == ToolCallFormat::mistral ? State::mistral_call : State::tagged_call;
      return true;
    }
  }
  std::size_t keep = (at_end || marker.empty()) ? 0 : partial_marker(pending_, marker);
  std::size_t n = at_end ? pending_.size() : whole_characters(pending_, pending_.size() - keep);
  if (n == 0) return false;
  emit_content(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return false;
}

bool StreamingOutputParser::step_tagged_call(bool at_end) {
  std::size_t close = pending_.find(kToolCallClose);
  if (close == std::string::npos && !at_end) return false;
  // At the end, an unclosed call still counts if its body is a whole call.
  std::string_view body =
      std::string_view(pending_).substr(0, close == std::string::npos ? pending_.size() : close);
  std::size_t consumed = close == std::string::npos ? pending_.size() : close + kToolCallClose.size();
  if (std::optional<ChatJson> call = call_from_tagged_body(body, format_)) {
    emit_call(std::move(*call));
  } else {
    malformed(call_prefix_ + pending_.substr(0, consumed));
  }
  pending_.erase(0, consumed);
  call_prefix_.clear();
  state_ = State::content;
  return true;
}

bool StreamingOutputParser::step_mistral_call(bool at_end) {
  std::string_view s = pending_;
  std::size_t i = skip_space(s);
  auto give_up = [&](std::size_t consumed) {
    malformed(call_prefix_ + pending_.substr(0, consumed));
    pending_.erase(0, consumed);
    call_prefix_.clear();
    state_ = State::content;
    return true;
  };
  if (i == s.size()) return at_end ? give_up(s.size()) : false;
  std::vector<ChatJson> calls;
  std::size_t consumed = 0;
  if (s[i] == '[' || s[i] == '{') {
    // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]
    std::optional<std::size_t> end = json_value_end(s.substr(i));
    if (!end) return at_end ? give_up(s.size()) : false;
    consumed = i + *end;
    ChatJson j = parse_json(s.substr(i, *end));
    if (j.is_object()) j = ChatJson::array({j});
    if (j.is_discarded() || !j.is_array() || j.empty()) return give_up(consumed);
    for (const ChatJson& element : j) {
      std::optional<ChatJson> call = call_from_json(element, format_);
      if (!call) return give_up(consumed);
      calls.push_back(std::move(*call));
    }
  } else {
    // [TOOL_CALLS]name[ARGS]{...}, optionally name[CALL_ID]id[ARGS]{...}
    std::size_t args = s.find(kMistralArgs, i);
    if (args == std::string_view::npos) return at_end ? give_up(s.size()) : false;
    std::size_t j = skip_space(s, args + kMistralArgs.size());
    if (j == s.size()) return at_end ? give_up(s.size()) : false;
    if (s[j] != '{') return give_up(j);
    std::optional<std::size_t> end = json_value_end(s.substr(j));
    if (!end) return at_end ? give_up(s.size()) : false;
    consumed = j + *end;
    std::string_view head = s.substr(i, args - i);
    std::string id;
    if (std::size_t c = head.find(kMistralCallId); c != std::string_view::npos) {
      id = std::string(trim(head.substr(c + kMistralCallId.size())));
      head = head.substr(0, c);
    }
    ChatJson object = parse_json(s.substr(j, *end));
    std::string name(trim(head));
    if (object.is_discarded() || !object.is_object() || !valid_name(name)) return give_up(consumed);
    calls.push_back(make_call(name, object.dump(), is_alnum_id(id, 9) ? id : make_tool_call_id(format_)));
  }
  for (ChatJson& call : calls) emit_call(std::move(call));
  pending_.erase(0, consumed);
  call_prefix_.clear();
  state_ = State::content;
  return true;
}

bool StreamingOutputParser::step_json_call(bool at_end) {
  std::string_view s = pending_;
  std::size_t separators = skip_space(s);
  if (tool_call_count_ > 0) {  // between calls: whitespace and semicolons
    while (separators < s.size() && (s[separators] == ';' || is_space(s[separators]))) ++separators;
  }
  std::size_t i = separators;
  if (starts_with(s.substr(i), kPythonTag)) i = skip_space(s, i + kPythonTag.size());
  auto as_content = [&] {  // not (or no more) a call: the rest is content, as written
    content_started_ = true;
    state_ = State::content;
    if (tool_call_count_ > 0) pending_.erase(0, separators);
    return true;
  };
  if (i == s.size()) return at_end ? as_content() : false;
  if (s[i] != '{') return as_content();
  std::optional<std::size_t> end = json_value_end(s.substr(i));
  if (!end) return at_end ? as_content() : false;
  ChatJson j = parse_json(s.substr(i, *end));
  std::optional<ChatJson> call = j.is_discarded() ? std::nullopt : call_from_json(j, format_);
  if (!call) return as_content();
  emit_call(std::move(*call));
  pending_.erase(0, i + *end);
  return true;
}

void StreamingOutputParser::emit_reasoning(std::string_view text, bool final_piece) {
  if (!reasoning_started_) text.remove_prefix(skip_space(text));
  std::size_t body_end = text.size();
  while (body_end > 0 && is_space(text[body_end - 1])) --body_end;
  if (body_end > 0) {
    reasoning_started_ = true;
    out_.push_back(ChatJson{{"reasoning_content", held_whitespace_ + std::string(text.substr(0, body_end))}});
    held_whitespace_.assign(text.substr(body_end));
  } else if (reasoning_started_) {
    held_whitespace_.append(text);
  }
  if (final_piece) held_whitespace_.clear();  // whitespace before </think> is dropped
}

void StreamingOutputParser::emit_content(std::string_view text) {
  if (drop_leading_whitespace_) {
    text.remove_prefix(skip_space(text));
    if (text.empty()) return;
    drop_leading_whitespace_ = false;
  }
  std::size_t body_end = text.size();
  while (body_end > 0 && is_space(text[body_end - 1])) --body_end;
  if (body_end == 0) {
    held_whitespace_.append(text);
    return;
  }
  content_started_ = true;
  out_.push_back(ChatJson{{"content", held_whitespace_ + std::string(text.substr(0, body_end))}});
  held_whitespace_.assign(text.substr(body_end));
}

void StreamingOutputParser::emit_call(ChatJson call) {
  ChatJson delta = ChatJson{{"index", tool_call_count_++},
                            {"id", call["id"]},
                            {"type", "function"},
                            {"function", call["function"]}};
  out_.push_back(ChatJson{{"tool_calls", ChatJson::array({std::move(delta)})}});
  held_whitespace_.clear();
  drop_leading_whitespace_ = true;
  content_started_ = true;
}

void StreamingOutputParser::malformed(std::string_view raw) {
  emit_content(raw);
}

ChatJson assistant_message_json(const ParsedMessage& message) {
  ChatJson out = ChatJson{{"role", "assistant"}};
  bool calls = !message.tool_calls.empty();
  out["content"] = (calls && message.content.empty()) ? ChatJson(nullptr) : ChatJson(message.content);
  if (!message.reasoning_content.empty()) out["reasoning_content"] = message.reasoning_content;
  if (calls) out["tool_calls"] = message.tool_calls;
  return out;
}

ParsedMessage parse_model_output(std::string_view text, ToolCallFormat format, bool thinking,
                                 bool thinking_open) {
  StreamingOutputParser parser(format, thinking, thinking_open);
  std::vector<ChatJson> deltas = parser.push(text);
  for (ChatJson& d : parser.finish()) deltas.push_back(std::move(d));
  ParsedMessage message;
  for (const ChatJson& d : deltas) {
    if (d.contains("content")) message.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content"))
      message.reasoning_content += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const ChatJson& call : d["tool_calls"]) {
        message.tool_calls.push_back(
            ChatJson{{"id", call["id"]}, {"type", "function"}, {"function", call["function"]}});
      }
    }
  }
  return message;
}

}  // namespace graft
