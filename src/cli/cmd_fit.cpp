// `graft fit`: will a model fit here, with how much context and how many
// parallel requests, and how fast will it run (fit/fit.h). `--probe`
// measures this machine's speed once and caches it.
#include <cstdio>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "fit/fit.h"
#include "server/served_model.h"

namespace graft::cli {

namespace {

struct FitArgs {
  std::string model;
  int ctx = 0;
  int parallel = 4;
  std::string kv_type = "f16";
  std::string kv_budget;
  std::string memory;
  int batch = 512;
  int threads = 0;
  int adapters = 0;
  int adapter_rank = 16;
  bool json = false;
  bool probe = false;
  bool quick = false;
  std::string probe_file;
  bool no_probe = false;
  bool no_machines = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

// The probe to predict with: --probe runs one (and caches it unless quick),
// --probe-file reads one, else the cache; none cached: run and cache one.
std::optional<fit::ProbeResult> get_probe(const FitArgs& a, int threads) {
  if (!a.probe_file.empty()) {
    auto r = fit::read_probe_file(a.probe_file);
    if (!r) fail(r.error().message);
    return *r;
  }
  const fs::path cache = fit::probe_cache_file();
  if (!a.probe) {
    auto cached = fit::load_cached_probe(cache, fit::cpu_model(), threads);
    if (!cached) fail(cached.error().message);
    if (*cached) return **cached;
    std::fprintf(stderr, "graft: measuring this machine's speed once (a few seconds; cached in %s)\n",
                 cache.c_str());
  }
  auto r = fit::run_probe({threads, a.quick});
  if (!r) fail(r.error().message);
  if (!a.quick) {
    if (Status saved = fit::save_probe(cache, *r); !saved) fail(saved.error().message);
  }
  return *r;
}

void print_probe(const fit::ProbeResult& p, bool json) {
  if (json) {
    std::printf("%s\n", p.to_json().dump(2).c_str());
    return;
  }
  std::printf("probe: %s, %d threads, %s%s\n", p.cpu.c_str(), p.threads, p.measured_at.c_str(),
              p.quick ? " (quick)" : "");
  std::printf("  memory bandwidth (F16 weights, 1 row)  %8.1f GB/s\n", p.memory_bandwidth() / 1e9);
  std::printf("  int8 rate (Q8_0 weights, many rows)    %8.1f GFLOP/s\n", p.int8_flops() / 1e9);
  std::printf("  F16 rate (many rows)                   %8.1f GFLOP/s\n", p.f16_flops() / 1e9);
  for (const auto& [name, r] : p.types) {
    std::printf(
        "  %-6s weights %6.1f GB/s at 1 row, %6.1f GB/s at 8 rows (in layers: %6.1f, %6.1f); prefill %7.1f "
        "GFLOP/s\n",
        name.c_str(), r.bytes_per_s / 1e9, r.bytes_per_s_8 / 1e9, r.layer_bytes_per_s / 1e9,
        r.layer_bytes_per_s_8 / 1e9, r.prefill_flops / 1e9);
  }
  std::printf(
      "  attention, heads 128 wide: %.2f G/s (decode), %.2f G/s (prompt); 64 wide: %.2f, %.2f; %.1f us per "
      "decode row's op\n",
      p.attention_decode / 1e9, p.attention_prefill / 1e9, p.attention_decode_64 / 1e9,
      p.attention_prefill_64 / 1e9, p.attention_op_seconds * 1e6);
  std::printf("  graph nodes: %.2f us each\n", p.node_seconds * 1e6);
}

void run_fit(const FitArgs& a) {
  fit::baseline_rss();
  const int threads = a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (a.model.empty()) {
    if (!a.probe)
      fail("give a MODEL (a .gguf file or org/name[:file.gguf]), or --probe alone to measure this machine");
    print_probe(*get_probe(a, threads), a.json);
    return;
  }
  auto path = resolve_model_arg(a.model);
  if (!path) fail(path.error().message);
  auto model = fit::FitModel::open(*path);
  if (!model) fail(model.error().message);
  fit::ServeSettings s;
  s.n_ctx = a.ctx;
  s.parallel = a.parallel;
  s.batch = a.batch;
  s.threads = threads;
  s.adapters = a.adapters;
  s.adapter_rank = a.adapter_rank;
  const auto kv_type = KvCache::type_from_name(a.kv_type);
  if (!kv_type) fail("--kv-type: " + kv_type.error().message);
  s.kv_type = *kv_type;
  if (!a.kv_budget.empty()) {
    auto budget = server::parse_kv_budget(a.kv_budget);
    if (!budget) fail(budget.error().message);
    const auto per_cell = int64_t(KvCache::footprint((*model)->config(), s.kv_type).bytes_per_cell);
    s.kv_budget_tokens = budget->first > 0 ? budget->first : budget->second / per_cell;
  }
  s = (*model)->resolve(s);
  if (!a.kv_budget.empty() && s.kv_budget_tokens < s.n_ctx) {
    fail(fmt::format("--kv-budget {} ({} tokens) does not hold one full context of {} tokens", a.kv_budget,
                     s.kv_budget_tokens, s.n_ctx));
  }
  fit::Usable usable = fit::usable_here();
  if (!a.memory.empty()) {
    auto bytes = server::parse_kv_budget(a.memory);
    if (!bytes || bytes->second == 0) fail("--memory '" + a.memory + "' is not a size like 12GiB");
    usable = fit::usable_given(bytes->second);
  }
  const std::optional<fit::ProbeResult> probe = a.no_probe ? std::nullopt : get_probe(a, threads);
  const fit::FitReport report =
      fit::make_report(**model, s, usable, probe ? &*probe : nullptr, !a.no_machines);
  if (a.json) {
    std::printf("%s\n", fit::to_json(report).dump(2).c_str());
  } else {
    std::printf("%s", fit::to_text(report).c_str());
  }
}

}  // namespace

void add_fit_command(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto* cmd = app.add_subcommand(
      "fit",
      "Predict whether a model fits in memory here (context, parallel requests, KV budget) and its speed");
  cmd->add_option("model", a->model, "GGUF model file, or org/name[:file.gguf] from the Hugging Face cache");
  cmd->add_option("--ctx", a->ctx,
                  "Context per request (default: the training context, at most 8192, as serve)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--parallel", a->parallel, "Requests at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--kv-type", a->kv_type, "KV cache type: f16, q8_0 or q4_0")->capture_default_str();
  cmd->add_option("--kv-budget", a->kv_budget,
                  "KV budget: tokens (16384) or a size (2GiB) (default: ctx x parallel)");
  cmd->add_option("--memory", a->memory,
                  "Memory graft may use, e.g. 12GiB (default: what is free now, minus a margin)");
  cmd->add_option("--batch", a->batch, "Most tokens in one batch, as serve's --batch")
      ->capture_default_str()
      ->check(CLI::Range(8, 8192));
  cmd->add_option("--threads", a->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--adapters", a->adapters, "LoRA adapters loaded at once")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  cmd->add_option("--adapter-rank", a->adapter_rank, "Their rank")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "Print JSON (the same as GET /fit)");
  auto* probe = cmd->add_flag("--probe", a->probe,
                              "Measure this machine's speed now (and cache it in ~/.cache/graft/probe.json)");
  cmd->add_flag("--quick", a->quick, "With --probe: a rough probe of well under a second, not cached")
      ->needs(probe);
  auto* probe_file =
      cmd->add_option("--probe-file", a->probe_file, "Predict speed from this probe result (JSON) instead")
          ->check(CLI::ExistingFile)
          ->excludes(probe);
  cmd->add_flag("--no-probe", a->no_probe, "Memory answers only: no speed, so no probe")
      ->excludes(probe)
      ->excludes(probe_file);
  cmd->add_flag("--no-machines", a->no_machines, "Leave out the table of 8-128 GiB machines");
  cmd->callback([a] { run_fit(*a); });
}

}  // namespace graft::cli
