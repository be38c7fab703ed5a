#include "server/openai_fields.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace graft::server {

namespace {

using Off = bool (*)(const RequestJson& value);

bool never(const RequestJson&) {
  return false;
}
bool is_false(const RequestJson& v) {
  return v.is_boolean() && !v.get<bool>();
}
bool is_true(const RequestJson& v) {
  return v.is_boolean() && v.get<bool>();
}
bool is_zero(const RequestJson& v) {
  return v.is_number() && v.get<double>() == 0;
}
bool at_most_zero(const RequestJson& v) {
  return v.is_number() && v.get<double>() <= 0;
}
bool at_most_one(const RequestJson& v) {
  return v.is_number() && v.get<double>() <= 1;
}
bool is_one(const RequestJson& v) {
  return v.is_number() && v.get<double>() == 1;
}
bool is_empty(const RequestJson& v) {
  if (v.is_string()) return v.get_ref<const std::string&>().empty();  // json::empty() is false for any string
  return (v.is_array() || v.is_object()) && v.empty();
}
bool text_only(const RequestJson& v) {
  return v.is_array() && v.size() == 1 && v[0] == "text";
}
bool default_tier(const RequestJson& v) {
  return v == "auto" || v == "default";
}
bool reasoning_split(const RequestJson& v) {
  return v == "auto" || v == "deepseek";  // <think> text goes to reasoning_content, as graft does
}

struct Unsupported {
  std::string_view name;
  Off off;                   // the value that asks for nothing graft lacks
  std::string_view tunes;    // "": a feature of its own; else the field whose feature it tunes
  std::string_view instead;  // what to do instead, or ""
};

// clang-format off
constexpr Unsupported kUnsupported[] = {
    // OpenAI
    {"best_of", is_one, "", "graft returns one answer per request"},
    {"functions", is_empty, "", "use 'tools'"},
    {"function_call", never, "functions", "use 'tool_choice'"},
    {"parallel_tool_calls", is_true, "", "graft cannot limit a reply to one tool call"},
    {"prediction", never, "", ""},
    {"audio", never, "", ""},
    {"modalities", text_only, "", "graft answers with text only"},
    {"store", is_false, "", "graft stores no completions"},
    {"metadata", never, "store", ""},
    {"service_tier", default_tier, "", ""},
    {"reasoning_effort", never, "", "a thinking model's template may take chat_template_kwargs such as {\"enable_thinking\": false}"},
    {"verbosity", never, "", ""},
    {"web_search_options", never, "", ""},
    // llama-server
    {"grammar", is_empty, "", "constrained decoding is not implemented"},
    {"json_schema", is_empty, "", "constrained decoding is not implemented"},
    {"grammar_lazy", never, "grammar", ""},
    {"grammar_triggers", is_empty, "", ""},
    {"preserved_tokens", is_empty, "", ""},
    {"mirostat", is_zero, "", ""},
    {"mirostat_tau", never, "mirostat", ""},
    {"mirostat_eta", never, "mirostat", ""},
    {"dynatemp_range", at_most_zero, "", ""},
    {"dynatemp_exponent", never, "dynatemp_range", ""},
    {"dry_multiplier", is_zero, "", ""},
    {"dry_base", never, "dry_multiplier", ""},
    {"dry_allowed_length", never, "dry_multiplier", ""},
    {"dry_penalty_last_n", never, "dry_multiplier", ""},
    {"dry_sequence_breakers", never, "dry_multiplier", ""},
    {"top_n_sigma", at_most_zero, "", ""},
    {"samplers", never, "", "graft applies its samplers in one fixed order (penalties, top_k, typical_p, top_p, min_p, xtc, temperature)"},
    {"min_keep", at_most_one, "", ""},
    {"n_probs", is_zero, "", "use 'logprobs'"},
    {"post_sampling_probs", is_false, "", ""},
    {"n_keep", is_zero, "", "graft does not shift the context: a request ends when its context is full"},
    {"n_discard", is_zero, "", ""},
    {"n_indent", is_zero, "", ""},
    {"n_cmpl", is_one, "", "graft returns one answer per request"},
    {"n_cache_reuse", is_zero, "", ""},
    {"cache_prompt", is_true, "", "graft always reuses cached prompt prefixes"},
    {"id_slot", [](const RequestJson& v) { return v.is_number() && v.get<double>() == -1; }, "", ""},
    {"t_max_predict_ms", at_most_zero, "", "use 'max_tokens'"},
    {"t_max_prompt_ms", at_most_zero, "", ""},
    {"timings_per_token", is_false, "", ""},
    {"return_tokens", is_false, "", ""},
    {"return_progress", is_false, "", ""},
    {"response_fields", is_empty, "", ""},
    {"lora", is_empty, "", "select adapters with the 'adapter' field"},
    {"image_data", is_empty, "", "graft reads text only"},
    {"reasoning_format", reasoning_split, "", "graft puts <think> text in reasoning_content"},
    {"parse_tool_calls", is_true, "", ""},
    {"chat_format", never, "", ""},
    {"chat_parser", never, "", ""},
    {"continue_final_message", is_false, "", ""},
    {"add_generation_prompt", is_true, "", ""},
    {"reasoning_budget_tokens", [](const RequestJson& v) { return v.is_number() && v.get<double>() < 0; }, "", ""},
    {"thinking_budget_tokens", [](const RequestJson& v) { return v.is_number() && v.get<double>() < 0; }, "", ""},
};

// The fields graft reads (openai_params.cpp), for both routes and for one.
constexpr std::string_view kReadByBoth[] = {
    "model", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens", "n_predict",
    "temperature", "top_p", "top_k", "min_p", "typical_p", "xtc_probability", "xtc_threshold",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "repeat_penalty", "repeat_last_n",
    "seed", "logit_bias", "stop", "ignore_eos", "user", "logprobs"};
constexpr std::string_view kReadByChat[] = {"messages", "tools", "tool_choice", "top_logprobs",
                                            "chat_template_kwargs", "response_format"};
constexpr std::string_view kReadByCompletions[] = {"prompt", "echo", "suffix"};
// clang-format on

const Unsupported* find_unsupported(std::string_view name) {
  for (const Unsupported& u : kUnsupported) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

// Whether the field asks for nothing graft lacks: absent, null, its "off"
// value, or a tuning of a feature that is off.
bool is_off(const RequestJson& body, const Unsupported& field) {
  auto it = body.find(std::string(field.name));
  if (it == body.end() || it->is_null() || field.off(*it)) return true;
  if (field.tunes.empty()) return false;
  const Unsupported* feature = find_unsupported(field.tunes);
  return feature && is_off(body, *feature);
}

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

std::optional<ApiError> check_unsupported_fields(const RequestJson& body) {
  for (const Unsupported& field : kUnsupported) {
    if (is_off(body, field)) continue;
    const std::string name(field.name);
    std::string message = fmt::format("'{}' is not supported by graft", name);
    if (!field.tunes.empty()) message += fmt::format(" (nor is '{}', which it tunes)", field.tunes);
    if (!field.instead.empty()) message += fmt::format(": {}", field.instead);
    return bad_request(message, name, ApiCode::kUnsupportedParameter);
  }
  return std::nullopt;
}

std::vector<std::string> unknown_fields(const RequestJson& body, ApiKind kind,
                                        const std::vector<std::string>& also_known) {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : body.items()) {
    if (listed(kReadByBoth, name) || find_unsupported(name)) continue;
    if (kind == ApiKind::kChat ? listed(kReadByChat, name) : listed(kReadByCompletions, name)) continue;
    if (std::find(also_known.begin(), also_known.end(), name) != also_known.end()) continue;
    unknown.push_back(name);
  }
  return unknown;
}

}  // namespace graft::server
