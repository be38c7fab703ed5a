// The fixed conversations the render tests use (tests/chat/reference_render.py
// holds the same ones for the jinja2 cross-check).
#pragma once

#include <chrono>
#include <string>

#include "chat/template.h"

namespace graft::testing {

// system, user, assistant, user.
inline ChatJson basic_conversation() {
  return ChatJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Germany?"}
  ])");
}

// system, user, an assistant tool call (arguments as JSON text, as OpenAI
// clients send them), the tool's result.
inline ChatJson tool_conversation() {
  return ChatJson::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call12345", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
     "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"}
  ])");
}

inline ChatJson weather_tools() {
  return ChatJson::parse(R"([{
    "type": "function",
    "function": {
      "name": "get_weather",
      "description": "Get the current weather in a city.",
      "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name."}},
        "required": ["city"]
      }
    }
  }])");
}

// 2025-03-14 12:00 UTC: "14 Mar 2025" in any time zone within 12 hours.
inline std::chrono::system_clock::time_point fixed_now() {
  return std::chrono::system_clock::time_point{} + std::chrono::seconds(1741953600);
}

}  // namespace graft::testing
