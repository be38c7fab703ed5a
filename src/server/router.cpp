#include "server/router.h"

#include <algorithm>
#include <exception>

#include "util/log.h"

namespace graft::server {

std::string HttpRequest::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

void Exchange::send_json(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  send(std::move(response));
}

void Exchange::send_error(const ApiError& error) {
  send_json(error.status(), error.to_json());
}

std::string percent_decode(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

std::map<std::string, std::string> parse_query(const std::string& query) {
  std::map<std::string, std::string> params;
  size_t start = 0;
  while (start < query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    std::string pair = query.substr(start, end - start);
    std::replace(pair.begin(), pair.end(), '+', ' ');
    const size_t eq = pair.find('=');
    if (!pair.empty()) {
      params[percent_decode(pair.substr(0, eq))] =
          eq == std::string::npos ? "" : percent_decode(pair.substr(eq + 1));
    }
    start = end + 1;
  }
  return params;
}

std::optional<ApiError> check_query_names(const std::map<std::string, std::string>& query,
                                          std::initializer_list<const char*> known) {
  for (const auto& [name, value] : query) {
    bool ok = false;
    for (const char* k : known) ok = ok || name == k;
    if (!ok) return bad_request("unknown query parameter '" + name + "'", name, ApiCode::kUnknownParameter);
  }
  return std::nullopt;
}

std::optional<ApiError> read_query_limit(const std::map<std::string, std::string>& query, int max,
                                         int fallback, int& limit) {
  limit = fallback;
  auto it = query.find("limit");
  if (it == query.end()) return std::nullopt;
  try {
    size_t used = 0;
    limit = std::stoi(it->second, &used);
    if (used == it->second.size() && limit >= 1 && limit <= max) return std::nullopt;
  } catch (const std::exception&) {
  }
  return bad_request(
      "'limit' must be an integer from 1 to " + std::to_string(max) + " (got '" + it->second + "')", "limit");
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) segments.push_back(percent_decode(path.substr(start, end - start)));
    start = end + 1;
  }
  return segments;
}

void Router::add(std::string method, std::string pattern, Handler handler, RouteOptions options) {
  std::vector<std::string> segments = split_path(pattern);
  routes_.push_back(
      Route{std::move(pattern), std::move(method), std::move(segments), std::move(handler), options});
}

bool Router::match(const Route& route, const std::vector<std::string>& path,
                   std::map<std::string, std::string>& params) {
  if (route.segments.size() != path.size()) return false;
  std::map<std::string, std::string> found;
  for (size_t i = 0; i < path.size(); ++i) {
    const std::string& seg = route.segments[i];
    if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
      found[seg.substr(1, seg.size() - 2)] = path[i];
    } else if (seg != path[i]) {
      return false;
    }
  }
  params = std::move(found);
  return true;
}

size_t Router::body_limit(std::string_view method, std::string_view path, size_t fallback) const {
  const std::vector<std::string> segments = split_path(std::string(path));
  for (const Route& route : routes_) {
    std::map<std::string, std::string> params;
    if (route.method == method && route.options.body_limit > 0 && match(route, segments, params)) {
      return route.options.body_limit;
    }
  }
  return fallback;
}

bool Router::authorized(const HttpRequest& request) const {
  if (api_key_.empty()) return true;
  const std::string auth = request.header("authorization");
  constexpr std::string_view kPrefix = "Bearer ";
  if (auth.starts_with(kPrefix) && auth.substr(kPrefix.size()) == api_key_) return true;
  // Anthropic's clients send the key in x-api-key.
  return request.header("x-api-key") == api_key_;
}

void Router::dispatch(HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  if (request.method == "OPTIONS") {  // CORS preflight
    HttpResponse response;
    response.status = 204;
    response.content_type.clear();
    response.headers = {
        {"Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS"},
        {"Access-Control-Allow-Headers",
         "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta, OpenAI-Organization, "
         "OpenAI-Project, X-Stainless-Lang, X-Stainless-Arch"},
        {"Access-Control-Max-Age", "86400"}};
    exchange->send(std::move(response));
    return;
  }
  const std::vector<std::string> path = split_path(request.path);
  const Route* found = nullptr;
  const Route* path_match = nullptr;
  bool path_known = false;
  for (const Route& route : routes_) {
    std::map<std::string, std::string> params;
    if (!match(route, path, params)) continue;
    path_known = true;
    if (!path_match) path_match = &route;
    if (route.method == request.method || (route.method == "GET" && request.method == "HEAD")) {
      found = &route;
      request.params = std::move(params);
      break;
    }
  }
  if (observer_) {
    const Route* named = found ? found : path_match;
    exchange = observer_(request, named ? named->pattern : std::string(), std::move(exchange));
  }
  if (!found) {
    exchange->send_error(
        path_known
            ? api_error(ApiCode::kMethodNotAllowed, request.method + " is not allowed on " + request.path)
            : api_error(ApiCode::kNotFound, "no such route: " + request.method + " " + request.path));
    return;
  }
  if (!found->options.public_route && !authorized(request)) {
    exchange->send_error(
        api_error(ApiCode::kInvalidApiKey,
                  "invalid or missing API key: send the header 'Authorization: Bearer <key>'"));
    return;
  }
  try {
    found->handler(request, exchange);
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("{} {}: handler failed: {}", request.method, request.path, e.what());
    exchange->send_error(api_error(ApiCode::kInternal, std::string("internal error: ") + e.what()));
  }
}

}  // namespace graft::server
