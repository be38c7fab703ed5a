#include "server/served_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/kv_cache.h"
#include "engine/model_executor.h"
#include "util/log.h"
#include "util/strings.h"

namespace graft::server {

namespace {

class TokenizerText : public TokenText {
 public:
  explicit TokenizerText(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
  bool is_end_of_generation(TokenId token) const override { return tok_->is_eog(token); }
  std::unique_ptr<TextStream> open_stream(bool special) const override {
    return std::make_unique<Stream>(tok_, special);
  }

 private:
  struct Stream : TextStream {
    Stream(std::shared_ptr<const Tokenizer> tok, bool special)
        : decoder(std::move(tok), /*skip_special=*/!special) {}
    std::string push(TokenId token) override { return decoder.push(token); }
    std::string flush() override { return decoder.flush(); }
    StreamDecoder decoder;
  };
  std::shared_ptr<const Tokenizer> tok_;
};

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

}  // namespace

std::shared_ptr<const TokenText> make_token_text(std::shared_ptr<const Tokenizer> tokenizer) {
  return std::make_shared<TokenizerText>(std::move(tokenizer));
}

Result<std::pair<int64_t, int64_t>> parse_kv_budget(const std::string& text) {
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end == 0 || !std::isfinite(number) || number <= 0) {
    return errorf("invalid_argument", "--kv-budget '{}' is neither a token count nor a size like 2GiB", text);
  }
  const std::string unit = to_lower_ascii(text.substr(end));
  if (unit.empty() || unit == "t" || unit == "tokens") {
    if (number != std::floor(number))
      return errorf("invalid_argument", "--kv-budget '{}': a token count is whole", text);
    return std::pair<int64_t, int64_t>{static_cast<int64_t>(number), 0};
  }
  double scale = 0;
  if (unit == "b") scale = 1;
  if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  if (scale == 0)
    return errorf("invalid_argument", "--kv-budget '{}': unknown unit '{}' (use B, KiB, MiB or GiB)", text,
                  unit);
  return std::pair<int64_t, int64_t>{0, static_cast<int64_t>(number * scale)};
}

ServedModel::~ServedModel() = default;

std::unique_ptr<ServedModel> ServedModel::assemble(std::string id, std::shared_ptr<const Tokenizer> tokenizer,
                                                   ChatTemplate chat_template,
                                                   std::unique_ptr<Executor> executor, EngineConfig config) {
  std::unique_ptr<ServedModel> served(new ServedModel());
  served->id_ = std::move(id);
  served->created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  served->tokenizer_ = std::move(tokenizer);
  served->template_ = std::make_unique<ChatTemplate>(std::move(chat_template));
  served->own_template_ = true;
  served->engine_ =
      std::make_unique<Engine>(std::move(executor), make_token_text(served->tokenizer_), config);
  return served;
}

Result<std::unique_ptr<ServedModel>> ServedModel::load(const ServeOptions& options, int64_t kv_budget_bytes) {
  std::unique_ptr<ServedModel> served(new ServedModel());
  ModelLoadOptions load;
  load.copy_weights = !options.weights_in_place;
  GRAFT_TRY(served->model_, Model::load(options.model_path, load));
  const GgufFile& gguf = served->model_->gguf();
  const ModelConfig& config = served->model_->config();
  GRAFT_TRY(served->tokenizer_, Tokenizer::from_gguf(gguf));

  served->id_ = options.model_id;
  if (served->id_.empty()) served->id_ = std::filesystem::path(options.model_path).stem().string();
  for (const std::string& alias : options.aliases) {
    if (!served->answers_to(alias)) served->aliases_.push_back(alias);
  }
  served->created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();

  auto source = gguf.find_string("tokenizer.chat_template");
  if (source) {
    auto parsed = ChatTemplate::parse(*source);
    if (parsed) {
      served->template_ = std::make_unique<ChatTemplate>(std::move(*parsed));
      served->own_template_ = true;
    } else {
      GRAFT_LOG_WARN("the model's chat template cannot be used ({}); chat requests use ChatML instead",
                     parsed.error().message);
    }
  }
  if (!served->template_) {
    GRAFT_TRY(ChatTemplate chatml, ChatTemplate::parse(kChatMlTemplate));
    served->template_ = std::make_unique<ChatTemplate>(std::move(chatml));
  }

  apply_model_sampling(gguf, served->sampling_);
  GRAFT_TRY_STATUS(apply_sampling_flags(options.sampling_flags, served->sampling_));

  auto kv_type = KvCache::type_from_name(options.kv_type);
  if (!kv_type) return errorf(kv_type.error().code, "--kv-type: {}", kv_type.error().message);
  served->kv_type_ = options.kv_type;
  if (options.parallel < 1 || options.parallel > ServeOptions::kMaxParallel) {
    return errorf("invalid_argument", "--parallel {}: graft runs 1 to {} requests at once", options.parallel,
                  ServeOptions::kMaxParallel);
  }
  const int parallel = options.parallel;
  int n_ctx =
      options.n_ctx > 0 ? options.n_ctx : std::min(config.n_ctx_train > 0 ? config.n_ctx_train : 4096, 8192);
  if (config.n_ctx_train > 0 && n_ctx > config.n_ctx_train) {
    GRAFT_LOG_WARN("--ctx {} is beyond the model's training context {}: using {}", n_ctx, config.n_ctx_train,
                   config.n_ctx_train);
    n_ctx = config.n_ctx_train;
  }
  const int64_t bytes_per_token =
      std::max<int64_t>(1, static_cast<int64_t>(kv_bytes_per_token(config, *kv_type)));
  // Hybrid models: a request's recurrent state counts as this many tokens of KV.
  const int64_t state_tokens =
      (static_cast<int64_t>(recurrent_state_bytes(config)) + bytes_per_token - 1) / bytes_per_token;
  int64_t budget = options.kv_budget_tokens;
  if (budget == 0 && kv_budget_bytes > 0) budget = kv_budget_bytes / bytes_per_token;
  if (budget == 0) {
    budget = int64_t{parallel} * (n_ctx + state_tokens);
    int64_t avail = available_memory();
    if (avail > 0) budget = std::min(budget, avail / 2 / bytes_per_token);
  }
  if (budget < n_ctx + state_tokens) {
    return errorf(
        "invalid_argument",
        "the KV budget ({} tokens, {} MiB) does not hold one full context of {} tokens{}: lower --ctx "
        "or raise --kv-budget",
        budget, budget * bytes_per_token >> 20, n_ctx,
        state_tokens > 0 ? fmt::format(" and its recurrent state ({} tokens' worth)", state_tokens) : "");
  }

  ModelExecutorOptions exec;
  exec.n_ctx = n_ctx;
  exec.kv_cells = budget;
  exec.max_sequences = std::min(std::max(4 * parallel, 16), 256);
  exec.n_threads = options.threads;
  exec.kv_type = *kv_type;
  exec.max_batch_rows = std::max(options.step_tokens, parallel + 1);
  GRAFT_TRY(std::unique_ptr<Executor> executor, make_model_executor(*served->model_, exec));

  EngineConfig engine;
  engine.n_ctx = n_ctx;
  // The executor's cells: a sliding-window model turns the budget's memory
  // into more cells of its global layers than `budget`.
  engine.kv_budget_tokens = 0;
  engine.max_running = parallel;
  engine.step_tokens = exec.max_batch_rows;
  engine.prefix_cache = options.prefix_cache;
  engine.compute_nice = options.compute_nice;
  served->engine_ =
      std::make_unique<Engine>(std::move(executor), make_token_text(served->tokenizer_), engine);
  return served;
}

std::string ServedModel::token_piece(TokenId id) const {
  return tokenizer_->token_bytes(id);
}

bool ServedModel::answers_to(std::string_view name) const {
  if (name == id_) return true;
  for (const std::string& alias : aliases_) {
    if (name == alias) return true;
  }
  return false;
}

std::string ServedModel::bos_text() const {
  TokenId bos = tokenizer_->bos();
  return bos < 0 ? "" : tokenizer_->token_text(bos);
}

std::string ServedModel::eos_text() const {
  TokenId eos = tokenizer_->eos();
  return eos < 0 ? "" : tokenizer_->token_text(eos);
}

}  // namespace graft::server
