#include "server/openai_params.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "server/openai_fields.h"

namespace graft::server {

namespace {

// Thrown by the readers below and caught in read_openai_request: the request
// is answered with this 400.
struct FieldError {
  ApiError error;
};

[[noreturn]] void fail(const std::string& field, const std::string& message) {
  throw FieldError{bad_request(message, field, ApiCode::kInvalidValue)};
}

// A valid value that asks for something graft does not do.
[[noreturn]] void unsupported(const std::string& field, const std::string& message) {
  throw FieldError{bad_request(message, field, ApiCode::kUnsupportedValue)};
}

const RequestJson* find(const RequestJson& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> read_number(const RequestJson& body, const std::string& name, double min, double max) {
  const RequestJson* v = find(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(name, fmt::format("'{}' must be a number", name));
  double x = v->get<double>();
  if (!std::isfinite(x)) fail(name, fmt::format("'{}' must be a finite number", name));
  if (x < min || x > max)
    fail(name, fmt::format("'{}' must be between {} and {} (got {})", name, min, max, x));
  return x;
}

std::optional<int64_t> read_integer(const RequestJson& body, const std::string& name, int64_t min,
                                    int64_t max) {
  const RequestJson* v = find(body, name);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                         : v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    fail(name, fmt::format("'{}' must be an integer", name));
  }
  if (x < min || x > max) {
    if (max == std::numeric_limits<int64_t>::max())
      fail(name, fmt::format("'{}' must be at least {} (got {})", name, min, x));
    fail(name, fmt::format("'{}' must be between {} and {} (got {})", name, min, max, x));
  }
  return x;
}

std::optional<bool> read_bool(const RequestJson& body, const std::string& name) {
  const RequestJson* v = find(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(name, fmt::format("'{}' must be true or false", name));
  return v->get<bool>();
}

std::optional<std::string> read_string(const RequestJson& body, const std::string& name) {
  const RequestJson* v = find(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(name, fmt::format("'{}' must be a string", name));
  return v->get<std::string>();
}

std::vector<TokenId> read_token_ids(const RequestJson& array, const std::string& field, int n_vocab) {
  std::vector<TokenId> ids;
  for (size_t i = 0; i < array.size(); ++i) {
    const auto& t = array[i];
    if (!t.is_number_integer()) fail(field, fmt::format("'{}' must hold token ids (integers)", field));
    int64_t id = t.get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      fail(field, fmt::format("'{}[{}]' = {} is not a token id (the vocabulary has {} tokens)", field, i, id,
                              n_vocab));
    }
    ids.push_back(static_cast<TokenId>(id));
  }
  return ids;
}

void read_sampling(const RequestJson& body, int n_vocab, GenerationRequest& g) {
  SamplingOptions& s = g.sampling;
  if (auto v = read_number(body, "temperature", 0, 2)) s.temperature = static_cast<float>(*v);
  if (auto v = read_number(body, "top_p", 0, 1)) s.top_p = static_cast<float>(*v);
  if (auto v = read_integer(body, "top_k", -1, 1 << 20)) s.top_k = static_cast<int>(*v);
  if (auto v = read_number(body, "min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = read_number(body, "typical_p", 0, 1)) s.typical_p = static_cast<float>(*v);
  if (auto v = read_number(body, "xtc_probability", 0, 1)) s.xtc_probability = static_cast<float>(*v);
  if (auto v = read_number(body, "xtc_threshold", 0, 1)) s.xtc_threshold = static_cast<float>(*v);
  if (auto v = read_number(body, "presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = read_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*v);
  for (const char* name : {"repetition_penalty", "repeat_penalty"}) {
    if (auto v = read_number(body, name, 0.01, 10)) s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = read_integer(body, "repeat_last_n", -1, 1 << 20)) s.penalty_last_n = static_cast<int>(*v);
  if (auto v = read_integer(body, "seed", std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*v) & 0xFFFFFFFFull;
    if (s.seed == 0xFFFFFFFFull) s.seed = 0xFFFFFFFEull;  // the all-ones seed means "random" to the sampler
    s.has_seed = true;
  }
  if (const RequestJson* bias = find(body, "logit_bias")) {
    if (!bias->is_object()) fail("logit_bias", "'logit_bias' must map token ids to numbers");
    for (const auto& [key, value] : bias->items()) {
      size_t end = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &end);
      } catch (const std::exception&) {
        end = 0;
      }
      if (end != key.size() || id < 0 || id >= n_vocab) {
        fail("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id (0..{})", key, n_vocab - 1));
      }
      if (!value.is_number() || !std::isfinite(value.get<double>()) || std::fabs(value.get<double>()) > 100) {
        fail("logit_bias", fmt::format("'logit_bias[{}]' must be a number between -100 and 100", key));
      }
      s.logit_bias[static_cast<TokenId>(id)] = value.get<float>();
    }
  }
}

void read_stop(const RequestJson& body, GenerationRequest& g) {
  const RequestJson* stop = find(body, "stop");
  if (!stop) return;
  if (stop->is_string()) {
    g.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > 16) fail("stop", "'stop' holds at most 16 strings");
    for (const auto& s : *stop) {
      if (!s.is_string()) fail("stop", "'stop' must be a string or a list of strings");
      g.stop.push_back(s.get<std::string>());
    }
  } else {
    fail("stop", "'stop' must be a string or a list of strings");
  }
}

void read_prompt(const RequestJson& body, int n_vocab, OpenAiRequest& out) {
  const RequestJson* prompt = find(body, "prompt");
  if (!prompt) fail("prompt", "'prompt' is required");
  const RequestJson* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out.prompt_text = p->get<std::string>();
    if (out.prompt_text.empty()) fail("prompt", "'prompt' is empty");
  } else if (p->is_array()) {
    if (p->empty()) fail("prompt", "'prompt' is empty");
    if ((*p)[0].is_string() || (*p)[0].is_array()) {
      fail("prompt", "'prompt' holds several prompts: send one per request");
    }
    out.prompt_tokens = read_token_ids(*p, "prompt", n_vocab);
    out.prompt_is_tokens = true;
  } else {
    fail("prompt", "'prompt' must be a string or a list of token ids");
  }
}

void read_messages(const RequestJson& body, OpenAiRequest& out) {
  const RequestJson* messages = find(body, "messages");
  if (!messages) fail("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) fail("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < messages->size(); ++i) {
    const auto& m = (*messages)[i];
    const std::string field = fmt::format("messages[{}]", i);
    if (!m.is_object()) fail(field, fmt::format("'{}' must be an object", field));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      fail(field + ".role", fmt::format("'{}.role' must be a string", field));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      fail(field + ".role",
           fmt::format("'{}.role' must be system, developer, user, assistant or tool (got '{}')", field, r));
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null()) {
      if (content->is_array()) {
        for (size_t k = 0; k < content->size(); ++k) {
          const auto& part = (*content)[k];
          const std::string pf = fmt::format("{}.content[{}]", field, k);
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            fail(pf, fmt::format("'{}' must be an object with a 'type'", pf));
          }
          if (part["type"] != "text") {
            fail(pf, fmt::format("'{}': content of type '{}' is not supported (text only)", pf,
                                 part["type"].get<std::string>()));
          }
          if (!part.contains("text") || !part["text"].is_string())
            fail(pf, fmt::format("'{}.text' must be a string", pf));
        }
      } else if (!content->is_string()) {
        fail(field + ".content", fmt::format("'{}.content' must be a string or a list of parts", field));
      }
    } else if (r != "assistant") {
      fail(field + ".content", fmt::format("'{}.content' is required", field));
    }
    auto calls = m.find("tool_calls");
    if (calls != m.end() && !calls->is_null() && !calls->is_array()) {
      fail(field + ".tool_calls", fmt::format("'{}.tool_calls' must be a list", field));
    }
  }
  out.messages = *messages;
}

// "auto" (the default) or "none". Forcing a call ("required", or an object
// naming a function) needs constrained decoding, which graft lacks: asking for
// it is a 400 rather than a reply that may hold no call.
std::string read_tool_choice(const RequestJson& body) {
  const RequestJson* choice = find(body, "tool_choice");
  if (!choice) return "auto";
  const char* kForced =
      "graft cannot force a tool call yet (that needs constrained decoding); use \"auto\" and let the "
      "model choose";
  if (choice->is_object()) {
    unsupported("tool_choice", fmt::format("'tool_choice' naming a function is not supported: {}", kForced));
  }
  if (!choice->is_string()) fail("tool_choice", "'tool_choice' must be \"auto\" or \"none\"");
  const std::string c = choice->get<std::string>();
  if (c == "required")
    unsupported("tool_choice", fmt::format("'tool_choice': \"required\" is not supported: {}", kForced));
  if (c != "none" && c != "auto")
    fail("tool_choice", fmt::format("'tool_choice' must be \"auto\" or \"none\" (got '{}')", c));
  return c;
}

void read_tools(const RequestJson& body, OpenAiRequest& out) {
  const RequestJson* tools = find(body, "tools");
  if (!tools) {
    read_tool_choice(body);  // refused even without tools
    return;
  }
  if (!tools->is_array()) fail("tools", "'tools' must be a list");
  for (size_t i = 0; i < tools->size(); ++i) {
    const auto& t = (*tools)[i];
    const std::string field = fmt::format("tools[{}]", i);
    if (!t.is_object()) fail(field, fmt::format("'{}' must be an object", field));
    if (t.contains("type") && t["type"] != "function")
      fail(field + ".type", fmt::format("'{}.type' must be \"function\"", field));
    if (!t.contains("function") || !t["function"].is_object()) {
      fail(field + ".function", fmt::format("'{}.function' must be an object", field));
    }
    const auto& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      fail(field + ".function.name", fmt::format("'{}.function.name' must be a non-empty string", field));
    }
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object()) {
      fail(field + ".function.parameters",
           fmt::format("'{}.function.parameters' must be a JSON schema object", field));
    }
  }
  bool use_tools = !tools->empty();
  if (read_tool_choice(body) == "none") use_tools = false;
  if (use_tools) out.tools = *tools;
}

