// `graft run`: generate a continuation of a prompt and stream it to stdout,
// then print a one-line summary (prompt and generation speed, load time) to
// stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "adapters/load.h"
#include "cli/commands.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace graft::cli {

namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  int threads = 0;
  int ctx = 4096;
  int batch = 512;
  SamplingParams sampling;
  std::string adapter;                    // a selection spec: "a", "a@0.5+b"
  std::vector<std::string> adapter_dirs;  // searched after the user's adapter store
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

void run(const RunOptions& o) {
  if (o.prompt.empty()) fail("the prompt is empty: give one with -p");
  if (o.n_predict < 0) fail("-n must not be negative");
  auto loaded = Model::load(o.model);
  if (!loaded) fail(loaded.error().message);
  Model& model = **loaded;
  auto tokenizer = Tokenizer::from_gguf(model.gguf());
  if (!tokenizer) fail(tokenizer.error().message);
  auto prompt = (*tokenizer)->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (!prompt) fail(prompt.error().message);
  if (prompt->empty()) fail("the prompt encodes to no tokens");
  const int n_ctx = std::min(o.ctx, model.config().n_ctx_train);
  if (int(prompt->size()) + o.n_predict > n_ctx) {
    fail(fmt::format("the prompt ({} tokens) plus {} to generate exceeds the context of {} tokens",
                     prompt->size(), o.n_predict, n_ctx));
  }
  KvCacheOptions kv;
  kv.n_cells = n_ctx;
  kv.n_seq_max = 1;
  auto cache = KvCache::create(model.config(), kv);
  if (!cache) fail(cache.error().message);
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  Forward forward(model, **cache, threads);
  Sampler sampler(o.sampling, model.config().n_vocab);
  AdapterRoute route;  // the base model unless --adapter names some
  std::unique_ptr<MountedAdapters> adapters;
  AdapterLease lease;
  if (!o.adapter.empty()) {
    auto base = BaseModel::from_gguf(model.gguf());
    if (!base) fail(base.error().message);
    adapters = std::make_unique<MountedAdapters>(std::move(base).value());
    const AdapterStore store = AdapterStore::with_user_store({o.adapter_dirs.begin(), o.adapter_dirs.end()});
    auto selected = load_and_select(o.adapter, store, *adapters,
                                    [&](const LoraWeights& w) { return model.mount_lora(w); });
    if (!selected) fail(selected.error().message);
    lease = std::move(selected).value();
    route = lease.route();
  }
  StreamDecoder decoder(*tokenizer);

  // Prefill in chunks of at most `batch` rows.
  const double t_prompt = now();
  const std::vector<TokenId>& ids = *prompt;
  LogitsView logits;
  for (size_t start = 0; start < ids.size(); start += size_t(o.batch)) {
    Batch batch;
    const size_t end = std::min(ids.size(), start + size_t(o.batch));
    for (size_t i = start; i < end; ++i)
      batch.rows.push_back({ids[i], int(i), 0, i + 1 == ids.size(), route});
    auto r = forward.run(batch);
    if (!r) fail(r.error().message);
    logits = *r;
  }
  for (TokenId t : ids) sampler.accept(t);
  const double prompt_seconds = now() - t_prompt;

  const double t_gen = now();
  int generated = 0;
  int pos = int(ids.size());
  while (generated < o.n_predict) {
    const TokenId next = sampler.sample(logits.row(0));
    sampler.accept(next);
    ++generated;
    if ((*tokenizer)->is_eog(next)) break;
    const std::string text = decoder.push(next);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (generated == o.n_predict) break;
    Batch batch;
    batch.rows.push_back({next, pos++, 0, true, route});
    auto r = forward.run(batch);
    if (!r) fail(r.error().message);
    logits = *r;
  }
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double gen_seconds = now() - t_gen;
  std::fprintf(
      stderr,
      "graft: prompt %zu tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | load %.2f s | kv %.1f MiB\n",
      ids.size(), ids.size() / std::max(prompt_seconds, 1e-9), generated,
      generated / std::max(gen_seconds, 1e-9), model.load_seconds(),
      double((*cache)->bytes_total()) / (1 << 20));
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt and stream it to stdout");
  cmd->add_option("model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--typical", o->sampling.typical_p, "Typical-p (1: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Random seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-c,--ctx", o->ctx, "Context size in tokens")->capture_default_str();
  cmd->add_option("-b,--batch", o->batch, "Prompt tokens per forward pass")->capture_default_str();
  cmd->add_option("--adapter", o->adapter, "LoRA adapters by id: \"a\", \"a+b\" (stacked), \"a@0.5+b\"");
  cmd->add_option("--adapter-dir", o->adapter_dirs, "Another folder of adapters (repeatable)");
  cmd->callback([o] { run(*o); });
}

}  // namespace graft::cli
