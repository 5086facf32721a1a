// Tests of the Jinja-subset interpreter (engine/chat/jinja).
//
// GoldenCases: ~100 small templates, each exercising one feature (whitespace control,
// trim/lstrip_blocks, literals, operators, loops, macros, namespaces, filters, tests, string
// methods, errors), rendered by jinja2 3.1.6 inside transformers' chat-template environment
// (tools/gen_chat_goldens.py -> tests/fixtures/chat/jinja_goldens.json). Output must be
// byte-equal; where jinja2 raises, the interpreter must throw kvb::Error naming origin and line.
// The remaining tests pin error line numbers and check adversarial input (deep nesting,
// runaway recursion, huge outputs, random garbage) fails cleanly instead of crashing.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat/jinja/jinja.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

using kvb::jinja::Template;
using ojson = nlohmann::ordered_json;

namespace {

ojson load_goldens() {
  std::string path = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/chat/jinja_goldens.json";
  return ojson::parse(kvb::read_file(path));
}

// Renders and returns the error message, or "" when no error.
std::string render_error(const std::string& src, const ojson& vars = ojson::object(),
                         const std::string& origin = "t.jinja") {
  try {
    Template t(src, origin);
    t.render(vars);
  } catch (const kvb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Jinja, GoldenCases) {
  ojson g = load_goldens();
  ASSERT_GE(g["cases"].size(), 60u);
  int checked = 0;
  for (const auto& c : g["cases"]) {
    std::string name = c["name"].get<std::string>();
    std::string src = c["template"].get<std::string>();
    SCOPED_TRACE("case " + name);
    if (c.contains("expected")) {
      std::string got;
      try {
        Template t(src, name);
        got = t.render(c["vars"]);
      } catch (const kvb::Error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>()) << "template: " << src;
    } else {
      std::string err = render_error(src, c["vars"], name);
      EXPECT_FALSE(err.empty()) << "jinja2 raised " << c["error"] << " but we rendered fine";
      EXPECT_EQ(err.rfind(name + ":", 0), 0u) << err;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(g["cases"].size()));
}

TEST(Jinja, ErrorsNameOriginAndLine) {
  // line numbers read off the template text
  EXPECT_EQ(render_error("line1\n{{ x|nosuchfilter }}", {{"x", 1}}), "t.jinja:2: No filter named 'nosuchfilter'.");
  EXPECT_EQ(render_error("a\nb\n{{ raise_exception('roles must alternate') }}"),
            "t.jinja:3: raise_exception: roles must alternate");
  std::string e = render_error("x\n{% if true %}\nabc");
  EXPECT_EQ(e.rfind("t.jinja:2: unexpected end of template", 0), 0u) << e;
  e = render_error("{% for m in messages %}\n{{ m }}\n");
  EXPECT_EQ(e.rfind("t.jinja:1: unexpected end of template", 0), 0u) << e;
  EXPECT_EQ(render_error("a\n{% endif %}"), "t.jinja:2: Encountered unknown tag 'endif'.");
  EXPECT_EQ(
      render_error("{% for x in [1] %}\n{% endif %}{% endfor %}").rfind("t.jinja:2: Encountered unexpected tag 'endif'", 0),
      0u);
  EXPECT_EQ(render_error("ok\n\n{{ missing.attr }}"), "t.jinja:3: 'missing' is undefined");
  EXPECT_EQ(render_error("{#\n\n#}\n{{ 1 + }}").rfind("t.jinja:4:", 0), 0u);
  EXPECT_EQ(render_error("{{ 'a' +\n\n 1 }}").rfind("t.jinja:", 0), 0u);
  EXPECT_EQ(render_error("{% set x = 1 %}\n{{ x is nosuchtest }}"), "t.jinja:2: No test named 'nosuchtest'.");
  EXPECT_EQ(render_error("{% include 'x' %}").rfind("t.jinja:1: tag 'include' is not supported", 0), 0u);
  // multi-line string literal then an error: line counting must include the literal's newline
  EXPECT_EQ(render_error("{{ 'a\nb' }}\n{{ nope() }}"), "t.jinja:3: 'nope' is undefined");
}

TEST(Jinja, DeeplyNestedInputFailsCleanly) {
  std::string parens = std::string(5000, '(') + "1" + std::string(5000, ')');
  std::string e = render_error("{{ " + parens + " }}");
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  e = render_error(ifs + "x");
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
  std::string lists = std::string(3000, '[') + std::string(3000, ']');
  EXPECT_FALSE(render_error("{{ " + lists + " }}").empty());
  std::string nots;
  for (int i = 0; i < 3000; ++i) nots += "not ";
  EXPECT_FALSE(render_error("{{ " + nots + "x }}").empty());
  std::string filters = "{{ x";
  for (int i = 0; i < 3000; ++i) filters += "|trim";
  filters += " }}";
  EXPECT_FALSE(render_error(filters, {{"x", "a"}}).empty());
  // moderately nested input still works
  std::string ok = std::string(50, '(') + "7" + std::string(50, ')');
  EXPECT_EQ(Template("{{ " + ok + " }}", "t").render(ojson::object()), "7");
}

TEST(Jinja, RunawayRenderingIsBounded) {
  std::string e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("maximum macro call depth"), std::string::npos) << e;
  e = render_error("{{ 'x' * 1000000000 }}");
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
  kvb::jinja::RenderLimits small;
  small.max_output_bytes = 1 << 20;
  Template doubling(
      "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
      "t.jinja");
  try {
    doubling.render(ojson::object(), small);
    ADD_FAILURE() << "expected the output limit to trip";
  } catch (const kvb::Error& err) {
    EXPECT_NE(std::string(err.what()).find("exceeds the limit"), std::string::npos) << err.what();
  }
  small.max_loop_iterations = 1000;
  EXPECT_THROW(Template("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "t")
                   .render(ojson::object(), small),
               kvb::Error);
  // cycles / unbounded nesting through namespaces are refused (jinja2 would build them)
  e = render_error("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}");
  EXPECT_NE(e.find("inside itself"), std::string::npos) << e;
  e = render_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
  e = render_error("{{ 2 ** 64 }}");
  EXPECT_NE(e.find("overflow"), std::string::npos) << e;
}

TEST(Jinja, RandomGarbageNeverCrashes) {
  // Mutations of a real chat template plus random bytes: each must render or throw kvb::Error.
  const std::string base =
      "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}{%- endif %}"
      "{%- set ns = namespace(i=0) %}{%- for m in messages[::-1] if m.role != 'tool' %}"
      "{%- set ns.i = loop.index0 %}{{ m.content.split('</think>')[-1].lstrip('\\n')|trim }}{%- endfor %}"
      "{{ ns.i ~ (messages|length) }}{% if add_generation_prompt %}<a>{% endif %}";
  ojson vars = {{"messages", ojson::array({{{"role", "system"}, {"content", "s"}},
                                           {{"role", "user"}, {"content", "<think>r</think>\nu"}}})},
                {"add_generation_prompt", true}};
  EXPECT_NO_THROW(Template(base, "base").render(vars));  // its output is golden case chat_like_fuzz_base
  std::mt19937 rng(12345);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~*/ \n\tabcxyz0123456789=!<>";
  int errors = 0, renders = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      size_t pos = rng() % (s.size() + 1);
      switch (rng() % 3) {
        case 0: s.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 1:
          if (pos < s.size()) s.erase(pos, 1 + rng() % 5);
          break;
        default:
          if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
          break;
      }
    }
    try {
      Template t(s, "fuzz");
      t.render(vars);
      ++renders;
    } catch (const kvb::Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(renders, 0);
}
