// HttpServer: the network side, on Boost.Beast/Asio. One acceptor, one
// session object per connection (keep-alive, one request at a time), all I/O
// asynchronous on a small pool of threads — no thread per client. Sessions
// parse requests (with a body limit), hand them to the Router, write the
// answers (whole or as server-sent events) and tell the Exchange when the
// client goes away mid-answer.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "server/router.h"
#include "util/result.h"

namespace graft::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port)
  int threads = 1;  // I/O threads
  size_t body_limit = 8u << 20;
  std::chrono::seconds idle_timeout{120};  // a connection waiting for a request is closed after this
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, std::shared_ptr<const Router> router);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Errors say which address failed and why.
  Status start();
  int port() const;  // the bound port
  const HttpServerOptions& options() const { return options_; }

  // Blocks until stop() or, if stop_on_signals() was called, SIGINT/SIGTERM.
  void wait();
  void stop_on_signals();
  // Closes the listener and every connection, and joins the I/O threads.
  void stop();

 private:
  struct Impl;
  HttpServerOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft::server
