#include "tokenizer/tiny_vocab.h"

#include <gguf.h>

#include <atomic>

#include "io/gguf_file.h"
#include "testing/test_models.h"
#include "tokenizer/byte_level.h"
#include "util/utf8.h"

namespace graft::testing {

std::string byte_level(std::string_view raw) {
  std::string out;
  for (char c : raw) utf8::append_codepoint(out, utf8::byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

std::string write_tiny_vocab(const TinyVocab& v) {
  static std::atomic<int> counter{0};
  const std::string path = scratch_dir() + "/tiny-vocab-" + std::to_string(counter++) + ".gguf";
  gguf_context* ctx = gguf_init_empty();
  gguf_set_val_str(ctx, "general.architecture", "llama");
  if (!v.model.empty()) gguf_set_val_str(ctx, "tokenizer.ggml.model", v.model.c_str());
  if (v.pre) gguf_set_val_str(ctx, "tokenizer.ggml.pre", v.pre->c_str());
  std::vector<const char*> tokens;
  for (const auto& t : v.tokens) tokens.push_back(t.c_str());
  if (!tokens.empty()) gguf_set_arr_str(ctx, "tokenizer.ggml.tokens", tokens.data(), tokens.size());
  if (!v.types.empty())
    gguf_set_arr_data(ctx, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types.data(), v.types.size());
  if (!v.scores.empty())
    gguf_set_arr_data(ctx, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.scores.data(), v.scores.size());
  std::vector<const char*> merges;
  for (const auto& m : v.merges) merges.push_back(m.c_str());
  if (v.write_merges) gguf_set_arr_str(ctx, "tokenizer.ggml.merges", merges.data(), merges.size());
  for (const auto& [key, value] : v.ints) gguf_set_val_i32(ctx, key.c_str(), static_cast<int32_t>(value));
  for (const auto& [key, value] : v.bools) gguf_set_val_bool(ctx, key.c_str(), value);
  for (const auto& [key, value] : v.strings) gguf_set_val_str(ctx, key.c_str(), value.c_str());
  gguf_write_to_file(ctx, path.c_str(), /*only_meta=*/false);
  gguf_free(ctx);
  return path;
}

Result<std::shared_ptr<const Tokenizer>> load_tiny_vocab(const TinyVocab& vocab) {
  GRAFT_TRY(auto file, GgufFile::open(write_tiny_vocab(vocab)));
  return Tokenizer::from_gguf(file);
}

}  // namespace graft::testing
