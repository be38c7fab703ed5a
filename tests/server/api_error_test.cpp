// The API's error codes: one enum, one table of statuses and types, one
// mapping from lower layers' tokens.
#include "server/api_error.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace graft::server {
namespace {

TEST(ApiError, EveryCodeHasItsOwnNameAStatusAndATypeThatAgree) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(ApiCode::kUnavailable); ++i) {
    const auto code = static_cast<ApiCode>(i);
    const std::string name(code_name(code));
    EXPECT_TRUE(names.insert(name).second) << "two codes are named " << name;
    const int status = http_status(code);
    EXPECT_TRUE((status >= 400 && status < 414) || status == 500 || status == 503) << name << " " << status;
    const std::string type(error_type(code));
    // As OpenAI's: 400 and 404 are invalid_request_error, 5xx server_error.
    const std::string expected = status >= 500                    ? "server_error"
                                 : status == 400 || status == 404 ? "invalid_request_error"
                                                                  : type;
    EXPECT_EQ(type, expected) << name;
  }
}

TEST(ApiError, LowerLayersTokensMapOnceAndOverlapsAreGone) {
  // invalid_argument (util, engine) and invalid_request (engine) were two
  // codes for one thing: both are invalid_value on the wire.
  EXPECT_EQ(code_for(make_error("invalid_argument", "")), ApiCode::kInvalidValue);
  EXPECT_EQ(code_for(make_error("invalid_request", "")), ApiCode::kInvalidValue);
  // The adapter loader's tokens are the same codes a selection answers with.
  EXPECT_EQ(code_for(make_error("incompatible_adapter", "")), ApiCode::kAdapterIncompatible);
  EXPECT_EQ(code_for(make_error("invalid_adapter", "")), ApiCode::kAdapterCorrupt);
  EXPECT_EQ(code_for(make_error("in_use", "")), ApiCode::kInUse);
  EXPECT_EQ(code_for(make_error("overloaded", "")), ApiCode::kOverloaded);
  // Anything a client cannot act on is graft's own failure.
  EXPECT_EQ(code_for(make_error("compute_failed", "")), ApiCode::kInternal);
  EXPECT_EQ(code_for(make_error("io_error", "")), ApiCode::kInternal);
  EXPECT_EQ(code_for(make_error("no such token", "")), ApiCode::kInternal);
}

TEST(ApiError, HasOpenAisShape) {
  const json body = api_error(make_error("incompatible_adapter", "made for another model"), "id").to_json();
  EXPECT_EQ(body["error"]["message"], "made for another model");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "id");
  EXPECT_EQ(body["error"]["code"], "adapter_incompatible");
  const ApiError internal = api_error(ApiCode::kInternal, "broken");
  EXPECT_EQ(internal.status(), 500);
  EXPECT_TRUE(internal.to_json()["error"]["param"].is_null());
}

}  // namespace
}  // namespace graft::server
