#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "chat/jinja_value.h"
#include "util/utf8.h"

namespace graft::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      std::size_t open = find_tag(pos_);
      emit_text(pos_, open);
      if (open == std::string_view::npos) break;
      lex_tag(open);
    }
    tokens_.push_back({TokenType::eof, "", line_});
    return std::move(tokens_);
  }

 private:
  // The next "{{", "{%" or "{#" at or after `from`.
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  void advance_to(std::size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + pos_, src_.begin() + to, '\n'));
    pos_ = to;
  }

  // Text from pos_ up to the tag at `open` (or the end), with the whitespace
  // control of the tag before it and of the tag at `open` applied.
  void emit_text(std::size_t begin, std::size_t open) {
    std::size_t end = open == std::string_view::npos ? src_.size() : open;
    std::string_view text = src_.substr(begin, end - begin);
    int line = line_;
    if (strip_next_) {
      std::size_t n = 0;
      while (n < text.size() && is_space(text[n])) ++n;
      text.remove_prefix(n);
    } else if (trim_newline_) {
      if (text.substr(0, 1) == "\n")
        text.remove_prefix(1);
      else if (text.substr(0, 2) == "\r\n")
        text.remove_prefix(2);
    }
    strip_next_ = trim_newline_ = false;
    if (open != std::string_view::npos) {
      char kind = src_[open + 1];
      char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
      } else if (modifier != '+' && (kind == '%' || kind == '#')) {
        // lstrip_blocks: drop spaces and tabs between the line start and the tag.
        std::size_t i = open;
        while (i > 0 && (src_[i - 1] == ' ' || src_[i - 1] == '\t')) --i;
        if (i == 0 || src_[i - 1] == '\n') {
          std::size_t n = std::min(open - i, text.size());
          text.remove_suffix(n);
        }
      }
    }
    if (!text.empty()) tokens_.push_back({TokenType::text, std::string(text), line});
    advance_to(end);
  }

  void lex_tag(std::size_t open) {
    char kind = src_[open + 1];
    int line = line_;
    std::size_t body = open + 2;
    if (body < src_.size() && (src_[body] == '-' || src_[body] == '+')) ++body;
    if (kind == '#') {
      std::size_t close = src_.find("#}", body);
      if (close == std::string_view::npos) fail("unterminated comment", line);
      bool strip = close > body && src_[close - 1] == '-';
      advance_to(close + 2);
      strip_next_ = strip;
      trim_newline_ = !strip;
      return;
    }
    bool statement = kind == '%';
    advance_to(body);
    if (statement && lex_raw_block(line)) return;
    tokens_.push_back({statement ? TokenType::stmt_open : TokenType::expr_open, "", line});
    int depth = 0;  // open brackets: "}}" inside a dict literal does not close the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) fail(statement ? "unterminated '{%' tag" : "unterminated '{{' tag", line);
      if (depth == 0 && close_tag(statement)) return;
      lex_token(depth);
    }
  }

  // At a closing "%}"/"}}" (optionally "-%}" or "+%}"): emits it and returns true.
  bool close_tag(bool statement) {
    std::string_view rest = src_.substr(pos_);
    std::string_view close = statement ? "%}" : "}}";
    char modifier = '\0';
    if (!rest.empty() && (rest[0] == '-' || rest[0] == '+') && rest.substr(1, 2) == close) {
      modifier = rest[0];
      rest.remove_prefix(1);
    }
    if (rest.substr(0, 2) != close) return false;
    tokens_.push_back({statement ? TokenType::stmt_close : TokenType::expr_close, "", line_});
    advance_to(pos_ + (modifier ? 3 : 2));
    strip_next_ = modifier == '-';
    trim_newline_ = statement && modifier == '\0';
    return true;
  }

  // `{% raw %}...{% endraw %}`: the content is text, as written.
  bool lex_raw_block(int line) {
    std::size_t i = pos_;
    while (i < src_.size() && is_space(src_[i])) ++i;
    if (src_.substr(i, 3) != "raw") return false;
    i += 3;
    while (i < src_.size() && is_space(src_[i])) ++i;
    bool strip_inside = false;
    if (i < src_.size() && src_[i] == '-') strip_inside = true, ++i;
    if (src_.substr(i, 2) != "%}") return false;
    std::size_t content = i + 2;
    std::size_t search = content;
    while (true) {
      std::size_t end = src_.find("{%", search);
      if (end == std::string_view::npos) fail("missing '{% endraw %}'", line);
      std::size_t j = end + 2;
      bool strip_before = j < src_.size() && src_[j] == '-';
      if (strip_before || (j < src_.size() && src_[j] == '+')) ++j;
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.substr(j, 6) != "endraw") {
        search = end + 2;
        continue;
      }
      j += 6;
      while (j < src_.size() && is_space(src_[j])) ++j;
      bool strip_after = j < src_.size() && src_[j] == '-';
      if (strip_after) ++j;
      if (src_.substr(j, 2) != "%}") fail("malformed '{% endraw %}'", line);
      std::string_view text = src_.substr(content, end - content);
      if (strip_inside) {
        while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
      } else if (text.substr(0, 1) == "\n") {
        text.remove_prefix(1);
      }
      if (strip_before) {
        while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
      }
      if (!text.empty()) tokens_.push_back({TokenType::text, std::string(text), line});
      advance_to(j + 2);
      strip_next_ = strip_after;
      trim_newline_ = !strip_after;
      return true;
    }
  }

  void lex_token(int& depth) {
    char c = src_[pos_];
    int line = line_;
    if (is_name_start(c)) {
      std::size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back({TokenType::name, std::string(src_.substr(pos_, end - pos_)), line});
      advance_to(end);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
      return;
    }
    if (c == '\'' || c == '"') {
      lex_string(c);
      return;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.substr(pos_, 2) == op) {
        tokens_.push_back({TokenType::op, std::string(op), line});
        advance_to(pos_ + 2);
        return;
      }
    }
    if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
      fail(fmt::format("unexpected character '{}'", c), line);
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    tokens_.push_back({TokenType::op, std::string(1, c), line});
    advance_to(pos_ + 1);
  }

  void lex_number() {
    std::size_t end = pos_;
    auto digits = [&] {
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    bool floating = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      floating = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      std::size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        floating = true;
        end = e;
        digits();
      }
    }
    std::string text(src_.substr(pos_, end - pos_));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({floating ? TokenType::floating : TokenType::integer, text, line_});
    advance_to(end);
  }

  void lex_string(char quote) {
    int line = line_;
    std::string out;
    std::size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) fail("unterminated string literal", line);
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unterminated string literal", line);
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) fail("truncated escape in string literal", line);
          std::uint32_t cp = 0;
          for (std::size_t k = 0; k < n; ++k) {
            char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("invalid escape in string literal", line);
            cp = cp * 16 +
                 static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                ? h - '0'
                                                : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
          }
          utf8::append_codepoint(out, cp);
          i += n;
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({TokenType::string, std::move(out), line});
    advance_to(i + 1);
  }

  std::string_view src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool strip_next_ = false;    // the tag before ended with '-'
  bool trim_newline_ = false;  // the block tag before ended plainly (trim_blocks)
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace graft::jinja