void read_all(const RequestJson& body, ApiKind kind, int n_vocab, OpenAiRequest& out) {
  out.kind = kind;
  if (auto error = check_unsupported_fields(body)) throw FieldError{*error};
  GenerationRequest& g = out.generation;
  if (auto v = read_string(body, "model")) out.model = *v;
  if (auto v = read_bool(body, "stream")) out.stream = *v;
  if (const RequestJson* opts = find(body, "stream_options")) {
    if (!opts->is_object()) fail("stream_options", "'stream_options' must be an object");
    if (auto v = read_bool(*opts, "include_usage")) out.include_usage = *v;
  }
  if (auto v = read_integer(body, "n", 1, 1)) (void)v;
  for (const char* name : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (auto v = read_integer(body, name, 1, std::numeric_limits<int64_t>::max())) {
      g.max_tokens = static_cast<int>(std::min<int64_t>(*v, 1 << 30));
    }
  }
  read_sampling(body, n_vocab, g);
  read_stop(body, g);
  if (auto v = read_bool(body, "ignore_eos")) g.ignore_eos = *v;
  if (auto v = read_string(body, "user")) (void)v;

  if (kind == ApiKind::kChat) {
    if (auto v = read_bool(body, "logprobs")) out.logprobs = *v;
    if (auto v = read_integer(body, "top_logprobs", 0, 20)) out.top_logprobs = static_cast<int>(*v);
    read_messages(body, out);
    read_tools(body, out);
    if (const RequestJson* kwargs = find(body, "chat_template_kwargs")) {
      if (!kwargs->is_object()) fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      out.template_kwargs = *kwargs;
    }
    if (const RequestJson* format = find(body, "response_format")) {
      if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
        fail("response_format", "'response_format' must be an object with a 'type'");
      }
      if ((*format)["type"] != "text") {
        unsupported("response_format",
                    "'response_format' other than {\"type\": \"text\"} is not supported: graft has no "
                    "constrained decoding yet");
      }
    }
  } else {
    const RequestJson* lp = find(body, "logprobs");
    if (lp && lp->is_boolean()) {
      out.logprobs = lp->get<bool>();
    } else if (auto v = read_integer(body, "logprobs", 0, 20)) {
      out.logprobs = true;
      out.top_logprobs = static_cast<int>(*v);
    }
    if (auto v = read_bool(body, "echo")) out.echo = *v;
    read_prompt(body, n_vocab, out);
    if (const RequestJson* suffix = find(body, "suffix");
        suffix && !(suffix->is_string() && suffix->get<std::string>().empty())) {
      unsupported("suffix", "'suffix' is not supported: graft does not fill in the middle");
    }
  }
  g.top_logprobs = out.logprobs ? out.top_logprobs : -1;
}

}  // namespace

std::optional<ApiError> parse_body(const std::string& text, RequestJson& body) {
  try {
    body = RequestJson::parse(text);
  } catch (const RequestJson::parse_error& e) {
    return bad_request(fmt::format("the request body is not valid JSON: {}", e.what()), "",
                       ApiCode::kInvalidJson);
  }
  if (!body.is_object())
    return bad_request("the request body must be a JSON object", "", ApiCode::kInvalidJson);
  return std::nullopt;
}

std::optional<ApiError> read_openai_request(const RequestJson& body, ApiKind kind, int n_vocab,
                                            OpenAiRequest& out) {
  try {
    read_all(body, kind, n_vocab, out);
  } catch (const FieldError& e) {
    return e.error;
  } catch (const RequestJson::exception& e) {
    return bad_request(fmt::format("cannot read the request: {}", e.what()));
  }
  return std::nullopt;
}

}  // namespace graft::server
