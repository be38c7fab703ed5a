// `graft pi install`: points the Pi coding agent at a running graft serve.
// Writes graft's provider into Pi's models.json (the served model, its context
// from the server) and graft's extension into Pi's extensions folder, which
// sends the adapter selection ($GRAFT_ADAPTER, else `graft adapters use`) with
// each request. Running it again updates both; other providers stay.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/http_client.h"
#include "cli/pi_config.h"

namespace graft::cli {

namespace {

using json = nlohmann::json;

struct PiArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  int max_tokens = 0;  // 0: a quarter of the context
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

// The served model (the /v1/models entry that is no adapter) and its context.
PiModel served_model(const PiArgs& args) {
  auto client = HttpClient::connect_to(args.url, args.api_key);
  if (!client) fail(client.error().message);
  auto reply = client->request("GET", "/v1/models");
  if (!reply) fail(reply.error().message + " (start it first: Pi's settings come from the served model)");
  if (reply->status != 200) fail(error_message(*reply));
  const json body = json::parse(reply->body, nullptr, false);
  if (!body.is_object() || !body.contains("data") || !body["data"].is_array()) {
    fail(fmt::format("{} is not graft serve: its /v1/models has no model list", args.url));
  }
  for (const json& m : body["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    if (m.contains("parent") && !m["parent"].is_null()) continue;  // an adapter
    PiModel model;
    model.id = m["id"].get<std::string>();
    const json meta = m.value("meta", json::object());
    if (!meta.is_object() || !meta.contains("n_ctx") || !meta["n_ctx"].is_number_integer()) {
      fail(fmt::format("{}'s /v1/models gives no context length (meta.n_ctx) for '{}'", args.url, model.id));
    }
    model.context_window = meta["n_ctx"].get<int>();
    model.max_tokens = args.max_tokens > 0 ? std::min(args.max_tokens, model.context_window)
                                           : std::max(1, model.context_window / 4);
    std::string base = args.url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    model.base_url = base + "/v1";
    return model;
  }
  fail(fmt::format("{} serves no model (its /v1/models lists none)", args.url));
}

// Writes `text` unless the file holds it already; says which.
bool write_if_changed(const fs::path& path, std::string_view text) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    auto old = read_file(path);
    if (old && *old == text) return false;
  }
  fs::create_directories(path.parent_path(), ec);
  if (ec) fail(fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
  if (Status written = write_file_atomic(path, text); !written) fail(written.error().message);
  return true;
}

void install(const PiArgs& args) {
  const PiModel model = served_model(args);
  const fs::path dir = pi_agent_dir();
  const fs::path models_path = dir / "models.json";
  std::string existing;
  std::error_code ec;
  if (fs::exists(models_path, ec)) {
    auto text = read_file(models_path);
    if (!text) fail(text.error().message);
    existing = std::move(text).value();
  }
  auto merged = merge_pi_models(existing, model);
  if (!merged) fail(fmt::format("{}: {}", models_path.string(), merged.error().message));
  const bool models_changed = write_if_changed(models_path, merged->dump(2) + "\n");
  const fs::path extension_path = dir / "extensions" / kPiExtensionFile;
  const bool extension_changed = write_if_changed(extension_path, pi_extension_source());

  std::printf("%s Pi's provider '%s': model '%s' at %s, context %d tokens, replies up to %d (%s)\n",
              models_changed ? "wrote" : "kept", kPiProvider, model.id.c_str(), model.base_url.c_str(),
              model.context_window, model.max_tokens, models_path.c_str());
  std::printf("%s graft's adapter extension (%s)\n", extension_changed ? "wrote" : "kept",
              extension_path.c_str());
  std::printf(
      "run: pi --provider %s --model %s   (GRAFT_ADAPTER=ID, or `graft adapters use ID`, picks the "
      "adapter)\n",
      kPiProvider, model.id.c_str());
  if (!args.api_key.empty())
    std::printf("the server needs its key: export GRAFT_API_KEY before running pi\n");
}

}  // namespace

void add_pi_command(CLI::App& app) {
  auto args = std::make_shared<PiArgs>();
  auto* cmd = app.add_subcommand("pi", "Set up the Pi coding agent to use graft");
  cmd->require_subcommand(1);
  auto* install_cmd = cmd->add_subcommand(
      "install", "Write graft's provider into Pi's models.json and install graft's adapter extension");
  install_cmd->add_option("--url", args->url, "The running graft serve")
      ->capture_default_str()
      ->envname("GRAFT_URL");
  install_cmd->add_option("--api-key", args->api_key, "The server's API key (to read its model)")
      ->envname("GRAFT_API_KEY");
  install_cmd
      ->add_option("--max-tokens", args->max_tokens,
                   "Longest reply Pi asks for (default: a quarter of the context)")
      ->check(CLI::PositiveNumber);
  install_cmd->footer(
      fmt::format("Pi's folder: {} ($PI_CODING_AGENT_DIR, else ~/.pi/agent).", pi_agent_dir().string()));
  install_cmd->callback([args] { install(*args); });
}

}  // namespace graft::cli
