// Test helper: writes a small hand-made tokenizer vocabulary as a GGUF file,
// so tests can pin down merge rules, fallbacks and load errors exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace graft::testing {

struct TinyVocab {
  std::string model = "gpt2";
  std::optional<std::string> pre = "gpt-2";
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // empty: no tokenizer.ggml.token_type
  std::vector<float> scores;   // empty: no tokenizer.ggml.scores
  std::vector<std::string> merges;
  bool write_merges = true;
  std::map<std::string, int64_t> ints;  // extra keys, e.g. "tokenizer.ggml.bos_token_id"
  std::map<std::string, bool> bools;
  std::map<std::string, std::string> strings;
};

// The GPT-2 byte-level spelling of raw bytes (space -> "Ġ", newline -> "Ċ").
std::string byte_level(std::string_view raw);

// Writes the vocabulary to a fresh file in the test scratch folder.
std::string write_tiny_vocab(const TinyVocab& vocab);

Result<std::shared_ptr<const Tokenizer>> load_tiny_vocab(const TinyVocab& vocab);

}  // namespace graft::testing
