// The HTTP plumbing alone: routing, auth, CORS, limits, keep-alive, SSE and
// disconnect notice, with handlers that are not the OpenAI ones.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "server/http_client.h"

namespace graft::server {
namespace {

using graft::testing::format_request;
using graft::testing::http_request;
using graft::testing::RawConnection;
using graft::testing::sse_payloads;
using namespace std::chrono_literals;

struct TestServer {
  explicit TestServer(std::string api_key = "", size_t body_limit = 1 << 20) {
    auto router = std::make_shared<Router>();
    router->set_api_key(api_key);
    router->add(
        "GET", "/health",
        [](HttpRequest&, std::shared_ptr<Exchange> ex) {
          ex->send_json(200, json{{"status", "ok"}});
        },
        RouteOptions{.public_route = true});
    router->add("GET", "/items/{id}", [](HttpRequest& req, std::shared_ptr<Exchange> ex) {
      ex->send_json(200, json{{"id", req.params["id"]}, {"query", req.query}});
    });
    router->add("POST", "/echo", [](HttpRequest& req, std::shared_ptr<Exchange> ex) {
      ex->send_json(200, json{{"bytes", req.body.size()}});
    });
    router->add("GET", "/throw",
                [](HttpRequest&, std::shared_ptr<Exchange>) -> void { throw std::runtime_error("boom"); });
    // Streams one event every 10 ms from another thread until `n` or the client leaves.
    router->add("GET", "/events", [this](HttpRequest& req, std::shared_ptr<Exchange> ex) {
      int n = req.query.empty() ? 5 : std::stoi(req.query);
      ex->start_events();
      auto stop = std::make_shared<std::atomic<bool>>(false);
      ex->on_disconnect([this, stop] {
        *stop = true;
        disconnects++;
      });
      // The exchange must be released before the server goes: ~TestServer joins.
      std::lock_guard lock(mutex);
      threads.emplace_back([ex, n, stop]() mutable {
        for (int i = 0; i < n && !*stop; ++i) {
          ex->send_event(json{{"i", i}}.dump());
          std::this_thread::sleep_for(10ms);
        }
        ex->send_event("[DONE]");
        ex->end_events();
        ex.reset();
      });
    });
    HttpServerOptions options;
    options.port = 0;
    options.body_limit = body_limit;
    server = std::make_unique<HttpServer>(options, router);
    Status status = server->start();
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
    port = server->port();
  }
  ~TestServer() {
    std::vector<std::thread> running;
    {
      std::lock_guard lock(mutex);
      running = std::move(threads);
    }
    for (auto& t : running) t.join();
  }
  std::unique_ptr<HttpServer> server;
  int port = 0;
  std::atomic<int> disconnects{0};
  std::mutex mutex;
  std::vector<std::thread> threads;
};

TEST(HttpServer, RoutesWithPathParametersAndQuery) {
  TestServer s;
  auto reply = http_request(s.port, "GET", "/items/abc%2Bd?x=1");
  ASSERT_EQ(reply.status, 200);
  auto body = json::parse(reply.body);
  EXPECT_EQ(body["id"], "abc+d");
  EXPECT_EQ(body["query"], "x=1");
  EXPECT_EQ(reply.header("access-control-allow-origin"), "*");
  EXPECT_EQ(reply.header("content-type"), "application/json");
}

TEST(HttpServer, UnknownPathsAndMethodsGetOpenAiShapedErrors) {
  TestServer s;
  auto missing = http_request(s.port, "GET", "/nope");
  EXPECT_EQ(missing.status, 404);
  auto error = json::parse(missing.body)["error"];
  EXPECT_TRUE(error["message"].get<std::string>().find("/nope") != std::string::npos);
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_TRUE(error.contains("param"));
  EXPECT_TRUE(error.contains("code"));
  auto wrong = http_request(s.port, "POST", "/health", "{}");
  EXPECT_EQ(wrong.status, 405);
}

TEST(HttpServer, ApiKeyGuardsAllButPublicRoutes) {
  TestServer s("sekrit");
  EXPECT_EQ(http_request(s.port, "GET", "/items/1").status, 401);
  EXPECT_EQ(http_request(s.port, "GET", "/items/1", "", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(http_request(s.port, "GET", "/items/1", "", {{"Authorization", "Bearer sekrit"}}).status, 200);
  EXPECT_EQ(http_request(s.port, "GET", "/items/1", "", {{"x-api-key", "sekrit"}}).status, 200);
  EXPECT_EQ(http_request(s.port, "GET", "/items/1", "", {{"x-api-key", "wrong"}}).status, 401);
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
  auto body = json::parse(http_request(s.port, "GET", "/items/1").body);
  EXPECT_EQ(body["error"]["code"], "invalid_api_key");
}

TEST(HttpServer, AnswersCorsPreflight) {
  TestServer s("sekrit");
  auto reply = http_request(s.port, "OPTIONS", "/v1/chat/completions", "",
                            {{"Origin", "http://x"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(reply.status, 204);
  EXPECT_EQ(reply.header("access-control-allow-origin"), "*");
  EXPECT_NE(reply.header("access-control-allow-headers").find("Authorization"), std::string::npos);
}

TEST(HttpServer, RefusesBodiesOverTheLimitAndKeepsServing) {
  TestServer s("", /*body_limit=*/1000);
  EXPECT_EQ(http_request(s.port, "POST", "/echo", std::string(999, 'x')).status, 200);
  auto big = http_request(s.port, "POST", "/echo", std::string(5000, 'x'));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(json::parse(big.body)["error"]["code"], "request_too_large");
  // A chunked body that grows past the limit.
  RawConnection c(s.port);
  std::string chunk(800, 'y');
  std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  req += "320\r\n" + chunk + "\r\n320\r\n" + chunk + "\r\n0\r\n\r\n";
  c.send(req);
  EXPECT_EQ(c.read_reply().status, 413);
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
}

TEST(HttpServer, MalformedRequestsGet400) {
  TestServer s;
  RawConnection c(s.port);
  c.send("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(c.read_reply().status, 400);
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
}

TEST(HttpServer, AThrowingHandlerGets500) {
  TestServer s;
  auto reply = http_request(s.port, "GET", "/throw");
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(json::parse(reply.body)["error"]["type"], "server_error");
}

TEST(HttpServer, KeepsConnectionsAliveAcrossRequests) {
  TestServer s;
  RawConnection c(s.port);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(format_request("GET", "/items/" + std::to_string(i), "")));
    auto reply = c.read_reply();
    ASSERT_EQ(reply.status, 200);
    EXPECT_EQ(json::parse(reply.body)["id"], std::to_string(i));
  }
}

TEST(HttpServer, StreamsServerSentEvents) {
  TestServer s;
  RawConnection c(s.port);
  c.send(format_request("GET", "/events?4", ""));
  auto reply = c.read_reply();
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.header("content-type"), "text/event-stream");
  auto events = sse_payloads(reply.body);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(json::parse(events[3])["i"], 3);
  EXPECT_EQ(events[4], "[DONE]");
  // The connection is still usable.
  c.send(format_request("GET", "/health", ""));
  EXPECT_EQ(c.read_reply().status, 200);
}

TEST(HttpServer, TellsTheHandlerWhenTheClientLeavesMidStream) {
  TestServer s;
  {
    RawConnection c(s.port);
    c.send(format_request("GET", "/events?100000", ""));
    std::string acc;
    ASSERT_TRUE(c.read_until(acc, "\"i\":2"));
  }
  for (int i = 0; i < 200 && s.disconnects == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.disconnects, 1);
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
}

TEST(HttpServer, FramesSseAsChunksOnHttp11AndAsAClosedBodyOnHttp10) {
  TestServer s;
  {
    RawConnection c(s.port);
    c.send(format_request("GET", "/events?2", ""));
    std::string raw;
    ASSERT_TRUE(c.read_until(raw, "0\r\n\r\n"));
    EXPECT_NE(raw.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << raw;
    EXPECT_NE(raw.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << raw;
    EXPECT_NE(raw.find("Access-Control-Allow-Origin: *\r\n"), std::string::npos) << raw;
    // Each event is one chunk: its size in hex, the event, CRLF.
    const std::string event = "data: {\"i\":0}\n\n";
    EXPECT_NE(raw.find(fmt::format("{:x}\r\n{}\r\n", event.size(), event)), std::string::npos) << raw;
  }
  {
    RawConnection c(s.port);
    c.send("GET /events?2 HTTP/1.0\r\nHost: x\r\n\r\n");
    auto reply = c.read_reply();
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.header("transfer-encoding"), "");
    EXPECT_EQ(reply.header("connection"), "close");
    auto events = sse_payloads(reply.body);
    ASSERT_EQ(events.size(), 3u) << reply.body;
    EXPECT_EQ(events[2], "[DONE]");
    EXPECT_TRUE(c.closed());
  }
}

TEST(HttpServer, AnswersHeadWithoutABodyAndExpectContinue) {
  TestServer s;
  RawConnection c(s.port);
  c.send("HEAD /items/7 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string raw;
  ASSERT_TRUE(c.read_until(raw, "\r\n\r\n"));
  EXPECT_NE(raw.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << raw;
  const size_t length = raw.find("Content-Length: ");
  ASSERT_NE(length, std::string::npos) << raw;
  EXPECT_GT(std::stoi(raw.substr(length + 16)), 0);
  // No body follows: the next answer on the connection starts at once.
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  std::string more = raw.substr(raw.find("\r\n\r\n") + 4);
  ASSERT_TRUE(c.read_until(more, "\r\n\r\n"));
  EXPECT_EQ(more.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << more;
  c.send("hello");
  auto reply = c.read_reply();
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(json::parse(reply.body)["bytes"], 5);
}

TEST(HttpServer, ServesManyConnectionsThatOpenAndClose) {
  TestServer s;
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 200; ++i) {
    conns.push_back(std::make_unique<RawConnection>(s.port));
    if (i % 2 == 0) conns.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n");  // half a request
  }
  conns.clear();
  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += http_request(s.port, "GET", "/health").status == 200;
  EXPECT_EQ(ok, 20);
}

}  // namespace
}  // namespace graft::server
