// The pieces of text a model writes when it calls tools, read one at a time:
// the markers of each family's format, a JSON value inside model output, a
// {"name", "arguments"} object, and Qwen's <function=...> XML form. The
// streaming parser (tool_calls.cpp) decides where a call starts and ends;
// these turn one call's text into an OpenAI tool call, or refuse it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "chat/template.h"
#include "chat/tool_calls.h"

namespace graft::tool_call_syntax {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
inline constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
inline constexpr std::string_view kMistralArgs = "[ARGS]";
inline constexpr std::string_view kMistralCallId = "[CALL_ID]";
inline constexpr std::string_view kPythonTag = "<|python_tag|>";
// Gemma 4: <|tool_call>call:name{key:value,...}<tool_call|>, strings quoted
// by <|"|>; reasoning in a channel, <|channel>thought\n...<channel|>.
inline constexpr std::string_view kGemmaCallOpen = "<|tool_call>";
inline constexpr std::string_view kGemmaCallClose = "<tool_call|>";
inline constexpr std::string_view kGemmaQuote = "<|\"|>";
inline constexpr std::string_view kGemmaChannelOpen = "<|channel>";
inline constexpr std::string_view kGemmaChannelClose = "<channel|>";
// MiniCPM5: <function name="f"><param name="k">value</param></function>, a
// value holding <, & or a line break wrapped in <![CDATA[...]]>; no wrapper
// around the calls.
inline constexpr std::string_view kMiniCpmCallOpen = "<function name=\"";
inline constexpr std::string_view kMiniCpmCallClose = "</function>";

// The index of the first byte at or after i that is not ASCII whitespace.
std::size_t skip_space(std::string_view s, std::size_t i = 0);

// Where the JSON object or array opening s[0] ends (one past its closing
// bracket), or nullopt while it is unfinished.
std::optional<std::size_t> json_value_end(std::string_view s);

// JSON from model text; discarded when invalid or nested deeper than
// anything a tool call needs.
ChatJson parse_json(std::string_view text);

// A function name a call may carry: non-empty, short, no spaces or markup.
bool valid_name(std::string_view name);
// Exactly `length` ASCII letters and digits (Mistral's call ids).
bool is_alnum_id(const std::string& id, std::size_t length);

// {"id", "type": "function", "function": {"name", "arguments"}}.
ChatJson make_call(std::string name, std::string arguments, std::string id);

// {"name": ..., "arguments"|"parameters": {...} or "<JSON text>"} as a call.
std::optional<ChatJson> call_from_json(const ChatJson& j, ToolCallFormat format);

// <function=name><parameter=key>value</parameter>...</function>
std::optional<ChatJson> call_from_xml(std::string_view body);

// call:name{key:value,...}, Gemma 4's call syntax (values: <|"|>strings<|"|>,
// numbers, true, false, null, {objects} and [arrays]; keys bare or quoted).
std::optional<ChatJson> call_from_gemma(std::string_view body);

// Where MiniCPM5's </function> closing the call in s starts: the first one
// outside CDATA sections (a value may hold the marker's text); npos while
// there is none yet.
std::size_t minicpm5_call_close(std::string_view s);

// A MiniCPM5 call after its opening `<function name="`:
// f"><param name="k">v</param>...</function>. Values as in call_from_xml; a
// CDATA value is a string, as written.
std::optional<ChatJson> call_from_minicpm5(std::string_view body);

// The body between <tool_call> and </tool_call>: JSON or the XML form.
std::optional<ChatJson> call_from_tagged_body(std::string_view body, ToolCallFormat format);

}  // namespace graft::tool_call_syntax
