// Finds special tokens written out in text (chat templates write
// "<|im_start|>" as text) so that each becomes one token. Longer token texts
// take precedence; each token claims its leftmost non-overlapping
// occurrences in the text the longer ones left free. Control and unknown
// tokens are matched only when the caller asks for it; user-defined tokens
// always. Internal to the tokenizer layer.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace graft {

struct Fragment {
  TokenId token;    // -1 for plain text
  uint32_t offset;  // plain text: the byte range in the input
  uint32_t length;
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Cuts `text` into plain-text fragments and special tokens, in order.
  void split(const Vocab& vocab, std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

 private:
  struct Candidate {
    TokenId id;
    uint32_t length;
    bool needs_parse_special;  // control or unknown token
  };
  std::vector<Candidate> candidates_;            // longest first
  std::vector<int32_t> root_;                    // trie: first byte -> node, -1 if none
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> node
  std::vector<int32_t> terminal_;                // node -> candidate index, -1 if none
  bool has_user_defined_ = false;
};

}  // namespace graft
