// A generation request as the engine sees it (token ids in, events out), and
// the events it sends back. The HTTP side builds requests from JSON and turns
// events into JSON/SSE; the engine knows nothing of either.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch.h"

namespace graft {

using RequestId = uint64_t;

// How the next token is picked. The defaults are the usual server defaults
// (a request that sets nothing samples at temperature 0.8 with top-k 40,
// top-p 0.95, min-p 0.05); temperature 0 is greedy.
struct SamplingOptions {
  float temperature = 0.8f;
  float top_p = 0.95f;           // >= 1: off
  int top_k = 40;                // <= 0: off
  float min_p = 0.05f;           // <= 0: off
  float typical_p = 1.0f;        // >= 1: off
  float xtc_probability = 0.0f;  // 0: off
  float xtc_threshold = 0.1f;    // > 0.5: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1: off
  int penalty_last_n = 64;          // tokens the penalties look back over
  std::map<TokenId, float> logit_bias;
  uint64_t seed = 0;
  bool has_seed = false;  // false: a fresh random seed per request
};

struct GenerationRequest {
  std::string id;  // for logs and responses ("chatcmpl-…")
  std::vector<TokenId> prompt;
  int max_tokens = -1;  // -1: until the context is full
  SamplingOptions sampling;
  std::vector<std::string> stop;  // generation ends before any of these
  bool ignore_eos = false;
  int top_logprobs = -1;      // -1: no logprobs; n >= 0: the chosen token's plus n alternatives
  AdapterRoute adapters;      // empty: the base model
  bool special_text = false;  // control tokens appear in the text (tool-call markers)
  // Held until the request ends: e.g. the lease that keeps its adapters
  // loaded (adapters/mounted.h), so they cannot be unloaded under it.
  std::shared_ptr<const void> keep_alive;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* to_string(FinishReason reason);

struct LogprobEntry {
  TokenId id = 0;
  float logprob = 0.0f;
};

struct GeneratedToken {
  TokenId id = 0;
  float logprob = 0.0f;           // set when logprobs were asked for
  std::vector<LogprobEntry> top;  // top_logprobs alternatives, best first
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV was reused from an earlier sequence
};

struct Timings {
  double queued_ms = 0;          // submit → admitted
  double ttft_ms = 0;            // submit → first token
  double generation_ms = 0;      // first token → last token
  double tokens_per_second = 0;  // completion tokens after the first / generation time
};

// One event to a request's sink. Text is complete UTF-8 and never contains
// (the start of) a stop string; tokens are the ids sampled since the last
// event. Exactly one event per request has `done` set, and it is the last.
struct GenerationEvent {
  std::string text;
  std::vector<GeneratedToken> tokens;
  bool done = false;
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;  // set when finish_reason is kError
  std::string stop;   // the stop string that ended the request, if one did
  Usage usage;
  Timings timings;
};

// Called on the engine thread: it must return at once (post the event to
// another thread; never block, never call back into the engine synchronously
// other than Engine::cancel).
using EventSink = std::function<void(GenerationEvent&& event)>;

}  // namespace graft
