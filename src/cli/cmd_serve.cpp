// `graft serve`: the OpenAI-compatible server (the main job).
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "cli/paths.h"
#include "fit/fit.h"
#include "server/routes_adapters.h"
#include "server/routes_fit.h"
#include "server/routes_jobs.h"
#include "server/routes_metrics.h"
#include "server/routes_selection.h"
#include "server/server.h"
#include "util/log.h"
#include "util/priority.h"

namespace graft::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::vector<std::string> aliases;  // the first is the model's id
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 0;
  int ctx = 0;
  int parallel = 4;
  std::string kv_budget;
  std::string kv_type = "f16";
  std::string api_key;
  int batch = 512;
  int http_threads = 1;
  double max_body_mib = 8;
  bool no_prefix_cache = false;
  bool weights_in_place = false;
  std::string compute_nice = "5";
  std::vector<std::string> adapter_dirs;
  std::string force_adapter;
  bool auto_load_adapters = false;
  int max_loaded_adapters = 0;
  std::map<std::string, double> sampling;  // request field name → default, from the sampling flags
  int train_jobs = 1;
  std::string train_nice = "19";
  int train_threads = 0;
  int train_retries = 2;
  double max_upload_mib = 512;
  std::vector<std::string> train_data_dirs;
  std::string memory;
  bool ctx_given = false;
  bool parallel_given = false;
};

