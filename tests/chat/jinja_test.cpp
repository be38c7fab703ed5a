// The template language itself: each case is a template, its variables and
// the text jinja2 (as Hugging Face configures it) renders for them. The
// expectations are written by hand from jinja2's documented behaviour; the
// tables use R"J(...)J" strings so tests/chat/check_jinja_cases.py can replay
// them through Python's jinja2 as a cross-check.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace graft::jinja {
namespace {

struct Case {
  const char* source;
  const char* context;  // a JSON object of variables
  const char* expected;
};

// Renders `source`; errors come back as "error: line N: message".
std::string render(std::string_view source, std::string_view context = "{}", RenderLimits limits = {}) {
  try {
    Program program = parse_program(source);
    // Noon on 1970-01-01 UTC: the same date in every time zone within 12 hours.
    Interpreter interpreter(program, limits, std::chrono::system_clock::time_point{std::chrono::hours(12)});
    static Json vars;  // outlives the render, as a request's messages do
    vars = Json::parse(context);
    for (const auto& [k, v] : vars.items()) interpreter.set_global(k, Value::borrowed(v));
    return interpreter.render();
  } catch (const TemplateError& e) {
    return "error: line " + std::to_string(e.line) + ": " + e.message;
  }
}

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(render(c.source, c.context), c.expected) << "template: " << c.source;
  }
}

TEST(JinjaWhitespace, TrimBlocksAndLstripBlocksAsHuggingFaceSetsThem) {
  check({
      {R"J(a
  {% if true %}
    b
  {% endif %}
c)J",
       R"J({})J", R"J(a
    b
c)J"},
      {R"J(x {% if true %}y{% endif %} z)J", R"J({})J", R"J(x y z)J"},
      {R"J(  {{ 'expr' }}
next)J",
       R"J({})J", R"J(  expr
next)J"},
      {R"J(a
  {# comment #}
b)J",
       R"J({})J", R"J(a
b)J"},
      {R"J({% if true %}  x {% endif %}
y)J",
       R"J({})J", R"J(  x y)J"},
      {R"J(a   {%- if true -%}   b   {%- endif -%}   c)J", R"J({})J", R"J(abc)J"},
      {R"J(a  {{- 'b' -}}  c)J", R"J({})J", R"J(abc)J"},
      {R"J(  {%+ if true %}x{% endif %})J", R"J({})J", R"J(  x)J"},
      {R"J({% if true +%}
x{% endif %})J",
       R"J({})J", R"J(
x)J"},
      {R"J({% raw %}{{ not evaluated }}{% endraw %})J", R"J({})J", R"J({{ not evaluated }})J"},
  });
}

TEST(JinjaExpressions, FollowPythonSemantics) {
  check({
      {R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 10 / 2 }} {{ 2 ** 10 }})J", R"J({})J",
       R"J(3 -4 2 3.5 5.0 1024)J"},
      {R"J({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 1 - -1 }} {{ 0.1 + 0.2 }})J", R"J({})J",
       R"J(7 9 2 0.30000000000000004)J"},
      {R"J({{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'a' ~ 1 ~ none ~ true }})J", R"J({})J",
       R"J(ababab [1, 2, 3] a1NoneTrue)J"},
      {R"J({{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }})J", R"J({})J",
       R"J(True False True True True)J"},
      {R"J({{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }})J", R"J({})J",
       R"J(True True True True)J"},
      {R"J({{ 0 or 'x' }} {{ 'a' and 'b' }} {{ [] or none }} {{ not 0 }})J", R"J({})J", R"J(x b None True)J"},
      {R"J({{ 'yes' if x else 'no' }} {{ 'yes' if not x else 'no' }}|{{ 'only' if x }}|)J",
       R"J({"x": false})J", R"J(no yes||)J"},
      {R"J({{ "tab\tnew\nq\"\u00e9" }} {{ 'a' 'b' }})J", R"J({})J", "tab\tnew\nq\"\xc3\xa9 ab"},
      {R"J({{ -x|abs }} {{ x is defined and x > 0 }})J", R"J({"x": 3})J", R"J(3 True)J"},
  });
}

