// Helpers for the command tests: a tiny served model with adapters a, b
// (loaded) and c (only in the store), and running the graft binary.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <future>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "adapters/fixtures.h"
#include "server/routes_adapters.h"
#include "server/routes_selection.h"

namespace graft::testing {

struct Output {
  int status = -1;
  std::string text;  // stdout and stderr
};

// Runs `env ENV graft ARGS` from `cwd`.
inline Output run_graft(const std::string& env, const std::string& args, const std::string& cwd = ".") {
  const std::string command =
      "cd '" + cwd + "' && env " + env + " " + std::string(GRAFT_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  Output out;
  if (!pipe) return out;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.text.append(buffer.data(), n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `graft serve` in this process, its state folder and adapter store under `root`.
class TestServer {
 public:
  explicit TestServer(const fs::path& root) : root_(root) {
    const std::string base = test_model_path(tiny_spec("qwen3", "qwen2", "f16"));
    for (const char* id : {"a", "b", "c"}) {
      write_peft_or_fail(store() / id, make_adapter(tiny_adapter_spec(base, static_cast<uint64_t>(id[0]))));
    }
    server::ServeOptions options;
    options.model_path = base;
    options.model_id = "tiny";
    options.n_ctx = 128;
    options.kv_budget_tokens = 512;
    options.threads = 1;
    auto model = server::ServedModel::load(options);
    EXPECT_TRUE(model.ok()) << model.error().message;
    if (!model.ok()) return;
    model_ = std::move(model).value();
    auto adapters = server::AdapterService::create(*model_, {{store().string()}, ""});
    EXPECT_TRUE(adapters.ok()) << adapters.error().message;
    if (!adapters.ok()) return;
    adapters_ = std::move(adapters).value();
    selection_ = std::make_unique<server::SelectionService>(*adapters_, state_file());
    server::ServerOptions server_options;
    server_options.http.port = 0;
    server_ = std::make_unique<server::Server>(*model_, server_options);
    adapters_->install(*server_);
    selection_->install(*server_);
    EXPECT_TRUE(server_->start().ok());
    for (const char* id : {"a", "b"}) {
      auto found = adapters_->store().find(id);
      EXPECT_TRUE(found.ok());
      if (!found.ok()) continue;
      std::promise<Status> loaded;
      adapters_->load_in_background(id, [&](const Status& s) { loaded.set_value(s); });
      const Status status = loaded.get_future().get();
      EXPECT_TRUE(status.ok()) << status.error().message;
    }
  }
  ~TestServer() {
    if (server_) server_->stop();
    selection_.reset();
    adapters_.reset();
    server_.reset();
    model_.reset();
  }

  fs::path store() const { return root_ / "store"; }
  fs::path state_file() const { return root_ / "server-state" / "selection.json"; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

 private:
  fs::path root_;
  std::unique_ptr<server::ServedModel> model_;
  std::unique_ptr<server::AdapterService> adapters_;
  std::unique_ptr<server::SelectionService> selection_;
  std::unique_ptr<server::Server> server_;
};

}  // namespace graft::testing
