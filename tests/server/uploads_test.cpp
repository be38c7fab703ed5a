// What the training routes need from the HTTP layer: multipart/form-data
// bodies, a larger body limit on the upload route only, events with ids, and
// query strings.
#include <gtest/gtest.h>

#include "server/http_client.h"
#include "server/http_server.h"
#include "server/multipart.h"

namespace graft::server {
namespace {

using graft::testing::http_request;

const std::string kBody =
    "preamble to ignore\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"purpose\"\r\n"
    "\r\n"
    "fine-tune\r\n"
    "--XyZ\r\n"
    "content-disposition: form-data; name=\"file\"; filename=\"my \\\"data\\\".jsonl\"\r\n"
    "Content-Type: application/jsonl\r\n"
    "\r\n"
    "{\"text\": \"a\"}\r\n--not-the-boundary\n{\"text\": \"b\"}\n\r\n"
    "--XyZ--\r\n"
    "epilogue";

TEST(Multipart, ReadsFieldsAndFilesWithoutCopyingThem) {
  auto boundary = multipart_boundary("multipart/form-data; boundary=XyZ");
  ASSERT_TRUE(boundary);
  EXPECT_EQ(*boundary, "XyZ");
  auto parts = parse_multipart(kBody, *boundary);
  ASSERT_TRUE(parts) << parts.error().message;
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "purpose");
  EXPECT_FALSE((*parts)[0].filename);
  EXPECT_EQ((*parts)[0].data, "fine-tune");
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "my \"data\".jsonl");
  EXPECT_EQ((*parts)[1].content_type, "application/jsonl");
  EXPECT_EQ((*parts)[1].data, "{\"text\": \"a\"}\r\n--not-the-boundary\n{\"text\": \"b\"}\n");
  EXPECT_GE((*parts)[1].data.data(), kBody.data());
  EXPECT_LT((*parts)[1].data.data(), kBody.data() + kBody.size());
}

TEST(Multipart, BoundaryComesFromAFormDataContentTypeOnly) {
  EXPECT_EQ(multipart_boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b\""), "a b");
  EXPECT_FALSE(multipart_boundary("application/json"));
  EXPECT_FALSE(multipart_boundary("multipart/mixed; boundary=x"));
  EXPECT_FALSE(multipart_boundary("multipart/form-data"));
}

TEST(Multipart, MalformedBodiesAreRefusedWithAReason) {
  const std::string head = "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n";
  EXPECT_FALSE(parse_multipart("no boundary at all", "b"));
  EXPECT_FALSE(parse_multipart(head + "value without an end", "b"));
  EXPECT_FALSE(parse_multipart("--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", "b"));  // no disposition
  EXPECT_FALSE(parse_multipart("--b\r\nContent-Disposition: attachment; name=\"x\"\r\n\r\nx\r\n--b--", "b"));
  EXPECT_FALSE(parse_multipart("--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--", "b"));  // no name
  auto ok = parse_multipart(head + "v\r\n--b--\r\n", "b");
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)[0].data, "v");
  auto empty = parse_multipart("--b--\r\n", "b");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(Query, DecodesParametersAndChecksLimits) {
  auto q = parse_query("after=ftjob-1&limit=5&name=a%20b+c&flag");
  EXPECT_EQ(q["after"], "ftjob-1");
  EXPECT_EQ(q["name"], "a b c");
  EXPECT_EQ(q["flag"], "");
  int limit = 0;
  EXPECT_FALSE(read_query_limit(q, 10, 3, limit));
  EXPECT_EQ(limit, 5);
  EXPECT_FALSE(read_query_limit({}, 10, 3, limit));
  EXPECT_EQ(limit, 3);
  auto bad = read_query_limit({{"limit", "11"}}, 10, 3, limit);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->param, "limit");
  EXPECT_TRUE(read_query_limit({{"limit", "2x"}}, 10, 3, limit));
  auto unknown = check_query_names(q, {"after", "limit", "name"});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->param, "flag");
}

TEST(HttpServer, ARouteMayTakeLargerBodiesThanTheRest) {
  auto router = std::make_shared<Router>();
  auto echo = [](HttpRequest& req, std::shared_ptr<Exchange> ex) {
    ex->send_json(200, json{{"bytes", req.body.size()}});
  };
  router->add("POST", "/small", echo);
  router->add("POST", "/upload/{name}", echo, RouteOptions{.body_limit = 4096});
  HttpServerOptions options;
  options.port = 0;
  options.body_limit = 100;
  HttpServer server(options, router);
  ASSERT_TRUE(server.start());
  const std::string kilobyte(1000, 'x');
  EXPECT_EQ(http_request(server.port(), "POST", "/upload/a?x=1", kilobyte).status, 200);
  EXPECT_EQ(http_request(server.port(), "POST", "/small", kilobyte).status, 413);
  auto too_big = http_request(server.port(), "POST", "/upload/a", std::string(5000, 'x'));
  EXPECT_EQ(too_big.status, 413);
  EXPECT_NE(too_big.body.find("4096"), std::string::npos) << too_big.body;
  EXPECT_EQ(http_request(server.port(), "POST", "/small", "{}").status, 200);
}

TEST(HttpServer, EventsMayCarryIds) {
  auto router = std::make_shared<Router>();
  router->add("GET", "/events", [](HttpRequest&, std::shared_ptr<Exchange> ex) {
    ex->start_events();
    ex->send_event_with_id("ftevent-7", "{\"a\":1}");
    ex->send_event("plain");
    ex->end_events();
  });
  HttpServerOptions options;
  options.port = 0;
  HttpServer server(options, router);
  ASSERT_TRUE(server.start());
  auto reply = http_request(server.port(), "GET", "/events");
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "id: ftevent-7\ndata: {\"a\":1}\n\ndata: plain\n\n");
}

}  // namespace
}  // namespace graft::server
