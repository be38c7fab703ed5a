#include <gtest/gtest.h>
#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"
TEST(JinjaSmoke, Renders) {
  using namespace graft::jinja;
  Program p = parse_program("{% for x in [1,2] %}{{ x }}{% endfor %}");
  Interpreter in(p, {}, std::chrono::system_clock::now());
  EXPECT_EQ(in.render(), "12");
}
