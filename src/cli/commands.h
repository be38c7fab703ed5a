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

}  // namespace graft::cli