// The sampling flags: each sets the default of one request field (over the
// model's own recommendation), with llama-server's flag names.
struct SamplingFlag {
  const char* flag;
  const char* field;
  const char* help;
};
constexpr SamplingFlag kSamplingFlags[] = {
    {"--temp", "temperature", "Default temperature (0: greedy)"},
    {"--top-k", "top_k", "Default top_k (<= 0: off)"},
    {"--top-p", "top_p", "Default top_p (1: off)"},
    {"--min-p", "min_p", "Default min_p (0: off)"},
    {"--typical-p,--typical", "typical_p", "Default typical_p (1: off)"},
    {"--xtc-probability", "xtc_probability", "Default XTC probability (0: off)"},
    {"--xtc-threshold", "xtc_threshold", "Default XTC threshold"},
    {"--repeat-penalty", "repeat_penalty", "Default repetition penalty (1: off)"},
    {"--repeat-last-n", "repeat_last_n", "Default number of tokens the penalties look back over (-1: all)"},
    {"--presence-penalty", "presence_penalty", "Default presence penalty"},
    {"--frequency-penalty", "frequency_penalty", "Default frequency penalty"},
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

// What the fit (fit/fit.h) decides before the model loads: what was not
// given (parallel requests, the KV budget, and the context when even one
// request of the default does not fit), and whether what was given fits at
// all. A server that cannot fit refuses to start with the numbers.
fit::ServeSettings plan_memory(const fit::FitModel& model, const ServeArgs& args, fit::ServeSettings s,
                               int64_t budget_bytes, int64_t memory) {
  const bool budget_given = s.kv_budget_tokens > 0 || budget_bytes > 0;
  if (budget_bytes > 0) {
    s.kv_budget_tokens = budget_bytes / int64_t(KvCache::footprint(model.config(), s.kv_type).bytes_per_cell);
  }
  s = model.resolve(s);
  const fit::Usable usable = memory > 0 ? fit::usable_given(memory) : fit::usable_here();
  fit::FitReport report = fit::make_report(model, s, usable, nullptr, /*machines=*/false);
  auto replan = [&] {
    if (!budget_given) s.kv_budget_tokens = 0;
    s = model.resolve(s);
    report = fit::make_report(model, s, usable, nullptr, /*machines=*/false);
  };
  if (!args.parallel_given && !budget_given && report.answer.max_parallel < s.parallel) {
    std::fprintf(stderr, "graft: %d requests at once do not fit in memory here: using %d\n", s.parallel,
                 std::max(1, report.answer.max_parallel));
    s.parallel = std::max(1, report.answer.max_parallel);
    replan();
  }
  if (!report.answer.fits && !args.ctx_given && !budget_given && report.answer.max_safe_context > 0) {
    std::fprintf(stderr, "graft: a context of %d tokens does not fit in memory here: using %d\n", s.n_ctx,
                 report.answer.max_safe_context);
    s.n_ctx = report.answer.max_safe_context;
    replan();
  }
  if (!report.answer.fits) fail(fit::refusal(report));
  if (!budget_given) s.kv_budget_tokens = report.answer.kv_budget_tokens;
  return s;
}

void serve(ServeArgs args) {
  fit::baseline_rss();  // before the model: the process's own memory
  if (!args.model.empty()) {
    auto path = resolve_model_arg(args.model);
    if (!path) fail(path.error().message);
    args.model = *path;
  }
  if (args.model.empty()) {
    auto demo = ensure_demo_model();
    if (!demo) fail("cannot prepare the demo model: " + demo.error().message);
    args.model = *demo;
    std::fprintf(stderr,
                 "graft: no model given: serving the demo model %s.\n"
                 "graft: it has RANDOM weights, so its text is gibberish; to serve a real model run\n"
                 "graft:   graft serve /path/to/model.gguf\n",
                 args.model.c_str());
  }
  server::ServeOptions options;
  options.model_path = args.model;
  if (!args.aliases.empty()) {
    options.model_id = args.aliases.front();
    options.aliases.assign(args.aliases.begin() + 1, args.aliases.end());
  }
  options.n_ctx = args.ctx;
  options.parallel = args.parallel;
  options.threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  options.kv_type = args.kv_type;
  options.step_tokens = args.batch;
  options.prefix_cache = !args.no_prefix_cache;
  options.weights_in_place = args.weights_in_place;
  options.sampling_flags = args.sampling;
  options.compute_nice =
      args.compute_nice == "idle" ? EngineConfig::kComputeIdle : std::stoi(args.compute_nice);
  int64_t budget_bytes = 0;
  if (!args.kv_budget.empty()) {
    auto budget = server::parse_kv_budget(args.kv_budget);
    if (!budget) fail(budget.error().message);
    options.kv_budget_tokens = budget->first;
    budget_bytes = budget->second;
  }
  int64_t memory = 0;
  if (!args.memory.empty()) {
    auto bytes = server::parse_kv_budget(args.memory);
    if (!bytes || bytes->second == 0) fail("--memory '" + args.memory + "' is not a size like 12GiB");
    memory = bytes->second;
  }

  auto planned = fit::FitModel::open(args.model);
  if (!planned) fail(planned.error().message);
  fit::ServeSettings settings;
  settings.n_ctx = options.n_ctx;
  settings.parallel = options.parallel;
  const auto kv_type = KvCache::type_from_name(options.kv_type);
  settings.kv_type = kv_type ? *kv_type : GGML_TYPE_F16;
  settings.kv_budget_tokens = options.kv_budget_tokens;
  settings.batch = options.step_tokens;
  settings.threads = options.threads;
  if (kv_type) {  // else ServedModel::load names the bad type
    settings = plan_memory(**planned, args, settings, budget_bytes, memory);
    options.n_ctx = settings.n_ctx;
    options.parallel = settings.parallel;
    options.kv_budget_tokens = settings.kv_budget_tokens;
    budget_bytes = 0;
  }
  planned->reset();  // the served model reads the file's metadata again
  // An adapters/ folder beside the model file is searched too (after --adapter-dir).
  const fs::path beside = fs::path(args.model).parent_path() / "adapters";
  std::error_code ec;
  if (fs::is_directory(beside, ec)) args.adapter_dirs.push_back(beside.string());

  std::fprintf(stderr, "graft: loading %s\n", args.model.c_str());
  auto model = server::ServedModel::load(options, budget_bytes);
  if (!model) fail(model.error().message);
  std::unique_ptr<server::ServedModel> served = std::move(*model);
  server::AdapterServiceOptions adapter_options;
  adapter_options.adapter_dirs = args.adapter_dirs;
  adapter_options.force = args.force_adapter;
  adapter_options.auto_load = args.auto_load_adapters;
  adapter_options.max_loaded = args.max_loaded_adapters;
  auto adapters = server::AdapterService::create(*served, adapter_options);
  if (!adapters) fail(adapters.error().message);
  std::unique_ptr<server::AdapterService> adapter_service = std::move(*adapters);

  server::TrainingOptions training_options;
  training_options.model_path = fs::absolute(args.model);
  training_options.trainer = {fs::read_symlink("/proc/self/exe").string(), "train"};
  training_options.max_jobs = args.train_jobs;
  training_options.priority = *parse_cpu_priority(args.train_nice);
  training_options.threads = args.train_threads;
  training_options.max_retries = args.train_retries;
  training_options.max_upload = static_cast<size_t>(args.max_upload_mib * 1024 * 1024);
  training_options.data_dirs.assign(args.train_data_dirs.begin(), args.train_data_dirs.end());
  auto training = server::TrainingService::create(*served, training_options, adapter_service.get());
  if (!training) fail(training.error().message);
  std::unique_ptr<server::TrainingService> training_service = std::move(*training);

  server::ServerOptions server_options;
  server_options.http.host = args.host;
  server_options.http.port = args.port;
  server_options.http.threads = args.http_threads;
  server_options.http.body_limit = static_cast<size_t>(args.max_body_mib * 1024 * 1024);
  server_options.api_key = args.api_key;
  auto server = std::make_unique<server::Server>(*served, server_options);
  adapter_service->install(*server);
  auto selection_service =
      std::make_unique<server::SelectionService>(*adapter_service, shared_selection_path());
  selection_service->install(*server);
  training_service->install(*server);
  server::install_metrics(*server);
  auto fit_service = std::make_unique<server::FitService>(args.model, settings, memory);
  fit_service->install(*server);
  Status started = server->start();
  if (!started) fail(started.error().message);

  const EngineConfig& engine = served->engine().config();
  const EngineStats stats = served->engine().stats();
  std::fprintf(
      stderr,
      "graft: serving '%s' on http://%s:%d (OpenAI API under /v1)\n"
      "graft: context %d tokens, %d requests at once, KV budget %lld tokens (%lld MiB), %d threads%s\n",
      served->id().c_str(), args.host.c_str(), server->port(), engine.n_ctx, engine.max_running,
      static_cast<long long>(engine.kv_budget_tokens), static_cast<long long>(stats.kv_budget_bytes >> 20),
      options.threads, args.api_key.empty() ? "" : ", API key required");
  const server::SamplingDefaults& sampling = served->sampling_defaults();
  if (!sampling.source.empty()) {
    const auto values = sampling.to_json();
    std::string line;
    for (const auto& [field, source] : sampling.source) {
      line += fmt::format("{}{} {} ({})", line.empty() ? "" : ", ", field, values[field].dump(), source);
    }
    std::fprintf(stderr, "graft: sampling defaults: %s\n", line.c_str());
  }
  const AdapterSelection forced = adapter_service->mounted().default_selection();
  if (!forced.none()) {
    std::fprintf(stderr, "graft: every request uses adapter %s unless it asks for another (or \"none\")\n",
                 forced.to_string().c_str());
  }
  std::fflush(stderr);
  server->wait();
  std::fprintf(stderr, "graft: shutting down\n");
  server->stop();
  training_service.reset();  // running training jobs pause, and resume at the next start
  fit_service.reset();
  selection_service.reset();
  adapter_service.reset();  // after the HTTP side stopped, while the engine still runs
  served.reset();           // the engine ends what is left before the HTTP side goes
  server.reset();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a GGUF model over an OpenAI-compatible HTTP API");
  cmd->add_option(
      "model", args->model,
      "GGUF model file, or org/name[:file.gguf] from the Hugging Face cache (default: a small demo "
      "model with random weights)");
  cmd->add_option("--host", args->host, "Address to listen on (0.0.0.0 for every interface)")
      ->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--threads", args->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  auto* ctx =
      cmd->add_option(
             "--ctx", args->ctx,
             "Longest sequence in tokens, prompt plus answer (default: the model's training context, at most "
             "8192)")
          ->check(CLI::Range(0, 1 << 24));
  auto* parallel =
      cmd->add_option("--parallel", args->parallel,
                      "Requests generated at once; more wait in a queue (default: 4, or as many as "
                      "fit in memory)")
          ->check(CLI::Range(1, server::ServeOptions::kMaxParallel));
  cmd->add_option(
      "--kv-budget", args->kv_budget,
      "KV cache for running requests and cached prompt prefixes: tokens (16384) or a size (2GiB). "
      "A request is admitted when its prompt plus max_tokens fits (default: a full context per "
      "parallel request, as graft fit plans it)");
  cmd->add_option("--memory", args->memory,
                  "Memory graft may plan with, e.g. 12GiB (default: what is free now, minus a margin); "
                  "settings that do not fit refuse to start");
  cmd->add_option("--kv-type", args->kv_type, "KV cache type: f16, q8_0 or q4_0")->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health")
      ->envname("GRAFT_API_KEY");
  cmd->add_option("--adapter-dir", args->adapter_dirs,
                  "Another folder of LoRA adapters (repeatable), searched after the user's adapter store");
  cmd->add_option(
      "--force-adapter", args->force_adapter,
      "Load this adapter (id, path, or a spec like a@0.5+b) at start and use it for every request "
      "that names none; a request may still ask for \"none\"");
  cmd->add_option("--alias", args->aliases,
                  "Model name in /v1/models and responses (default: the file name); repeat it to give the "
                  "model more names a request's \"model\" may use")
      ->allow_extra_args(false);  // one name each time, so `--alias NAME MODEL` keeps MODEL
  cmd->add_flag("--auto-load-adapters", args->auto_load_adapters,
                "Load an adapter of the store when a request names it (in \"model\" or \"adapter\") and it "
                "is not loaded; concurrent requests for it wait for one load");
  cmd->add_option("--max-loaded-adapters", args->max_loaded_adapters,
                  "Most adapters loaded at once (0: no limit); to load another, the least recently used one "
                  "that no request uses is unloaded")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--batch", args->batch, "Most tokens in one batch (decode rows plus prompt chunks)")
      ->capture_default_str()
      ->check(CLI::Range(8, 8192));
  cmd->add_option("--http-threads", args->http_threads, "Threads for HTTP I/O")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--max-body", args->max_body_mib, "Largest request body in MiB")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  cmd->add_option(
         "--compute-nice", args->compute_nice,
         "Niceness of the compute threads (0-19, or idle); above 0 the HTTP side (and /health) answers "
         "at once while a batch computes, 0 keeps them equal; idle: they run only when nothing else "
         "wants a core, which keeps /health quickest but lets any other program slow generation")
      ->capture_default_str()
      ->check(CLI::IsMember({"idle"}) | CLI::Range(0, 19));
  cmd->add_option("--train-jobs", args->train_jobs, "Training jobs run at once; more wait in a queue")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  cmd->add_option(
         "--train-nice", args->train_nice,
         "Niceness of training jobs (0-19, or idle): above --compute-nice, serving keeps the cores it "
         "needs and training gets the rest")
      ->capture_default_str()
      ->check(CLI::IsMember({"idle"}) | CLI::Range(0, 19));
  cmd->add_option("--train-threads", args->train_threads, "Threads of each training job (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--train-retries", args->train_retries,
                  "Times a crashed training job is restarted from its last checkpoint before it fails")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  cmd->add_option("--train-data-dir", args->train_data_dirs,
                  "A folder whose data files POST /v1/files/inspect may read by path (repeatable)");
  cmd->add_option("--max-upload", args->max_upload_mib, "Largest file upload (POST /v1/files) in MiB")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 65536.0));
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Do not reuse the KV of earlier prompts");
  cmd->add_flag("--weights-in-place", args->weights_in_place,
                "Multiply the weights in place in the model file's mapping, shared with other processes "
                "mapping the file, instead of copies in huge-page memory (slower decode)");
  for (const SamplingFlag& f : kSamplingFlags) {
    std::string field = f.field;
    cmd->add_option_function<double>(
           f.flag, [args, field](double value) { args->sampling[field] = value; },
           std::string(f.help) + " for requests that do not set it; overrides the model's recommendation")
        ->group("Sampling defaults");
  }
  cmd->callback([args, ctx, parallel] {
    args->ctx_given = ctx->count() > 0;
    args->parallel_given = parallel->count() > 0;
    serve(*args);
  });
}

}  // namespace graft::cli
