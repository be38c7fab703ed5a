// The web page's routes: / and /assets/* are served from the embedded files
// without the API key, gzip-compressed when the client accepts it, with
// content types, ETags (304 on a match) and caching headers.
#include "server/static_web.h"

#include <gtest/gtest.h>

#include "server/http_client.h"
#include "server/http_server.h"

namespace graft::server {
namespace {

using graft::testing::http_request;

struct WebServer {
  WebServer() {
    auto router = std::make_shared<Router>();
    router->set_api_key("sekrit");
    router->add("GET", "/v1/models",
                [](HttpRequest&, std::shared_ptr<Exchange> ex) { ex->send_json(200, json{}); });
    add_web_routes(*router);
    HttpServerOptions options;
    options.port = 0;
    server = std::make_unique<HttpServer>(options, router);
    EXPECT_TRUE(server->start().ok());
    port = server->port();
  }
  std::unique_ptr<HttpServer> server;
  int port = 0;
};

const WebAsset* asset_named(std::string_view prefix, std::string_view suffix) {
  for (const WebAsset& a : web_assets()) {
    if (a.path.starts_with(prefix) && a.path.ends_with(suffix)) return &a;
  }
  return nullptr;
}

TEST(StaticWeb, EmbedsThePageAndItsHashedAssets) {
  const WebAsset* index = asset_named("/index.html", "");
  ASSERT_NE(index, nullptr);
  EXPECT_FALSE(index->immutable);
  const std::string html(index->plain);
  for (const WebAsset& a : web_assets()) {
    EXPECT_FALSE(a.plain.empty()) << a.path;
    ASSERT_GE(a.gzip.size(), 2u) << a.path;
    EXPECT_EQ(static_cast<unsigned char>(a.gzip[0]), 0x1f) << a.path;  // gzip magic
    EXPECT_EQ(static_cast<unsigned char>(a.gzip[1]), 0x8b) << a.path;
    if (a.immutable) {
      EXPECT_NE(html.find(std::string(a.path)), std::string::npos) << a.path << " not used by the page";
    }
  }
  EXPECT_NE(asset_named("/assets/app.", ".js"), nullptr);
  EXPECT_NE(asset_named("/assets/app.", ".css"), nullptr);
}

TEST(StaticWeb, ServesThePageWithoutTheApiKey) {
  WebServer s;
  auto page = http_request(s.port, "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.header("cache-control"), "no-cache");
  EXPECT_NE(page.header("content-security-policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(page.header("content-encoding"), "");  // the client did not ask for gzip
  EXPECT_NE(page.body.find("<div id=\"app\">"), std::string::npos);
  // The API itself still needs the key.
  EXPECT_EQ(http_request(s.port, "GET", "/v1/models").status, 401);
}

TEST(StaticWeb, SendsGzipToClientsThatAcceptIt) {
  WebServer s;
  const WebAsset* js = asset_named("/assets/app.", ".js");
  ASSERT_NE(js, nullptr);
  auto zipped =
      http_request(s.port, "GET", std::string(js->path), "", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_EQ(zipped.status, 200);
  EXPECT_EQ(zipped.header("content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(zipped.header("content-encoding"), "gzip");
  EXPECT_EQ(zipped.header("vary"), "Accept-Encoding");
  EXPECT_EQ(zipped.header("cache-control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(zipped.body, js->gzip);
  EXPECT_LT(js->gzip.size(), js->plain.size());

  auto refused =
      http_request(s.port, "GET", std::string(js->path), "", {{"Accept-Encoding", "gzip;q=0, identity"}});
  EXPECT_EQ(refused.header("content-encoding"), "");
  EXPECT_EQ(refused.body, js->plain);
}

TEST(StaticWeb, AnswersNotModifiedForAKnownEtag) {
  WebServer s;
  auto first = http_request(s.port, "GET", "/");
  const std::string etag = first.header("etag");
  ASSERT_FALSE(etag.empty());
  auto again = http_request(s.port, "GET", "/", "", {{"If-None-Match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  auto other = http_request(s.port, "GET", "/", "", {{"If-None-Match", "\"something-else\""}});
  EXPECT_EQ(other.status, 200);
}

TEST(StaticWeb, UnknownAssetsAreNotFound) {
  WebServer s;
  auto missing = http_request(s.port, "GET", "/assets/app.0000000000.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("no such file"), std::string::npos);
  EXPECT_EQ(http_request(s.port, "POST", "/", "{}").status, 405);
}

}  // namespace
}  // namespace graft::server