TEST(JinjaExpressions, PrintLikePythonStr) {
  check({
      {R"J({{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 1e-5 }} {{ 123456789.5 }})J", R"J({})J",
       R"J(None True 1.0 1e+20 0.0001 1e-05 123456789.5)J"},
      {R"J({{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }})J", R"J({})J",
       R"J([1, 'a', None, True, 2.5] {'k': 'v', 'n': [1]})J"},
      {R"J({{ ["it's", 'say "hi"', 'new\nline'] }})J", R"J({})J", R"J(["it's", 'say "hi"', 'new\nline'])J"},
      {R"J({{ message }})J", R"J({"message": {"role": "user", "content": "hi"}})J",
       R"J({'role': 'user', 'content': 'hi'})J"},
      {R"J([{{ missing }}])J", R"J({})J", R"J([])J"},
  });
}

TEST(JinjaAccess, AttributesItemsAndSlices) {
  check({
      {R"J({{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ m.get('missing', 'd') }} {{ m.get('role') }})J",
       R"J({"m": {"role": "user", "content": "hi"}})J", R"J(user hi False d user)J"},
      {R"J({{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5] is defined }})J",
       R"J({"xs": [1, 2, 3]})J", R"J(1 3 [2, 3] [1, 2] [3, 2, 1] [1, 3] False)J"},
      {R"J({{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }})J", R"J({"s": "héllo"})J",
       R"J(h o él olléh 5)J"},
      {R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} {{ d.values()|list }})J",
       R"J({"d": {"b": 1, "a": 2}})J", R"J(b=1;a=2; ['b', 'a'] [1, 2])J"},
      {R"J({{ m.items is callable }} {{ m.items()|list|length }})J", R"J({"m": {"items": 5}})J",
       R"J(True 1)J"},
      {R"J({{ m['items'] }})J", R"J({"m": {"items": 5}})J", R"J(5)J"},
  });
}

TEST(JinjaStatements, LoopsExposeLoopAndFollowJinjaScoping) {
  check({
      {R"J({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %})J",
       R"J({"xs": ["a", "b"]})J", R"J(102TrueFalse2 211FalseTrue2 )J"},
      {R"J({% for x in xs %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %})J",
       R"J({"xs": [1, 2, 3]})J", R"J(-1-2;1-2-3;2-3-;)J"},
      {R"J({% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %})J",
       R"J({"xs": [1, 2, 3]})J", R"J(2232)J"},
      {R"J({% for x in [] %}{{ x }}{% else %}empty{% endfor %})J", R"J({})J", R"J(empty)J"},
      {R"J({% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
       R"J({})J", R"J(13)J"},
      {R"J({% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %})J", R"J({})J", R"J(3 7 )J"},
      {R"J({% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{% endfor %}|{{ x }})J", R"J({})J",
       R"J(55|5)J"},
      {R"J({% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }})J", R"J({})J", R"J(6)J"},
      {R"J({% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }})J",
       R"J({})J", R"J(6)J"},
      {R"J({% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %})J",
       R"J({})J", R"J(a.b.xy)J"},
      {R"J({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }})J", R"J({})J",
       R"J([0, 1, 2] [1, 3, 5] [3, 2, 1])J"},
      {R"J({% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %})J", R"J({"xs": [1, 2, 3]})J",
       R"J(odd even odd )J"},
  });
}

