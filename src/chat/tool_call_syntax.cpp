#include "chat/tool_call_syntax.h"

#include <cctype>
#include <random>

#include "util/strings.h"

namespace graft {

namespace tool_call_syntax {

namespace {

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

}  // namespace

std::size_t skip_space(std::string_view s, std::size_t i) {
  while (i < s.size() && is_ascii_space(s[i])) ++i;
  return i;
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
    if (is_ascii_space(c) || c == '<' || c == '>' || c == '"') return false;
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

// <function=name><parameter=key>value</parameter>...</function>
std::optional<ChatJson> call_from_xml(std::string_view body) {
  constexpr std::string_view kFunction = "<function=", kParameter = "<parameter=";
  constexpr std::string_view kEndParameter = "</parameter>", kEndFunction = "</function>";
  std::string_view s = trim(body);
  if (!s.starts_with(kFunction)) return std::nullopt;
  std::size_t close = s.find('>');
  if (close == std::string_view::npos) return std::nullopt;
  std::string name(trim(s.substr(kFunction.size(), close - kFunction.size())));
  if (!valid_name(name)) return std::nullopt;
  ChatJson arguments = ChatJson::object();
  std::size_t i = close + 1;
  while (true) {
    i = skip_space(s, i);
    std::string_view rest = s.substr(i);
    if (rest.starts_with(kEndFunction)) {
      if (!trim(rest.substr(kEndFunction.size())).empty()) return std::nullopt;
      break;
    }
    if (!rest.starts_with(kParameter)) return std::nullopt;
    std::size_t key_end = rest.find('>');
    std::size_t value_end = rest.find(kEndParameter);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) {
      return std::nullopt;
    }
    std::string key(trim(rest.substr(kParameter.size(), key_end - kParameter.size())));
    std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
    if (value.starts_with("\n")) value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    if (key.empty()) return std::nullopt;
    arguments[key] = xml_parameter_value(value);
    i += value_end + kEndParameter.size();
  }
  return make_call(std::move(name), arguments.dump(), make_tool_call_id(ToolCallFormat::qwen_xml));
}

namespace {

// A reader of Gemma 4's argument syntax, into JSON; nullopt on anything else.
class GemmaValueReader {
 public:
  explicit GemmaValueReader(std::string_view s) : s_(s) {}
  std::size_t pos() const { return i_; }

  std::optional<ChatJson> value(int depth) {
    if (depth > 64) return std::nullopt;
    i_ = skip_space(s_, i_);
    std::string_view rest = s_.substr(i_);
    if (rest.starts_with(kGemmaQuote)) return quoted();
    if (rest.starts_with("{")) return object(depth);
    if (rest.starts_with("[")) return array(depth);
    // A bare literal runs to the next separator.
    std::size_t end = i_;
    while (end < s_.size() && s_[end] != ',' && s_[end] != '}' && s_[end] != ']') ++end;
    std::string_view word = trim(s_.substr(i_, end - i_));
    if (word.empty()) return std::nullopt;
    ChatJson j = parse_json(word);
    if (j.is_discarded() || j.is_object() || j.is_array() || j.is_string()) return std::nullopt;
    i_ = end;
    return j;
  }

  // {key:value,...}; keys bare (up to ':') or quoted.
  std::optional<ChatJson> object(int depth) {
    ChatJson out = ChatJson::object();
    ++i_;  // '{'
    i_ = skip_space(s_, i_);
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return out;
    }
    while (true) {
      i_ = skip_space(s_, i_);
      std::string key;
      if (s_.substr(i_).starts_with(kGemmaQuote)) {
        std::optional<ChatJson> k = quoted();
        if (!k) return std::nullopt;
        key = k->get<std::string>();
      } else {
        std::size_t colon = s_.find(':', i_);
        if (colon == std::string_view::npos) return std::nullopt;
        key = std::string(trim(s_.substr(i_, colon - i_)));
        if (!valid_name(key) || key.find_first_of(",{}[]") != std::string::npos) return std::nullopt;
        i_ = colon;
      }
      i_ = skip_space(s_, i_);
      if (i_ >= s_.size() || s_[i_] != ':') return std::nullopt;
      ++i_;
      std::optional<ChatJson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out[key] = std::move(*v);
      i_ = skip_space(s_, i_);
      if (i_ >= s_.size()) return std::nullopt;
      if (s_[i_] == '}') {
        ++i_;
        return out;
      }
      if (s_[i_] != ',') return std::nullopt;
      ++i_;
    }
  }

 private:
  std::optional<ChatJson> quoted() {
    i_ += kGemmaQuote.size();
    std::size_t end = s_.find(kGemmaQuote, i_);
    if (end == std::string_view::npos) return std::nullopt;
    ChatJson text = std::string(s_.substr(i_, end - i_));
    i_ = end + kGemmaQuote.size();
    return text;
  }

