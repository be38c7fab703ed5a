#include "tokenizer/special_split.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace graft {

namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  constexpr uint16_t kSpecial = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
  for (TokenId id = 0; id < vocab.size(); ++id) {
    const uint16_t attr = vocab.attrs[id];
    if (!(attr & kSpecial)) continue;
    const bool needs = (attr & (token_attr::kControl | token_attr::kUnknown)) != 0;
    candidates_.push_back({id, static_cast<uint32_t>(vocab.texts[id].size()), needs});
    if (!needs) has_user_defined_ = true;
  }
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const Candidate& a, const Candidate& b) { return a.length > b.length; });

  root_.assign(256, -1);
  terminal_.clear();
  for (size_t c = 0; c < candidates_.size(); ++c) {
    const std::string& text = vocab.texts[candidates_[c].id];
    int32_t node = -1;
    for (size_t k = 0; k < text.size(); ++k) {
      const auto byte = static_cast<uint8_t>(text[k]);
      int32_t* slot;
      if (k == 0) {
        slot = &root_[byte];
      } else {
        slot = &edges_.try_emplace((static_cast<uint64_t>(node) << 8) | byte, -1).first->second;
      }
      if (*slot < 0) {
        *slot = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
      }
      node = *slot;
    }
    // Two tokens with the same text: the earlier (longer-first, then lower id) one wins.
    if (node >= 0 && terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(c);
  }
}

void SpecialTokenSplitter::split(const Vocab& vocab, std::string_view text, bool parse_special,
                                 std::vector<Fragment>& out) const {
  const auto n = static_cast<uint32_t>(text.size());
  if (n == 0) return;
  if (candidates_.empty() || (!parse_special && !has_user_defined_)) {
    out.push_back({-1, 0, n});
    return;
  }

  // Every occurrence of every candidate, as (candidate, position).
  std::vector<std::pair<uint32_t, uint32_t>> found;
  for (uint32_t i = 0; i < n; ++i) {
    int32_t node = root_[static_cast<uint8_t>(text[i])];
    for (uint32_t k = i + 1; node >= 0; ++k) {
      const int32_t c = terminal_[node];
      if (c >= 0 && (parse_special || !candidates_[c].needs_parse_special)) found.emplace_back(c, i);
      if (k >= n) break;
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[k]));
      node = it == edges_.end() ? -1 : it->second;
    }
  }
  if (found.empty()) {
    out.push_back({-1, 0, n});
    return;
  }
  std::sort(found.begin(), found.end());

  // Claimed ranges: start -> (end, token, where the token itself starts).
  struct Claim {
    uint32_t end;
    TokenId token;
  };
  std::map<uint32_t, Claim> claims;
  for (const auto& [c, pos] : found) {
    const Candidate& cand = candidates_[c];
    // The free region around `pos`: after the claim before it, before the claim after it.
    auto next = claims.upper_bound(pos);
    const uint32_t region_end = next == claims.end() ? n : next->first;
    uint32_t region_start = 0;
    if (next != claims.begin()) {
      auto prev = std::prev(next);
      region_start = prev->second.end;
      if (region_start > pos) continue;  // inside a claimed range
    }
    if (pos + cand.length > region_end) continue;
    uint32_t start = pos;
    uint32_t end = pos + cand.length;
    const uint16_t attr = vocab.attrs[cand.id];
    if (attr & token_attr::kLstrip) {
      while (start > region_start && is_ascii_space(text[start - 1])) --start;
    }
    if (attr & token_attr::kRstrip) {
      while (end < region_end && is_ascii_space(text[end])) ++end;
    }
    claims.emplace(start, Claim{end, cand.id});
  }

  uint32_t at = 0;
  for (const auto& [start, claim] : claims) {
    if (start > at) out.push_back({-1, at, start - at});
    out.push_back({claim.token, start, claim.end - start});
    at = claim.end;
  }
  if (at < n) out.push_back({-1, at, n - at});
}

}  // namespace graft