TEST(JinjaStatements, SetBlocksMacrosAndFilterBlocks) {
  check({
      {R"J({% set block %}  Hello {{ name }}  {% endset %}[{{ block }}][{{ block|trim }}])J",
       R"J({"name": "x"})J", R"J([  Hello x  ][Hello x])J"},
      {R"J({% set a, b = 1, 2 %}{{ a }}{{ b }})J", R"J({})J", R"J(12)J"},
      {R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }})J",
       R"J({})J", R"J(Hi A! Hi B? Hi C.)J"},
      {R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})J",
       R"J({})J", R"J(120)J"},
      {R"J({% set g = 'global' %}{% macro show() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ show() }})J",
       R"J({})J", R"J(changed)J"},
      {R"J({% macro m() %}{% set local = 1 %}{% endmacro %}{{ m() }}{{ local is defined }})J", R"J({})J",
       R"J(False)J"},
      {R"J({% filter upper %}abc {{ 'd' }}{% endfilter %})J", R"J({})J", R"J(ABC D)J"},
      {R"J({% set x | upper %}abc{% endset %}{{ x }})J", R"J({})J", R"J(ABC)J"},
      {R"J({% generation %}kept{% endgeneration %})J", R"J({})J", R"J(kept)J"},
  });
}

TEST(JinjaFilters, TojsonWritesLikePythonJsonDumps) {
  check({
      {R"J({{ v|tojson }})J", R"J({"v": {"b": [1, 2.5, true, null], "a": "x"}})J",
       R"J({"b": [1, 2.5, true, null], "a": "x"})J"},
      {R"J({{ v|tojson(indent=2) }})J", R"J({"v": {"a": [1, {}], "b": []}})J", R"J({
  "a": [
    1,
    {}
  ],
  "b": []
})J"},
      {R"J({{ v|tojson(separators=(',', ':')) }} {{ v|tojson(sort_keys=true) }})J",
       R"J({"v": {"z": 1, "a": 2}})J", R"J({"z":1,"a":2} {"a": 2, "z": 1})J"},
      {R"J({{ s|tojson }} {{ s|tojson(ensure_ascii=true) }})J", R"J({"s": "é\"\\\n\u0001😀"})J",
       R"J("é\"\\\n\u0001😀" "\u00e9\"\\\n\u0001\ud83d\ude00")J"},
      {R"J({{ 'x'|tojson }} {{ 3.0|tojson }} {{ none|tojson }})J", R"J({})J", R"J("x" 3.0 null)J"},
  });
}

TEST(JinjaFilters, CommonFilters) {
  check({
      {R"J({{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello'|upper }}|{{ 'Hello'|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }})J",
       R"J({})J", R"J(a b|a|HELLO|hello|Hello World|Hello)J"},
      {R"J({{ missing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }})J",
       R"J({})J", R"J(d  d None)J"},
      {R"J({{ [1, 2, 3]|join(', ') }} {{ xs|join('-', attribute='n') }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|first }})J",
       R"J({"xs": [{"n": "a"}, {"n": "b"}]})J", R"J(1, 2, 3 a-b 1 2 a)J"},
      {R"J({{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }} {{ ms|rejectattr('role', 'equalto', 'user')|list|length }})J",
       R"J({"ms": [{"role": "user", "c": 1}, {"role": "bot", "c": 2}, {"role": "user", "c": 3}]})J",
       R"J([1, 3] 1)J"},
      {R"J({{ ['a', 'B']|map('upper')|list }} {{ [1, 0, 2]|select|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ms|selectattr('x')|list|length }})J",
       R"J({"ms": [{"x": 1}, {"y": 2}]})J", R"J(['A', 'B'] [1, 2] [2, 4] 1)J"},
      {R"J({% for k, v in {'b': 1, 'A': 2}|dictsort %}{{ k }}{{ v }}{% endfor %} {% for k, v in {'b': 1, 'a': 2}|items %}{{ k }}{{ v }}{% endfor %} {{ ['b', 'a', 'C']|sort }} {{ ['a', 'A', 'b']|unique|list }})J",
       R"J({})J", R"J(A2b1 b1a2 ['a', 'b', 'C'] ['a', 'b'])J"},
      {R"J({{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ [1, 2]|sum }})J",
       R"J({})J", R"J(a+b+c ab-c 3 1 3)J"},
      {R"J({{ '42'|int + 1 }} {{ 'x'|int }} {{ 3.9|int }} {{ '2.5'|float }} {{ 7|string + '!' }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }})J",
       R"J({})J", R"J(43 0 3 2.5 7! [2, 1] cba)J"},
      {R"J({{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }})J", R"J({})J", "a\n  b\n\n  c|  a\n  b"},
      {R"J({{ [1, 2, 3]|length }} {{ {'a': 1}|length }} {{ 'one two  three'|wordcount }} {{ '<&>'|e }})J",
       R"J({})J", R"J(3 1 3 &lt;&amp;&gt;)J"},
  });
}

