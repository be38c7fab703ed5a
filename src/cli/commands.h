// Each `graft` subcommand registers itself on the root app here.
#pragma once

#include <CLI/CLI.hpp>

namespace graft::cli {

void add_make_test_model_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_adapters_command(CLI::App& app);
void add_make_test_adapter_command(CLI::App& app);
void add_chat_template_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_pull_command(CLI::App& app);
void add_train_command(CLI::App& app);
// `graft train --json` with options CLI11 cannot parse: the error event the
// job runner reads (CLI11 then prints its own message and exit status).
void report_train_usage_error(const CLI::App& app, const CLI::ParseError& e);
void add_jobs_command(CLI::App& app);
void add_pi_command(CLI::App& app);

}  // namespace graft::cli
