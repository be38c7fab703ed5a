#include "engine/stop_matcher.h"

#include <algorithm>

#include "util/utf8.h"

namespace graft {

namespace {

// Length of the longest suffix of `text` that is a proper prefix of `stop`.
size_t partial_overlap(std::string_view text, std::string_view stop) {
  size_t max = std::min(text.size(), stop.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (text.substr(text.size() - n) == stop.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Output StopMatcher::push(std::string_view piece) {
  pending_.append(piece);
  Output out;
  if (stops_.empty()) {
    out.text = std::move(pending_);
    pending_.clear();
    return out;
  }
  size_t first = std::string::npos;
  for (const auto& stop : stops_) {
    size_t at = pending_.find(stop);
    if (at < first) {
      first = at;
      out.stop = stop;
    }
  }
  if (first != std::string::npos) {
    out.text = pending_.substr(0, first);
    out.stopped = true;
    pending_.clear();
    return out;
  }
  size_t hold = 0;
  for (const auto& stop : stops_) hold = std::max(hold, partial_overlap(pending_, stop));
  size_t emit = utf8::char_start(pending_, pending_.size() - hold);
  out.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string StopMatcher::flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace graft
