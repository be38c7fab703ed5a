#include "chat/tool_calls.h"

#include <optional>

#include "chat/tool_call_syntax.h"
#include "util/strings.h"
#include "util/utf8.h"

namespace graft {

namespace {

using namespace tool_call_syntax;

// The length of the longest end of `text` that could be the start of `marker`.
std::size_t partial_marker(std::string_view text, std::string_view marker) {
  for (std::size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

// --- the state machine --------------------------------------------------------------

StreamingOutputParser::StreamingOutputParser(ToolCallFormat format, bool thinking, bool thinking_open)
    : format_(format),
      state_(thinking ? (thinking_open ? State::reasoning : State::start) : State::content),
      reasoning_close_(kThinkClose) {}

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

// Before anything: does the reply open with <think>, or Gemma 4's thought
// channel (<|channel>thought)?
bool StreamingOutputParser::step_start(bool at_end) {
  constexpr std::string_view kThought = "thought";
  std::size_t i = skip_space(pending_);
  std::string_view rest = std::string_view(pending_).substr(i);
  if (rest.starts_with(kThinkOpen)) {
    pending_.erase(0, i + kThinkOpen.size());
    state_ = State::reasoning;
    return true;
  }
  if (rest.starts_with(kGemmaChannelOpen)) {
    std::string_view name = rest.substr(kGemmaChannelOpen.size());
    if (!at_end && name.size() < kThought.size() && kThought.starts_with(name)) return false;
    std::size_t skip = kGemmaChannelOpen.size() + (name.starts_with(kThought) ? kThought.size() : 0);
    pending_.erase(0, i + skip);
    reasoning_close_ = kGemmaChannelClose;
    state_ = State::reasoning;
    return true;
  }
  if (!at_end && (kThinkOpen.starts_with(rest) || kGemmaChannelOpen.starts_with(rest))) return false;
  state_ = State::content;
  return true;
}

bool StreamingOutputParser::step_reasoning(bool at_end) {
  std::size_t close = pending_.find(reasoning_close_);
  if (close != std::string::npos) {
    emit_reasoning(std::string_view(pending_).substr(0, close), true);
    pending_.erase(0, close + reasoning_close_.size());
    state_ = State::content;
    drop_leading_whitespace_ = true;
    return true;
  }
  std::size_t n =
      at_end ? pending_.size()
             : utf8::whole_prefix(pending_, pending_.size() - partial_marker(pending_, reasoning_close_));
  if (n > 0 || at_end) emit_reasoning(std::string_view(pending_).substr(0, n), at_end);
  pending_.erase(0, n);
  return false;
}

bool StreamingOutputParser::step_content(bool at_end) {
  if (format_ == ToolCallFormat::llama3_json && !content_started_) {
    // A Llama 3 tool call is the whole reply: a JSON object, maybe after <|python_tag|>.
    std::string_view rest = std::string_view(pending_).substr(skip_space(pending_));
    if (rest.empty() && !at_end) return false;
    if (!rest.empty() && (rest[0] == '{' || rest.starts_with(kPythonTag))) {
      state_ = State::json_call;
      return true;
    }
    if (!rest.empty() && !at_end && kPythonTag.starts_with(rest)) return false;
    content_started_ = true;
  }
  std::string_view marker;
  if (format_ == ToolCallFormat::hermes || format_ == ToolCallFormat::qwen_xml) marker = kToolCallOpen;
  if (format_ == ToolCallFormat::mistral) marker = kMistralCalls;
  if (format_ == ToolCallFormat::gemma4) marker = kGemmaCallOpen;
  if (format_ == ToolCallFormat::minicpm5) marker = kMiniCpmCallOpen;
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
  std::size_t n = at_end ? pending_.size() : utf8::whole_prefix(pending_, pending_.size() - keep);
  if (n == 0) return false;
  emit_content(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return false;
}

bool StreamingOutputParser::step_tagged_call(bool at_end) {
  // MiniCPM5's closing marker ends the call's syntax, so it stays in the body.
  const bool minicpm5 = format_ == ToolCallFormat::minicpm5;
  const std::string_view close_marker = format_ == ToolCallFormat::gemma4 ? kGemmaCallClose
                                        : minicpm5                        ? std::string_view()
                                                                          : kToolCallClose;
  std::size_t close = minicpm5 ? minicpm5_call_close(pending_) : pending_.find(close_marker);
  if (minicpm5 && close != std::string::npos) close += kMiniCpmCallClose.size();
  if (close == std::string::npos && !at_end) return false;
  // At the end, an unclosed call still counts if its body is a whole call.
  std::string_view body =
      std::string_view(pending_).substr(0, close == std::string::npos ? pending_.size() : close);
  std::size_t consumed = close == std::string::npos ? pending_.size() : close + close_marker.size();
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
    while (separators < s.size() && (s[separators] == ';' || is_ascii_space(s[separators]))) ++separators;
  }
  std::size_t i = separators;
  if (s.substr(i).starts_with(kPythonTag)) i = skip_space(s, i + kPythonTag.size());
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
  while (body_end > 0 && is_ascii_space(text[body_end - 1])) --body_end;
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
  while (body_end > 0 && is_ascii_space(text[body_end - 1])) --body_end;
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
