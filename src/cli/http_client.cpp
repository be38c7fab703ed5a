#include "cli/http_client.h"

#include <limits>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace graft::cli {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

struct Connection {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
};

Status open(Connection& c, const std::string& host, const std::string& port, const std::string& url) {
  beast::error_code ec;
  tcp::resolver resolver(c.ioc);
  auto endpoints = resolver.resolve(host, port, ec);
  if (!ec) c.stream.connect(endpoints, ec);
  if (ec) return errorf("unreachable", "cannot reach graft serve at {}: {}", url, ec.message());
  return {};
}

http::request<http::string_body> make_request(http::verb verb, const std::string& target,
                                              const std::string& host, const std::string& api_key,
                                              const std::string& body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "graft");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (verb == http::verb::post || verb == http::verb::put) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  return req;
}

}  // namespace

Result<HttpClient> HttpClient::connect_to(const std::string& url, std::string api_key) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return errorf("invalid_argument", "'{}' is not an http:// URL", url);
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const std::string authority = rest.substr(0, slash);
  const size_t colon = authority.rfind(':');
  std::string host = colon == std::string::npos ? authority : authority.substr(0, colon);
  std::string port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  if (host.empty() || port.empty()) return errorf("invalid_argument", "'{}' names no host", url);
  return HttpClient(url, std::move(host), std::move(port), std::move(prefix), std::move(api_key));
}

Result<HttpReply> HttpClient::request(const std::string& method, const std::string& target,
                                      const std::string& body) {
  Connection c;
  GRAFT_TRY_STATUS(open(c, host_, port_, url_));
  const http::verb verb = http::string_to_verb(method);
  beast::error_code ec;
  http::write(c.stream, make_request(verb, prefix_ + target, host_, api_key_, body), ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(c.stream, buffer, res, ec);
  if (ec) return errorf("unavailable", "{} {}{}: {}", method, url_, target, ec.message());
  return HttpReply{static_cast<int>(res.result_int()), std::move(res.body())};
}

Status HttpClient::stream(const std::string& target, const std::string& last_event_id,
                          const std::function<bool(const std::string&, const std::string&)>& on_event) {
  Connection c;
  GRAFT_TRY_STATUS(open(c, host_, port_, url_));
  auto req = make_request(http::verb::get, prefix_ + target, host_, api_key_, "");
  req.set(http::field::accept, "text/event-stream");
  if (!last_event_id.empty()) req.set("Last-Event-ID", last_event_id);
  beast::error_code ec;
  http::write(c.stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!ec) http::read_header(c.stream, buffer, parser, ec);
  if (ec) return errorf("unavailable", "GET {}{}: {}", url_, target, ec.message());
  const int status = static_cast<int>(parser.get().result_int());

  std::string text;  // what has arrived and is not yet a whole event
  std::string id, data;
  char chunk[8192];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    http::read_some(c.stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return errorf("unavailable", "the event stream broke: {}", ec.message());
    text.append(chunk, sizeof chunk - parser.get().body().size);
    if (status != 200) continue;
    size_t nl;
    while ((nl = text.find('\n')) != std::string::npos) {
      std::string line = text.substr(0, nl);
      text.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {
        if (!data.empty() && !on_event(id, data)) return {};
        data.clear();
      } else if (line.rfind("data: ", 0) == 0) {
        data += (data.empty() ? "" : "\n") + line.substr(6);
      } else if (line.rfind("id: ", 0) == 0) {
        id = line.substr(4);
      }
    }
  }
  if (status != 200) return make_error("unavailable", error_message(HttpReply{status, text}));
  return {};
}

std::string error_message(const HttpReply& reply) {
  auto body = nlohmann::json::parse(reply.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].contains("message")) {
    return fmt::format("{} (HTTP {})", body["error"]["message"].get<std::string>(), reply.status);
  }
  return fmt::format("HTTP {}: {}", reply.status, reply.body);
}

}  // namespace graft::cli
