// `graft bench`: prefill and decode speed of a model on this machine, in the
// shapes llama-bench and llama-batched-bench use (pp512, tg128, and N rows of
// decode after an N x 128-token prefill), so bench/engine.sh can put them
// side by side.
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"
#include "util/strings.h"

namespace graft::cli {

namespace {

struct BenchOptions {
  std::string model;
  int threads = 0;
  int pp = 512;
  int tg = 128;
  int reps = 3;
  std::string rows = "1,2,4,8,16";
  int batched_pp = 128;
  int batched_tg = 128;
  int lora_rank = 0;  // > 0: also batched decode with a different adapter per row
  std::string lora_dtype = "f16";
  std::string kv_type = "f16";
  bool weights_in_place = false;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const Error& e) {
  std::fprintf(stderr, "graft: %s\n", e.message.c_str());
  throw CLI::RuntimeError(1);
}

// Deterministic token ids of the vocabulary's ordinary range.
TokenId token_at(int i, int n_vocab) {
  return TokenId((1000 + i * 7919) % std::max(1, n_vocab - 1000));
}

void run_or_fail(Forward& forward, const Batch& batch) {
  auto r = forward.run(batch);
  if (!r) fail(r.error());
}

// Prefill of n tokens in one batch (sequence 0), tokens per second.
double bench_prefill(Forward& forward, KvCache& cache, int n, int n_vocab) {
  cache.clear();
  Batch batch;
  for (int i = 0; i < n; ++i) batch.rows.push_back({token_at(i, n_vocab), i, 0, i == n - 1, {}});
  const double t0 = now();
  run_or_fail(forward, batch);
  return n / (now() - t0);
}

// n single-row decode steps from an empty sequence, tokens per second.
double bench_decode(Forward& forward, KvCache& cache, int n, int n_vocab) {
  cache.clear();
  Batch batch;
  const double t0 = now();
  for (int i = 0; i < n; ++i) {
    batch.rows.assign(1, {token_at(i, n_vocab), i, 0, true, {}});
    run_or_fail(forward, batch);
  }
  return n / (now() - t0);
}

// n_rows sequences each prefilled with pp tokens, then tg steps of n_rows
// decode rows: aggregate decode tokens per second.
double bench_batched(Forward& forward, KvCache& cache, int n_rows, int pp, int tg, int n_vocab,
                     const std::vector<AdapterRoute>& routes = {}) {
  auto route = [&](int s) { return routes.empty() ? AdapterRoute{} : routes[size_t(s) % routes.size()]; };
  cache.clear();
  Batch batch;
  for (int s = 0; s < n_rows; ++s) {
    batch.clear();
    for (int i = 0; i < pp; ++i)
      batch.rows.push_back({token_at(i + s, n_vocab), i, s, i == pp - 1, route(s)});
    run_or_fail(forward, batch);
  }
  const double t0 = now();
  for (int step = 0; step < tg; ++step) {
    batch.clear();
    for (int s = 0; s < n_rows; ++s)
      batch.rows.push_back({token_at(step + s, n_vocab), pp + step, s, true, route(s)});
    run_or_fail(forward, batch);
  }
  return double(n_rows) * tg / (now() - t0);
}

struct StepTimes {
  double total = 0;  // ms
  int n = 0;
};

// Decode steps of n_rows rows without adapters (sequences 0 .. n_rows - 1)
// and with routes (sequences n_rows .. 2 n_rows - 1) taken in turns, in
// blocks of kBlock steps, the side that goes first alternating, so a drift in
// the machine's speed (this VM's memory bandwidth moves within seconds) falls
// on both alike. A block's first step builds its graph and is not timed.
std::pair<StepTimes, StepTimes> interleaved_steps(Forward& forward, KvCache& cache, int n_rows, int pp,
                                                  int tg, int n_vocab,
                                                  const std::vector<AdapterRoute>& routes) {
  constexpr int kBlock = 8;
  cache.clear();
  Batch batch;
  for (int s = 0; s < 2 * n_rows; ++s) {
    batch.clear();
    for (int i = 0; i < pp; ++i)
      batch.rows.push_back({token_at(i + s % n_rows, n_vocab), i, s, i == pp - 1,
                            s < n_rows ? AdapterRoute{} : routes[size_t(s % n_rows)]});
    run_or_fail(forward, batch);
  }
  StepTimes base, lora;
  std::array<int, 2> done{};  // steps taken by each side
  for (int block = 0; done[0] < tg || done[1] < tg; ++block) {
    for (int turn = 0; turn < 2; ++turn) {
      const int side = (block + turn) % 2;  // 0: base, 1: with adapters
      for (int i = 0; i < kBlock && done[size_t(side)] < tg; ++i) {
        const int step = done[size_t(side)]++;
        batch.clear();
        for (int r = 0; r < n_rows; ++r) {
          batch.rows.push_back({token_at(step + r, n_vocab), pp + step, side * n_rows + r, true,
                                side == 0 ? AdapterRoute{} : routes[size_t(r) % routes.size()]});
        }
        const double t0 = now();
        run_or_fail(forward, batch);
        if (i == 0) continue;
        StepTimes& t = side == 0 ? base : lora;
        t.total += (now() - t0) * 1000.0;
        ++t.n;
      }
    }
  }
  return {base, lora};
}

struct Stat {
  double mean = 0, sd = 0;
};

template <typename F>
Stat repeat(int reps, F f) {
  std::vector<double> xs;
  for (int i = 0; i < reps; ++i) xs.push_back(f());
  Stat s;
  for (double x : xs) s.mean += x / xs.size();
  for (double x : xs) s.sd += (x - s.mean) * (x - s.mean) / std::max<size_t>(1, xs.size() - 1);
  s.sd = std::sqrt(s.sd);
  return s;
}

void bench_lora(Model& model, Forward& forward, KvCache& cache, const BenchOptions& o, int n_vocab);

// "1,2,4" → {1, 2, 4}; each a row count the KV cache can hold sequences for.
Result<std::vector<int>> parse_rows(const std::string& text) {
  std::vector<int> rows;
  for (std::string_view item : split(text, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    int n = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (ec != std::errc() || end != item.data() + item.size() || n < 1 || n > KvCache::kMaxSequences) {
      return errorf("invalid_argument", "--rows: '{}' is not a row count from 1 to {}", item,
                    KvCache::kMaxSequences);
    }
    rows.push_back(n);
  }
  return rows;
}

void run_bench(const BenchOptions& o) {
  auto parsed_rows = parse_rows(o.rows);
  if (!parsed_rows) fail(parsed_rows.error());
  const std::vector<int> rows = std::move(*parsed_rows);
  ModelLoadOptions load;
  load.copy_weights = !o.weights_in_place;
  auto loaded = Model::load(o.model, load);
  if (!loaded) fail(loaded.error());
  Model& model = **loaded;
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const int max_rows = rows.empty() ? 1 : *std::max_element(rows.begin(), rows.end());
  KvCacheOptions kv;
  auto kv_type = KvCache::type_from_name(o.kv_type);
  if (!kv_type) fail(kv_type.error());
  kv.type = *kv_type;
  const int seqs = std::max(max_rows, o.lora_rank > 0 ? 16 : 1);  // bench_lora: 8 rows on each side
  kv.n_seq_max = seqs;
  kv.n_cells = std::max({o.pp, o.tg, seqs * (o.batched_pp + o.batched_tg)});
  auto cache = KvCache::create(model.config(), kv);
  if (!cache) fail(cache.error());
  Forward forward(model, **cache, threads);
  const int n_vocab = model.config().n_vocab;

  std::printf("model: %s (%s, %.2f GiB, %d layers, embd %d), threads: %d, KV: %s, load: %.2f s\n",
              o.model.c_str(), model.config().arch.c_str(), double(model.weight_bytes()) / (1 << 30),
              model.config().n_layer, model.config().n_embd, threads, o.kv_type.c_str(),
              model.load_seconds());
  std::printf("%-14s %12s %10s\n", "test", "tok/s", "stddev");
  std::fflush(stdout);
  // Warm-up (page faults, thread start).
  bench_decode(forward, **cache, 4, n_vocab);
  if (o.pp > 0) {
    // One untimed run first, as llama-bench does: the first batch of a new
    // size builds its graph and faults in its compute buffer.
    bench_prefill(forward, **cache, o.pp, n_vocab);
    Stat s = repeat(o.reps, [&] { return bench_prefill(forward, **cache, o.pp, n_vocab); });
    std::printf("%-14s %12.2f %10.2f\n", ("pp" + std::to_string(o.pp)).c_str(), s.mean, s.sd);
    std::fflush(stdout);
  }
  if (o.tg > 0) {
    Stat s = repeat(o.reps, [&] { return bench_decode(forward, **cache, o.tg, n_vocab); });
    std::printf("%-14s %12.2f %10.2f\n", ("tg" + std::to_string(o.tg)).c_str(), s.mean, s.sd);
    std::fflush(stdout);
  }
  for (int n : rows) {
    Stat s = repeat(std::max(1, o.reps - 1),
                    [&] { return bench_batched(forward, **cache, n, o.batched_pp, o.batched_tg, n_vocab); });
    std::printf("%-14s %12.2f %10.2f\n", ("batched" + std::to_string(n)).c_str(), s.mean, s.sd);
    std::fflush(stdout);
  }
  if (o.lora_rank > 0) bench_lora(model, forward, **cache, o, n_vocab);
  std::printf("(%d graphs built)\n", forward.graphs_built());
}

// A random adapter of the given rank on every projection of every layer.
LoraWeights random_adapter(const ModelConfig& c, int rank, uint32_t seed, ggml_type type) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  LoraWeights w;
  w.scale = 1.0f;
  const LoraTarget targets[] = {LoraTarget::attn_q,      LoraTarget::attn_k,   LoraTarget::attn_v,
                                LoraTarget::attn_output, LoraTarget::ffn_gate, LoraTarget::ffn_up,
                                LoraTarget::ffn_down};
  for (int l = 0; l < c.n_layer; ++l) {
    for (const LoraTarget target : targets) {
      // Each layer's own shapes (gemma4's differ); projections a layer lacks are skipped.
      if (!lora_target_exists(c, l, target)) continue;
      const int n_in = lora_n_in(c, l, target), n_out = lora_n_out(c, l, target);
      LoraPair p;
      p.layer = l;
      p.target = target;
      p.rank = rank;
      std::vector<float> a(size_t(rank) * size_t(n_in)), b(size_t(n_out) * size_t(rank));
      for (float& x : a) x = normal(rng);
      for (float& x : b) x = normal(rng);
      p.a = LoraMatrix::of_floats(std::move(a), type);
      p.b = LoraMatrix::of_floats(std::move(b), type);
      w.pairs.push_back(std::move(p));
    }
  }
  return w;
}

// n_rows streams, each with its own rank-r adapter, against the same without.
void bench_lora(Model& model, Forward& forward, KvCache& cache, const BenchOptions& o, int n_vocab) {
  constexpr int kAdapters = 8;
  const ggml_type type = o.lora_dtype == "f32"    ? GGML_TYPE_F32
                         : o.lora_dtype == "bf16" ? GGML_TYPE_BF16
                                                  : GGML_TYPE_F16;
  std::vector<AdapterRoute> routes;
  std::vector<double> mounts;
  for (int i = 0; i < kAdapters; ++i) {
    LoraWeights w = random_adapter(model.config(), o.lora_rank, uint32_t(i + 1), type);
    const double t0 = now();
    auto slot = model.mount_lora(w);
    mounts.push_back((now() - t0) * 1000.0);
    if (!slot) fail(slot.error());
    AdapterRoute r;
    r.n = 1;
    r.slot[0] = *slot;
    r.scale[0] = 1.0f;
    routes.push_back(r);
  }
  std::vector<double> sorted = mounts;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "lora-mount-ms  %12.2f %10s  (median of %d rank-%d %s mounts; first %.1f, slowest %.1f; %.1f MiB)\n",
      sorted[sorted.size() / 2], "-", kAdapters, o.lora_rank, o.lora_dtype.c_str(), mounts[0], sorted.back(),
      double(model.lora().bytes()) / (1 << 20));
  const auto [base_ms, lora_ms] =
      interleaved_steps(forward, cache, kAdapters, o.batched_pp, o.batched_tg, n_vocab, routes);
  Stat base = repeat(std::max(1, o.reps - 1), [&] {
    return bench_batched(forward, cache, kAdapters, o.batched_pp, o.batched_tg, n_vocab);
  });
  Stat lora = repeat(std::max(1, o.reps - 1), [&] {
    return bench_batched(forward, cache, kAdapters, o.batched_pp, o.batched_tg, n_vocab, routes);
  });
  std::printf("%-14s %12.2f %10.2f\n", "batched8", base.mean, base.sd);
  std::printf("%-14s %12.2f %10.2f  (%.3f of base)\n", "batched8-lora", lora.mean, lora.sd,
              lora.mean / base.mean);
  if (base_ms.n > 0 && lora_ms.n > 0) {
    std::printf(
        "%-14s %12.3f %10s  (steps interleaved: base %.2f ms, lora %.2f ms a step, total of %d each)\n",
        "lora/base", base_ms.total / lora_ms.total, "-", base_ms.total / base_ms.n, lora_ms.total / lora_ms.n,
        base_ms.n);
  } else {
    std::printf("%-14s %12s %10s  (steps interleaved: none timed; --batched-gen must be above 1)\n",
                "lora/base", "-", "-");
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill, decode and batched decode speed of a model");
  cmd->add_option("model", o->model, "GGUF model file")->required();
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("-p,--prompt-tokens", o->pp, "Prefill test size (0 skips)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--gen-tokens", o->tg, "Decode test size (0 skips)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--reps", o->reps, "Repetitions")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--rows", o->rows, "Batched decode: rows per step, comma-separated ('' skips)")
      ->capture_default_str();
  cmd->add_option("--batched-prompt", o->batched_pp, "Batched decode: prompt tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--batched-gen", o->batched_tg, "Batched decode: decode steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--lora-rank", o->lora_rank,
                  "Also mount 8 random adapters of this rank and decode 8 rows, each with its own")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--lora-dtype", o->lora_dtype, "Type of those adapters' weights: f16, bf16 or f32")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f16, q8_0 or q4_0")->capture_default_str();
  cmd->add_flag("--weights-in-place", o->weights_in_place,
                "Multiply the weights in place in the file's mapping instead of copies in huge-page memory");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace graft::cli
