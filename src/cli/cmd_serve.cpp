// `graft serve`: the OpenAI-compatible server (the main job).
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/paths.h"
#include "server/routes_adapters.h"
#include "server/server.h"
#include "util/log.h"

namespace graft::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string model_id;
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
  std::string compute_nice = "5";
  std::vector<std::string> adapter_dirs;
  std::string force_adapter;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

void serve(ServeArgs args) {
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
  options.model_id = args.model_id;
  options.n_ctx = args.ctx;
  options.parallel = args.parallel;
  options.threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  options.kv_type = args.kv_type;
  options.step_tokens = args.batch;
  options.prefix_cache = !args.no_prefix_cache;
  options.compute_nice =
      args.compute_nice == "idle" ? EngineConfig::kComputeIdle : std::stoi(args.compute_nice);
  int64_t budget_bytes = 0;
  if (!args.kv_budget.empty()) {
    auto budget = server::parse_kv_budget(args.kv_budget);
    if (!budget) fail(budget.error().message);
    options.kv_budget_tokens = budget->first;
    budget_bytes = budget->second;
  }

  std::fprintf(stderr, "graft: loading %s\n", args.model.c_str());
  auto model = server::ServedModel::load(options, budget_bytes);
  if (!model) fail(model.error().message);
  std::unique_ptr<server::ServedModel> served = std::move(*model);
  auto adapters = server::AdapterService::create(*served, {args.adapter_dirs, args.force_adapter});
  if (!adapters) fail(adapters.error().message);
  std::unique_ptr<server::AdapterService> adapter_service = std::move(*adapters);

  server::ServerOptions server_options;
  server_options.http.host = args.host;
  server_options.http.port = args.port;
  server_options.http.threads = args.http_threads;
  server_options.http.body_limit = static_cast<size_t>(args.max_body_mib * 1024 * 1024);
  server_options.api_key = args.api_key;
  auto server = std::make_unique<server::Server>(*served, server_options);
  adapter_service->install(*server);
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
  const AdapterSelection forced = adapter_service->mounted().default_selection();
  if (!forced.none()) {
    std::fprintf(stderr, "graft: every request uses adapter %s unless it asks for another (or \"none\")\n",
                 forced.to_string().c_str());
  }
  std::fflush(stderr);
  server->wait();
  std::fprintf(stderr, "graft: shutting down\n");
  server->stop();
  adapter_service.reset();  // after the HTTP side stopped, while the engine still runs
  served.reset();           // the engine ends what is left before the HTTP side goes
  server.reset();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a GGUF model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", args->model, "GGUF model file (default: a small demo model with random weights)");
  cmd->add_option("--host", args->host, "Address to listen on (0.0.0.0 for every interface)")
      ->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--threads", args->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option(
         "--ctx", args->ctx,
         "Longest sequence in tokens, prompt plus answer (default: the model's training context, at most "
         "8192)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--parallel", args->parallel, "Requests generated at once; more wait in a queue")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option(
      "--kv-budget", args->kv_budget,
      "KV cache for running requests and cached prompt prefixes: tokens (16384) or a size (2GiB). "
      "A request is admitted when its prompt plus max_tokens fits (default: a full context per "
      "parallel request, if memory allows)");
  cmd->add_option("--kv-type", args->kv_type, "KV cache type: f16 or q8_0")->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health")
      ->envname("GRAFT_API_KEY");
  cmd->add_option("--adapter-dir", args->adapter_dirs,
                  "Another folder of LoRA adapters (repeatable), searched after the user's adapter store");
  cmd->add_option(
      "--force-adapter", args->force_adapter,
      "Load this adapter (id, path, or a spec like a@0.5+b) at start and use it for every request "
      "that names none; a request may still ask for \"none\"");
  cmd->add_option("--alias", args->model_id,
                  "Model name in /v1/models and responses (default: the file name)");
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
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Do not reuse the KV of earlier prompts");
  cmd->callback([args] { serve(*args); });
}

}  // namespace graft::cli
