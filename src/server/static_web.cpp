#include "server/static_web.h"

#include <string>

namespace graft::server {

namespace {

constexpr const char* kPagePolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const WebAsset* find_asset(std::string_view path) {
  for (const WebAsset& asset : web_assets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

// Whether an Accept-Encoding value admits gzip (a "gzip" or "*" coding not
// refused with q=0).
bool accepts_gzip(const std::string& accept_encoding) {
  size_t start = 0;
  while (start < accept_encoding.size()) {
    size_t end = accept_encoding.find(',', start);
    if (end == std::string::npos) end = accept_encoding.size();
    std::string item = accept_encoding.substr(start, end - start);
    start = end + 1;
    const size_t semi = item.find(';');
    std::string coding = item.substr(0, semi);
    std::erase_if(coding, [](char c) { return c == ' ' || c == '\t'; });
    if (coding != "gzip" && coding != "*") continue;
    if (semi == std::string::npos) return true;
    std::string params = item.substr(semi + 1);
    std::erase_if(params, [](char c) { return c == ' ' || c == '\t'; });
    return !(params.starts_with("q=0") && params.find_first_not_of("0.", 2) == std::string::npos);
  }
  return false;
}

bool etag_matches(const std::string& if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  if (if_none_match == "*") return true;
  return if_none_match.find(etag) != std::string::npos;
}

void send_asset(const HttpRequest& request, Exchange& exchange, std::string_view path) {
  const WebAsset* asset = find_asset(path);
  if (!asset) {
    ApiError error;
    error.status = 404;
    error.type = "not_found_error";
    error.message = "no such file: " + request.path;
    error.code = "not_found";
    return exchange.send_error(error);
  }
  exchange.send(web_asset_response(*asset, request));
}

}  // namespace

HttpResponse web_asset_response(const WebAsset& asset, const HttpRequest& request) {
  HttpResponse response;
  response.headers = {
      {"Cache-Control", asset.immutable ? "public, max-age=31536000, immutable" : "no-cache"},
      {"ETag", std::string(asset.etag)},
      {"Vary", "Accept-Encoding"},
      {"X-Content-Type-Options", "nosniff"},
  };
  if (asset.content_type.starts_with("text/html")) {
    response.headers.emplace_back("Content-Security-Policy", kPagePolicy);
    response.headers.emplace_back("Referrer-Policy", "no-referrer");
  }
  if (etag_matches(request.header("if-none-match"), asset.etag)) {
    response.status = 304;
    response.content_type.clear();
    return response;
  }
  response.content_type = std::string(asset.content_type);
  if (accepts_gzip(request.header("accept-encoding"))) {
    response.headers.emplace_back("Content-Encoding", "gzip");
    response.body = std::string(asset.gzip);
  } else {
    response.body = std::string(asset.plain);
  }
  return response;
}

void add_web_routes(Router& router) {
  const RouteOptions open{.public_route = true};
  router.add(
      "GET", "/",
      [](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
        send_asset(request, *exchange, "/index.html");
      },
      open);
  router.add(
      "GET", "/assets/{name}",
      [](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
        send_asset(request, *exchange, "/assets/" + request.params["name"]);
      },
      open);
}

}  // namespace graft::server
