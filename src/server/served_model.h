// ServedModel: everything `graft serve` holds for its one model — the
// weights, tokenizer, chat template and the engine that runs requests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/sampling_defaults.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace graft::server {

struct ServeOptions {
  std::string model_path;
  std::string model_id;              // the name /v1/models lists; "": the file name without .gguf
  std::vector<std::string> aliases;  // other names a request's "model" may give for it
  int n_ctx = 0;                     // longest sequence; 0: the model's training context, at most 8192
  int64_t kv_budget_tokens = 0;      // 0: every running request gets a full context, if memory allows
  int parallel = 4;                  // requests in flight at once
  int threads = 0;                   // compute threads; 0: all cores
  std::string kv_type = "f16";       // f16, q8_0 or q4_0
  int step_tokens = 512;             // most rows in one batch
  bool prefix_cache = true;
  // Multiply the weights in place in the file's mapping (ModelLoadOptions::copy_weights off).
  bool weights_in_place = false;
  int compute_nice = 5;  // compute threads' niceness, or EngineConfig::kComputeIdle
  // Sampling defaults set by flags, by request field name ("temperature", "top_k", ...):
  // they win over the model's recommendations (sampling_defaults.h).
  std::map<std::string, double> sampling_flags;

  // Most requests generated at once: each running request and each cached
  // prompt holds a KV sequence, and the cache has KvCache::kMaxSequences.
  static constexpr int kMaxParallel = 64;
};

// Parses a --kv-budget value: a token count ("16384") or a size ("2GiB", "512MiB", "1.5G").
// Returns {tokens, bytes}: exactly one of them is non-zero.
Result<std::pair<int64_t, int64_t>> parse_kv_budget(const std::string& text);

class ServedModel {
 public:
  static Result<std::unique_ptr<ServedModel>> load(const ServeOptions& options, int64_t kv_budget_bytes = 0);
  // A served model from parts, over any executor (tests drive the server
  // with scripted executors this way); model() is unavailable then.
  static std::unique_ptr<ServedModel> assemble(std::string id, std::shared_ptr<const Tokenizer> tokenizer,
                                               ChatTemplate chat_template, std::unique_ptr<Executor> executor,
                                               EngineConfig config);
  ~ServedModel();

  const std::string& id() const { return id_; }
  const std::vector<std::string>& aliases() const { return aliases_; }
  // Whether a request's "model" names this model: its id or an alias.
  bool answers_to(std::string_view name) const;
  int64_t created() const { return created_; }  // unix seconds
  Model& model() { return *model_; }
  bool has_model() const { return model_ != nullptr; }
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat_template() const { return *template_; }
  // What a request gets for the sampling fields it leaves out.
  const SamplingDefaults& sampling_defaults() const { return sampling_; }
  bool has_own_chat_template() const { return own_template_; }
  // The KV cache's type, as --kv-type names it ("f16", "q8_0", "q4_0").
  const std::string& kv_type() const { return kv_type_; }
  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }

  // The text of a token for logprobs ("" outside the vocabulary).
  std::string token_piece(TokenId id) const;
  // bos/eos texts for chat templates.
  std::string bos_text() const;
  std::string eos_text() const;

 private:
  ServedModel() = default;

  std::string id_;
  std::vector<std::string> aliases_;
  int64_t created_ = 0;
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  bool own_template_ = false;
  std::string kv_type_ = "f16";
  SamplingDefaults sampling_;
  std::unique_ptr<Engine> engine_;  // last: stopped before the model goes
};

// The engine's view of the tokenizer: end-of-generation ids and streamed text.
std::shared_ptr<const TokenText> make_token_text(std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace graft::server