TEST(JinjaFilters, SafeStringsEscapeWhatIsAddedToThem) {
  // jinja2's Markup: adding a plain string to a |safe one HTML-escapes the plain one.
  check({
      {R"J({{ "a'"|safe + "<b>" }}|{{ "<b>" ~ "x"|safe }}|{{ "q"|safe }})J", R"J({})J",
       R"J(a'&lt;b&gt;|<b>x|q)J"},
  });
}

TEST(JinjaMethods, StringMethods) {
  check({
      {R"J({{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }})J",
       R"J({})J", R"J(['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'])J"},
      {R"J([{{ '  x  '.strip() }}][{{ '\nx\n'.lstrip() }}][{{ 'xyx'.strip('x') }}][{{ 'abc'.rstrip('c') }}])J",
       R"J({})J", "[x][x\n][y][ab]"},
      {R"J({{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('l', 2) }})J",
       R"J({})J", R"J(True True True)J"},
      {R"J({{ 'a{}b{}'.format(1, 'x') }} {{ '{0}{0}{name}'.format('z', name='n') }} {{ 'x'.join(['1', '2']) }})J",
       R"J({})J", R"J(a1bx zzn 1x2)J"},
      {R"J({{ 'banana'.count('a') }} {{ 'banana'.find('n') }} {{ 'banana'.rfind('n') }} {{ 'banana'.find('z') }} {{ 'aXa'.replace('a', 'b') }} {{ 'ab'.upper() }})J",
       R"J({})J", R"J(3 2 4 -1 bXb AB)J"},
  });
}

TEST(JinjaTests, IsTests) {
  check({
      {R"J({{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ l is iterable }} {{ d is iterable }})J",
       R"J({"x": 1, "n": null, "s": "a", "d": {}, "l": []})J",
       R"J(True True True True True True True True)J"},
      {R"J({{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is integer }} {{ false is false }} {{ 1 is true }})J",
       R"J({})J", R"J(True True True True False True False)J"},
      {R"J({{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 'ab' is lower }} {{ 2 is in [1, 2] }} {{ 'a' is equalto 'a' }} {{ 5 is gt 3 }} {{ s is not string }})J",
       R"J({"s": 1})J", R"J(True True True True True True True)J"},
  });
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render("line one\n{% if x %}\nno end"),
            "error: line 3: unexpected end of template: expected '{% endif %}'");
  EXPECT_EQ(render("a\nb\n{{ x + }}"), "error: line 3: unexpected '}}' (expected an expression)");
  EXPECT_EQ(render("{% frobnicate %}"), "error: line 1: unsupported tag 'frobnicate'");
  EXPECT_EQ(render("\n{% endfor %}"), "error: line 2: unexpected '{% endfor %}'");
  EXPECT_EQ(render("{{ x | nosuchfilter }}"), "error: line 1: unknown filter 'nosuchfilter'");
  EXPECT_EQ(render("\n\n{{ x is nosuchtest }}"), "error: line 3: unknown test 'nosuchtest'");
  EXPECT_EQ(render("{{ 'unterminated }}"), "error: line 1: unterminated string literal");
  EXPECT_EQ(render("x\n{{ a"), "error: line 2: unterminated '{{' tag");
  EXPECT_EQ(render("{# open comment"), "error: line 1: unterminated comment");
  EXPECT_EQ(render("{% break %}"), "error: line 1: 'break' outside a for loop");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render("ok\n{{ raise_exception('Roles must alternate') }}"),
            "error: line 2: Roles must alternate");
  EXPECT_EQ(render("{{ 'a' + 1 }}"), "error: line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render("\n{{ 1 + none }}"), "error: line 2: unsupported operand type(s) for +: 'int' and 'none'");
  EXPECT_EQ(render("{{ missing.attr }}"), "error: line 1: 'missing' is undefined");
  EXPECT_EQ(render("{{ 1 / 0 }}"), "error: line 1: division by zero");
  EXPECT_EQ(render("{% for x in none %}{% endfor %}"), "error: line 1: 'NoneType' object is not iterable");
  EXPECT_EQ(render("{% set x = 1 %}{% set x.y = 2 %}"),
            "error: line 1: cannot assign attribute 'y' on 'x': not a namespace");
  EXPECT_EQ(render("{{ undefined_function() }}"),
            "error: line 1: 'undefined_function' is undefined (called as a function)");
  EXPECT_EQ(render("{{ 'x'|from_json }}"), "error: line 1: from_json: the string is not valid JSON");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"), "error: line 1: integer overflow");
}