  std::optional<ChatJson> array(int depth) {
    ChatJson out = ChatJson::array();
    ++i_;  // '['
    i_ = skip_space(s_, i_);
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return out;
    }
    while (true) {
      std::optional<ChatJson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      i_ = skip_space(s_, i_);
      if (i_ >= s_.size()) return std::nullopt;
      if (s_[i_] == ']') {
        ++i_;
        return out;
      }
      if (s_[i_] != ',') return std::nullopt;
      ++i_;
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<ChatJson> call_from_gemma(std::string_view body) {
  constexpr std::string_view kCall = "call:";
  std::string_view t = trim(body);
  if (!t.starts_with(kCall)) return std::nullopt;
  std::size_t brace = t.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  std::string name(trim(t.substr(kCall.size(), brace - kCall.size())));
  if (!valid_name(name)) return std::nullopt;
  GemmaValueReader reader(t.substr(brace));
  std::optional<ChatJson> arguments = reader.object(0);
  if (!arguments || !trim(t.substr(brace + reader.pos())).empty()) return std::nullopt;
  return make_call(std::move(name), arguments->dump(), make_tool_call_id(ToolCallFormat::gemma4));
}

namespace {

constexpr std::string_view kCdataOpen = "<![CDATA[", kCdataClose = "]]>";

}  // namespace

std::size_t minicpm5_call_close(std::string_view s) {
  std::size_t i = 0;
  while (true) {
    std::size_t close = s.find(kMiniCpmCallClose, i);
    std::size_t cdata = s.find(kCdataOpen, i);
    if (cdata == std::string_view::npos || close < cdata) return close;
    std::size_t cdata_end = s.find(kCdataClose, cdata + kCdataOpen.size());
    if (cdata_end == std::string_view::npos) return std::string_view::npos;
    i = cdata_end + kCdataClose.size();
  }
}

std::optional<ChatJson> call_from_minicpm5(std::string_view body) {
  constexpr std::string_view kParam = "<param name=\"", kEndParam = "</param>";
  std::size_t name_end = body.find("\">");
  if (name_end == std::string_view::npos) return std::nullopt;
  std::string name(body.substr(0, name_end));
  if (!valid_name(name)) return std::nullopt;
  ChatJson arguments = ChatJson::object();
  std::string_view s = body.substr(name_end + 2);
  std::size_t i = 0;
  while (true) {
    i = skip_space(s, i);
    std::string_view rest = s.substr(i);
    if (rest.starts_with(kMiniCpmCallClose)) {
      if (!trim(rest.substr(kMiniCpmCallClose.size())).empty()) return std::nullopt;
      break;
    }
    if (!rest.starts_with(kParam)) return std::nullopt;
    std::size_t key_end = rest.find("\">", kParam.size());
    if (key_end == std::string_view::npos) return std::nullopt;
    std::string key(rest.substr(kParam.size(), key_end - kParam.size()));
    if (key.empty() || key.find_first_of("<>\"") != std::string::npos || arguments.contains(key))
      return std::nullopt;
    std::string_view value = rest.substr(key_end + 2);
    std::size_t consumed = 0;
    if (value.starts_with(kCdataOpen)) {
      std::size_t cdata_end = value.find(kCdataClose, kCdataOpen.size());
      if (cdata_end == std::string_view::npos) return std::nullopt;
      arguments[key] = std::string(value.substr(kCdataOpen.size(), cdata_end - kCdataOpen.size()));
      consumed = cdata_end + kCdataClose.size();
      if (!value.substr(consumed).starts_with(kEndParam)) return std::nullopt;
    } else {
      consumed = value.find(kEndParam);
      if (consumed == std::string_view::npos) return std::nullopt;
      if (value.substr(0, consumed).find('<') != std::string_view::npos) return std::nullopt;
      arguments[key] = xml_parameter_value(value.substr(0, consumed));
    }
    i += key_end + 2 + consumed + kEndParam.size();
  }
  return make_call(std::move(name), arguments.dump(), make_tool_call_id(ToolCallFormat::minicpm5));
}

// The body between <tool_call> and </tool_call>: JSON or the XML form.
std::optional<ChatJson> call_from_tagged_body(std::string_view body, ToolCallFormat format) {
  if (format == ToolCallFormat::gemma4) return call_from_gemma(body);
  if (format == ToolCallFormat::minicpm5) return call_from_minicpm5(body);
  std::string_view t = trim(body);
  if (t.starts_with("<function=")) return call_from_xml(t);
  if (t.empty() || t[0] != '{' || json_value_end(t) != t.size()) return std::nullopt;
  ChatJson j = parse_json(t);
  if (j.is_discarded()) return std::nullopt;
  return call_from_json(j, format);
}

}  // namespace tool_call_syntax

using namespace tool_call_syntax;

ToolCallFormat detect_tool_call_format(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kGemmaCallOpen)) return ToolCallFormat::gemma4;
  if (has(kMistralCalls)) return ToolCallFormat::mistral;
  if (has(kMiniCpmCallOpen)) return ToolCallFormat::minicpm5;
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
    case ToolCallFormat::gemma4:
      return "gemma4";
    case ToolCallFormat::minicpm5:
      return "minicpm5";
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

}  // namespace graft
