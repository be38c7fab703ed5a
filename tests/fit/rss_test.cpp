// The memory model against a real `graft serve` under full load: the peak
// resident memory (VmHWM) it reaches must be within 10 % of what
// `graft fit` predicts for the same settings. (bench/fit.sh does the same
// for the 1B-shaped model in three weight types.)
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "fit/probe.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft::fit {
namespace {

std::string run_capture(const std::string& command) {
  std::string out;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log;
  ~Server() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Starts graft serve and reads its log until it listens.
bool start(Server& s, const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  s.pid = ::fork();
  if (s.pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    std::vector<char*> argv{const_cast<char*>(GRAFT_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(GRAFT_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  const std::regex listening("serving '.*' on http://127\\.0\\.0\\.1:(\\d+)");
  char buffer[4096];
  ssize_t n;
  std::smatch m;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) {
    s.log.append(buffer, size_t(n));
    if (std::regex_search(s.log, m, listening)) {
      s.port = std::stoi(m[1]);
      break;
    }
  }
  // Keep draining the log so the server never blocks on it.
  std::thread([fd = fds[0]] {
    char b[4096];
    while (::read(fd, b, sizeof b) > 0) {
    }
    ::close(fd);
  }).detach();
  return s.port > 0;
}

size_t ignore_body(char*, size_t size, size_t n, void*) {
  return size * n;
}

long post(int port, const std::string& body) {
  CURL* curl = curl_easy_init();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/v1/completions";
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, ignore_body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 300L);
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return status;
}

int64_t peak_rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(FitRss, PredictedPeakIsWithinTenPercentOfServeUnderFullLoad) {
  TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "f16");
  spec.n_embd = 512;
  spec.n_layer = 4;
  spec.n_head = 8;
  spec.n_head_kv = 4;
  spec.n_ff = 1536;
  spec.n_ctx = 4096;
  // Tied: the output product reads the whole embedding every step, so a
  // full load makes all of it resident (as the model counts it).
  spec.tied_output = true;
  const std::string model = testing::test_model_path(spec);
  constexpr int kCtx = 1024, kParallel = 2, kPrompt = 1000, kVocab = 32000;

  // Speed does not matter here: a made-up probe keeps graft fit from measuring.
  const std::string probe_file = testing::scratch_dir() + "/probe.json";
  ProbeResult p;
  p.cpu = "test";
  p.threads = 2;
  p.types["f16"] = {1e10, 1e10, 1e10, 1e10, 1e10};
  p.attention_decode = p.attention_prefill = p.attention_decode_64 = p.attention_prefill_64 = 1e10;
  p.node_seconds = 1e-6;
  ASSERT_TRUE(write_file_atomic(probe_file, p.to_json().dump()).ok());
  const std::string settings =
      " --ctx " + std::to_string(kCtx) + " --parallel " + std::to_string(kParallel) + " --threads 2";
  const std::string out = run_capture(std::string(GRAFT_BINARY) + " fit " + model + settings +
                                      " --json --no-machines --probe-file " + probe_file);
  const nlohmann::json fit = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(fit.is_discarded()) << out;
  const int64_t predicted = fit["memory"]["total"].get<int64_t>();

  Server server;
  ASSERT_TRUE(start(server, {"serve", model, "--port", "0", "--ctx", std::to_string(kCtx), "--parallel",
                             std::to_string(kParallel), "--threads", "2"}))
      << server.log;
  // Full load: every parallel request fills its context.
  {
    std::vector<std::thread> clients;
    for (int c = 0; c < kParallel; ++c) {
      nlohmann::json prompt = nlohmann::json::array();
      for (int i = 0; i < kPrompt; ++i) prompt.push_back((c * kPrompt + i) * 13 % kVocab);
      const std::string body = nlohmann::json{
          {"prompt", prompt},
          {"max_tokens", kCtx - kPrompt},
          {"temperature", 0},
          {"ignore_eos", true}}.dump();
      clients.emplace_back([&server, body] { EXPECT_EQ(post(server.port, body), 200); });
    }
    for (auto& t : clients) t.join();
  }
  const int64_t measured = peak_rss(server.pid);
  ASSERT_GT(measured, 0);
  const double error = double(predicted - measured) / double(measured);
  RecordProperty("predicted_bytes", std::to_string(predicted));
  RecordProperty("measured_bytes", std::to_string(measured));
  std::printf("predicted %.1f MiB, measured %.1f MiB (%+.1f %%)\n", predicted / 1048576.0,
              measured / 1048576.0, 100 * error);
  EXPECT_LT(std::abs(error), 0.10) << "predicted " << predicted << ", measured " << measured << "\n" << out;
}

}  // namespace
}  // namespace graft::fit
