// `graft serve`: the OpenAI-compatible server (the main job).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/paths.h"

namespace graft::cli {

void add_serve_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("serve", "Serve a GGUF model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", *model, "GGUF model file (default: a small demo model with random weights)");
  cmd->callback([=] {
    std::string path = *model;
    if (path.empty()) {
      auto demo = ensure_demo_model();
      if (!demo) {
        std::fprintf(stderr, "graft: cannot prepare the demo model: %s\n", demo.error().message.c_str());
        throw CLI::RuntimeError(1);
      }
      path = *demo;
      std::fprintf(stderr,
                   "graft: no model given: serving the demo model %s.\n"
                   "graft: it has RANDOM weights, so its text is gibberish; to serve a real model run\n"
                   "graft:   graft serve /path/to/model.gguf\n",
                   path.c_str());
    }
    std::fprintf(stderr, "graft: the server is not built yet\n");
    throw CLI::RuntimeError(1);
  });
}

}  // namespace graft::cli
