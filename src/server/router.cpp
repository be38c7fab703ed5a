#include "server/router.h"

#include <exception>

#include "util/log.h"

namespace graft::server {

std::string HttpRequest::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

json ApiError::to_json() const {
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

void Exchange::send_json(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  send(std::move(response));
}

void Exchange::send_error(const ApiError& error) {
  send_json(error.status, error.to_json());
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

bool Router::authorized(const HttpRequest& request) const {
  if (api_key_.empty()) return true;
  const std::string auth = request.header("authorization");
  const std::string prefix = "Bearer ";
  return auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
         auth.substr(prefix.size()) == api_key_;
}

void Router::dispatch(HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  if (request.method == "OPTIONS") {  // CORS preflight
    HttpResponse response;
    response.status = 204;
    response.content_type.clear();
    response.headers = {{"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
                        {"Access-Control-Allow-Headers",
                         "Authorization, Content-Type, OpenAI-Organization, "
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
    ApiError error;
    error.status = path_known ? 405 : 404;
    error.message = path_known ? request.method + " is not allowed on " + request.path
                               : "no such route: " + request.method + " " + request.path;
    error.code = path_known ? "method_not_allowed" : "not_found";
    exchange->send_error(error);
    return;
  }
  if (!found->options.public_route && !authorized(request)) {
    ApiError error;
    error.status = 401;
    error.message = "invalid or missing API key: send the header 'Authorization: Bearer <key>'";
    error.code = "invalid_api_key";
    exchange->send_error(error);
    return;
  }
  try {
    found->handler(request, exchange);
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("{} {}: handler failed: {}", request.method, request.path, e.what());
    ApiError error;
    error.status = 500;
    error.type = "server_error";
    error.message = std::string("internal error: ") + e.what();
    exchange->send_error(error);
  }
}

}  // namespace graft::server