TEST(JinjaLimits, RunawayTemplatesStopWithAnError) {
  EXPECT_EQ(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "error: line 1: macro 'f' nests deeper than 100 calls");
  RenderLimits small;
  small.max_steps = 1000;
  EXPECT_EQ(render("{% for i in range(10) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", small),
            "error: line 1: template ran too long (more than 1000 loop iterations and calls)");
  small = {};
  small.max_output_bytes = 100;
  EXPECT_EQ(render("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", "{}", small),
            "error: line 1: template output exceeds 100 bytes");
  // The default limits bound a loop of a billion iterations before it allocates.
  EXPECT_EQ(render("{% for i in range(1000000000) %}{% endfor %}"),
            "error: line 1: template ran too long (more than 5000000 loop iterations and calls)");
  // Data nested deeper than any prompt needs is refused, not recursed into.
  EXPECT_EQ(
      render("{% set ns = namespace(x=[]) %}{% for i in range(600) %}{% set ns.x = [ns.x] %}{% endfor %}"
             "{{ ns.x|tojson }}"),
      "error: line 1: value nests too deeply");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ [ns]|tojson }}"),
            "error: line 1: value nests too deeply");
  std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_EQ(render("{{ " + deep + " }}"), "error: line 1: template nests too deeply");
}

TEST(JinjaGraftExtensions, BehaviourBeyondHuggingFacesSandbox) {
  // Lists a template built may be changed in place (Kimi's templates use
  // append/pop; the HF sandbox refuses them, llama.cpp allows them).
  EXPECT_EQ(
      render("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append(1) %}{% set _ = ns.ids.append(2) %}"
             "{{ ns.ids.pop(0) }}{{ ns.ids }}"),
      "1[2]");
  // Data from the request is read-only.
  EXPECT_EQ(render("{{ xs.append(1) }}", R"({"xs": []})"),
            "error: line 1: cannot modify a value that came from the request");
  // Integer dict keys survive dictsort and lookups.
  EXPECT_EQ(render("{% set d = {512: 'b', 0: 'a'} %}{{ d[512] }}{% for k, v in d|dictsort %}{{ k + 1 }}{% "
                   "endfor %}{{ d|tojson }}"),
            R"(b1513{"512": "b", "0": "a"})");
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}"), "1970-01-01");
  // A macro kept past the block that defined it cannot run (jinja2 would still have its scope).
  EXPECT_EQ(
      render("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}{% set ns.m = m %}"
             "{{ ns.m() }}{% endfor %}|{{ ns.m() }}"),
      "error: line 1: macro 'm' is called after the block that defined it ended");
}

}  // namespace
}  // namespace graft::jinja
