// StopMatcher: finds stop strings in streamed text. Text that could still be
// the start of a stop string is held back until the next piece decides it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace graft {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found: `text` ends just before it
    std::string stop;      // which one (the first listed, of those found at the same place)
  };

  // Feeds the next piece of generated text.
  Output push(std::string_view piece);
  // The text still held back (generation ended without a stop string).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace graft
