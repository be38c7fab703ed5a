// The HTTP types route handlers see: a parsed request, a response, and the
// Exchange through which a handler answers — at once or later, whole or as a
// stream of server-sent events. No Beast types here: only http_server.cpp
// knows Beast.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace graft::server {

using json = nlohmann::json;

struct HttpRequest {
  std::string method;                          // "GET", "POST", …
  std::string path;                            // without the query string
  std::string query;                           // after '?', undecoded
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::map<std::string, std::string> params;  // path parameters ({id} in the route pattern)

  // The header's value, or "" when absent (name in lower case).
  std::string header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // added to the defaults (CORS, …)
};

// One request/response exchange. A handler may keep it (shared_ptr) and answer
// later from any thread: every method may be called from any thread and is
// carried out on the connection's own strand, in call order. Exactly one of
// send() or start_events() … end_events() answers a request. Whoever keeps an
// Exchange must release it before the HttpServer is destroyed (stop it first:
// calls after stop() are dropped).
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual void send(HttpResponse response) = 0;
  void send_json(int status, const json& body);
  void send_error(const ApiError& error);

  // Server-sent events: headers first, then "data: <payload>\n\n" per event.
  virtual void start_events() = 0;
  virtual void send_event(std::string payload) = 0;
  // An event with an "id: <id>" line before its data: a client that
  // reconnects sends the last id it got in the Last-Event-ID header.
  virtual void send_event_with_id(std::string id, std::string payload) = 0;
  // An event with an "event: <name>" line before its data (Anthropic's and
  // the Responses API's typed events).
  virtual void send_named_event(std::string event, std::string payload) = 0;
  virtual void end_events() = 0;

  // Runs fn on the connection's strand (where handler callbacks should touch
  // their state).
  virtual void post(std::function<void()> fn) = 0;
  // fn runs once (on the strand) if the client goes away before the answer
  // is complete. Set it right after starting work the client may abandon.
  virtual void on_disconnect(std::function<void()> fn) = 0;
};

}  // namespace graft::server
