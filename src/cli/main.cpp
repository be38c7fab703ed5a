// graft: an LLM server and adapter workshop on ggml.
#include <cstdio>

#include "cli/commands.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"graft: serve GGUF models over an OpenAI-compatible API and work with LoRA adapters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "graft 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.parse_complete_callback([&] { graft::set_log_level(log_level); });

  graft::cli::add_make_test_model_command(app);
  graft::cli::add_inspect_command(app);
  graft::cli::add_serve_command(app);
  graft::cli::add_tokenize_command(app);
  graft::cli::add_run_command(app);
  graft::cli::add_bench_command(app);
  graft::cli::add_adapters_command(app);
  graft::cli::add_make_test_adapter_command(app);
  graft::cli::add_chat_template_command(app);
  graft::cli::add_fit_command(app);
  graft::cli::add_models_command(app);
  graft::cli::add_pull_command(app);
  graft::cli::add_train_command(app);
  graft::cli::add_jobs_command(app);
  graft::cli::add_pi_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    graft::cli::report_train_usage_error(app, e);
    return app.exit(e);
  }
  return 0;
}
