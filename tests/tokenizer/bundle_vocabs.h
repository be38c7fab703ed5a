// Test helpers: the bundle's tokenizer vocabularies (models/ggml-vocab-*.gguf)
// and their upstream test vectors (.inp/.out).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace graft::testing {

// Names (the part after "ggml-vocab-") of every vocabulary in the bundle, sorted.
std::vector<std::string> bundle_vocab_names();
// Those that come with .inp/.out test vectors.
std::vector<std::string> bundle_vocabs_with_vectors();

// Loads a bundle vocabulary once per process.
Result<std::shared_ptr<const Tokenizer>> load_bundle_tokenizer(const std::string& name);

// A bundle vocabulary that did not load is fine only when its kind
// (tokenizer.ggml.model) is one graft does not implement (bert, t5) and the
// error says "unsupported"; any other failure, or an unsupported vocabulary of
// another kind, is described here. Empty when the failure is the expected one.
std::string unexpected_load_failure(const std::string& name, const Error& error);

struct VectorCase {
  std::string text;
  std::vector<TokenId> ids;
};
// Reads <vocab>.gguf.inp / .out: inputs separated by "\n__ggml_vocab_test__\n",
// one line of space-separated ids per input.
Result<std::vector<VectorCase>> read_vectors(const std::string& name);

std::string ids_to_string(const std::vector<TokenId>& ids);

}  // namespace graft::testing
