// Router: a table of routes (method + path pattern → handler). Patterns are
// literal segments and {name} segments, e.g. "/v1/adapters/{id}". Dispatch
// answers CORS preflights, unknown paths (404), wrong methods (405) and
// missing or wrong API keys (401) before any handler runs; a handler that
// throws gets a 500 in OpenAI's error shape.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/http.h"

namespace graft::server {

using Handler = std::function<void(HttpRequest& request, std::shared_ptr<Exchange> exchange)>;

struct RouteOptions {
  bool public_route = false;  // answered without the API key (e.g. /health)
};

class Router {
 public:
  void add(std::string method, std::string pattern, Handler handler, RouteOptions options = {});
  // Requests to non-public routes must carry "Authorization: Bearer <key>" ("" = no key).
  void set_api_key(std::string key) { api_key_ = std::move(key); }
  // Sees every request first, with the pattern of the route its path
  // matched ("" when none did), and may wrap its exchange (e.g. to count
  // answers by route and status for /metrics).
  using Observer = std::function<std::shared_ptr<Exchange>(
      const HttpRequest& request, const std::string& route, std::shared_ptr<Exchange> exchange)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  void dispatch(HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

 private:
  struct Route {
    std::string pattern;
    std::string method;
    std::vector<std::string> segments;
    Handler handler;
    RouteOptions options;
  };
  static bool match(const Route& route, const std::vector<std::string>& path,
                    std::map<std::string, std::string>& params);
  bool authorized(const HttpRequest& request) const;

  std::vector<Route> routes_;
  std::string api_key_;
  Observer observer_;
};

// Splits "/a/b/" into {"a", "b"} (percent-decoding each segment).
std::vector<std::string> split_path(const std::string& path);
std::string percent_decode(const std::string& text);

}  // namespace graft::server
