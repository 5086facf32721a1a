#!/usr/bin/env python3
"""Generates the chat-template and Jinja goldens used by tests/chat and tests/jinja.

The reference is Hugging Face transformers' own chat-template machinery (jinja2 3.1.6 inside
transformers' ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks and its custom
raise_exception / strftime_now / tojson / namespace), so the C++ interpreter is compared with
exactly what `tokenizer.apply_chat_template(..., tokenize=False)` produces.

How to run (from the repository root):

    python3 tools/gen_chat_goldens.py

If the current Python lacks transformers/jinja2, the script creates `.venv-goldens` next to the
repository root, installs the pinned packages from PyPI into it, and re-runs itself there:

    python3 -m venv .venv-goldens
    .venv-goldens/bin/pip install 'transformers>=5,<6' 'jinja2==3.1.6' tokenizers
    .venv-goldens/bin/python tools/gen_chat_goldens.py

Outputs (committed):
    tests/fixtures/chat/jinja_goldens.json   small templates -> rendered text or error
    tests/fixtures/chat/chat_goldens.json    real chat templates x conversations x options

Inputs: the test data's tokenizers/{qwen3,llama3_1} (tests/data, unpacked into build/test-data) (rendered through AutoTokenizer +
apply_chat_template) and tests/fixtures/chat/*/tokenizer_config.json (rendered through
transformers.utils.chat_template_utils.render_jinja_template, i.e. apply_chat_template's
renderer, after the same None-key dropping apply_chat_template performs).
"""
import json
import os

import goldens_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = goldens_env.test_data()  # tests/data, unpacked (its "shared" tokenizers)
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat")


goldens_env.ensure(["jinja2", "transformers"], ["transformers>=5,<6", "jinja2==3.1.6", "tokenizers"])

import jinja2  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template  # noqa: E402

# ----------------------------------------------------------------------------- Jinja unit cases
# (name, template, variables). Each exercises one feature; errors are recorded too.
J = []


def case(name, tpl, **vars_):
    J.append((name, tpl, vars_))


# whitespace control, trim_blocks / lstrip_blocks
case("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB\n")
case("ws_lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz")
case("ws_minus_both", "a  {%- if true -%}  b  {%- endif -%}  c")
case("ws_var_minus", "a \n {{- 'x' -}} \n b")
case("ws_plus_disables", "a\n    {%+ if true +%}\nb{% endif %}")
case("ws_comment", "a\n  {# comment #}\nb {#- c -#} c")
case("ws_trailing_newline", "line\n")
case("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc")
case("ws_var_no_lstrip", "x\n    {{ 'v' }}\n")
case("ws_raw", "{% raw %}{{ not evaluated }}{% endraw %}!")
case("ws_inline_text_before_tag", "ab {% if true %}c{% endif %} d")
# literals and printing
case("print_types", "{{ 1 }}|{{ 1.5 }}|{{ 'x' }}|{{ none }}|{{ true }}|{{ False }}|{{ [1, 'a', none, 2.0] }}|{{ {'k': [1, {'z': true}]} }}|{{ (1, 2) }}|{{ (1,) }}")
case("print_floats", "{{ 1/3 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 100.0 }} {{ 1e16 }} {{ 123456789.125 }} {{ -0.0 }}")
case("print_str_repr", "{{ ['it\\'s', 'a\"b', 'x\\ny', 'tab\\t', 'back\\\\slash', 'é'] }}")
case("string_escapes", "{{ 'a\\nb\\tc\\x41\\u00e9' }}|{{ \"q\\\"q\" }}|{{ 'adj' 'acent' }}")
case("undefined_prints_empty", "[{{ missing }}][{{ d.nokey }}]", d={})
# operators
case("arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}")
case("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 * 3 ~ 4 }} {{ not true or true }} {{ not (true or true) }}")
case("concat_tilde", "{{ 'a' ~ 1 ~ none ~ [1] ~ missing }}")
case("string_mul_add", "{{ 'ab' * 3 }}{{ [1] * 2 }}{{ 'x' + 'y' }}{{ [1] + [2] }}")
case("compare", "{{ 1 < 2 }}{{ 2 <= 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ 'a' != 'a' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] < [1, 3] }}")
case("in_notin", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}{{ 3 not in [1] }}")
case("and_or_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or none }}")
case("ternary", "{{ 'y' if true else 'n' }}{{ 'y' if false else 'n' }}[{{ 'y' if false }}]{{ 1 if 0 else 2 if 1 else 3 }}")
case("slicing", "{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ [1,2,3,4][::2] }}{{ [1,2,3][-2:] }}{{ 'héllo'[1] }}{{ [1,2,3][:-1] }}{{ 'abc'[5:] }}{{ [1,2,3,4,5][4:1:-2] }}")
case("subscript_attr", "{{ d.a }}{{ d['a'] }}{{ l[0] }}{{ l[-1] }}{{ l.1 }}{{ d.b.c }}", d={"a": 1, "b": {"c": "C"}}, l=[10, 20])
case("dict_method_vs_key", "{{ d['items'] }}|{{ d.get('x', 'dflt') }}|{{ d.get('a') }}|{{ d.get('zz') }}", d={"items": 5, "a": 1})
# statements
case("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ x }};{% endfor %}")
case("for_prev_next", "{% for x in [1,2,3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}")
case("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}{% else %}no{% endfor %}")
case("for_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ '/' ~ loop.length if loop.last }},{% endfor %}")
case("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}", d={"b": 1, "a": 2})
case("for_nested_loop", "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}")
case("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}")
case("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("for_scope", "{% set x = 5 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}")
case("for_over_undefined", "[{% for x in nothing %}{{ x }}{% endfor %}]")
case("if_elif_else", "{% for v in [1,2,3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}other{% endif %} {% endfor %}")
case("if_set_leaks", "{% if true %}{% set y = 3 %}{% endif %}{{ y }}")
case("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}")
case("set_block", "{% set x %}  hello {{ 1 + 1 }}  {% endset %}[{{ x }}]{% set y | upper | trim %} up {% endset %}[{{ y }}]")
case("namespace", "{% set ns = namespace(c=0, items=[]) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.c }}{{ ns.items }}")
case("namespace_block_set", "{% set ns = namespace() %}{% set ns.v %}block{% endset %}{{ ns.v }}")
case("macro_basic", "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Yo') }} {{ greet('X', 'Hey') }}")
case("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}")
case("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}")
case("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}")
case("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inside {{ 1 }}{% endcall %}")
case("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}<{{ item }}>{% endcall %}")
case("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}")
case("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]")
case("generation_tag", "{% generation %}gen{{ 1 }}{% endgeneration %}")
# filters
case("f_trim_length", "[{{ '  x y \\n'|trim }}][{{ 'xxaxx'|trim('x') }}]{{ 'héllo'|length }}{{ [1,2]|count }}{{ {'a':1}|length }}")
case("f_case", "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello world-foo(bar'|title }} {{ 'hELLO wORLD'|capitalize }}")
case("f_replace_join", "{{ 'aaa'|replace('a', 'b', 2) }} {{ ['a', 1, none]|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}")
case("f_first_last", "{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ 'abc'|first }}[{{ []|first }}]")
case("f_default", "{{ missing|default('d') }}{{ missing|d('dd') }}{{ ''|default('e') }}{{ ''|default('f', true) }}{{ none|default('n') }}{{ 0|default(5, boolean=true) }}")
case("f_items_list", "{{ {'a': 1, 'b': [2]}|items|list }}{{ 'ab'|list }}{{ {'x': 1}|list }}")
case("f_int_float", "{{ '42'|int }}{{ '3.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '2.5'|float }}{{ 'q'|float }}{{ 4|float }}{{ ' 12 '|int }}{{ true|int }}")
case("f_round_abs", "{{ 2.5|round }}{{ 3.5|round }}{{ -2.5|round }}{{ 2.567|round(2) }}{{ 2.561|round(1, 'ceil') }}{{ 2.569|round(1, 'floor') }}{{ -3|abs }}{{ -2.5|abs }}{{ 7|round }}")
case("f_select_reject", "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('odd')|list }}{{ [0,1,'',none,'a']|select|list }}{{ [1,5,10]|select('gt', 3)|list }}")
case("f_selectattr_map", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='content')|join }}{{ ms|selectattr('flag')|list|length }}{{ ['a','b']|map('upper')|list }}",
     ms=[{"role": "user", "content": "u1", "flag": True}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}])
case("f_unique_sort_reverse", "{{ ['b','A','a','c']|unique|list }}{{ ['b','A','a']|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }}{{ [1,2,3]|reverse|list }}{{ 'abc'|reverse }}{{ ['b','A']|sort(case_sensitive=true) }}")
case("f_tojson", "{{ {'b': 1, 'a': [1, 2.5, 'é\\n\"<>&'], 'c': none, 'd': true}|tojson }}|{{ 'x'|tojson }}|{{ [1, {'a': []}]|tojson(indent=2) }}|{{ {'a': 1}|tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ {}|tojson(indent=2) }}")
case("f_tojson_messages", "{{ messages|tojson }}", messages=[{"role": "user", "content": "Hi \u2603 \U0001F600", "extra": {"n": 1.0, "z": None}}])
case("f_string_safe_escape", "{{ 12|string ~ 'x' }}{{ '<a>'|safe }}{{ '<a href=\"x\">&\\''|e }}")
case("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}")
case("f_wordcount_dictsort_batch", "{{ 'hello big world'|wordcount }}{{ {'b': 1, 'a': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value') }}{{ [1,2,3,4,5]|batch(2)|list }}{{ [1,2,3]|batch(2, 'x')|list }}")
case("f_sum_min_max", "{{ [1,2,3]|sum }}{{ [1,2]|sum(start=10) }}{{ [3,1,2]|min }}{{ ['b','C','a']|max }}{{ [{'v': 3}, {'v': 9}]|max(attribute='v') }}")
case("f_format", "{{ '%s-%d'|format('a', 3) }}{{ '%s and %s' % ('x', 'y') }}{{ '%05.1f'|length }}")
# tests
case("tests_types", "{{ 1 is number }}{{ 1.0 is float }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ true is true }}{{ 0 is false }}{{ false is boolean }}{{ range is callable }}")
case("tests_defined", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ x is not none }}{{ z is none }}{{ d.q is defined }}{{ u is iterable }}{{ u is sequence }}{{ u is mapping }}", x=1, z=None, d={})
case("tests_compare", "{{ 1 is eq 1 }}{{ 2 is equalto 3 }}{{ 3 is gt 2 }}{{ 3 is lt 2 }}{{ 2 is ge 2 }}{{ 'a' is in 'abc' }}{{ 3 is divisibleby 3 }}{{ 3 is odd }}{{ 4 is even }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 2 is ne 2 }}{{ 1 is sameas 1 }}{{ none is sameas none }}")
case("not_is_precedence", "{{ not x is defined }}{{ not y is defined }}{{ x is defined and not y is defined }}", x=1)
# string methods
case("str_methods_1", "{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ ' a b '.split(none, 1) }}")
case("str_methods_2", "[{{ '  x '.strip() }}][{{ '\\n\\nx\\n'.lstrip('\\n') }}][{{ 'xyy'.rstrip('y') }}]{{ 'aXbX'.replace('X', '-') }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'hello wORLD'.title() }}{{ 'hello'.capitalize() }}")
case("str_methods_3", "{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'banana'.count('an') }}{{ '{} and {}'.format(1, 'b') }}{{ '{0}{0}{name}'.format('x', name='N') }}{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a\\nb\\r\\nc'.splitlines() }}")
case("str_think_split", "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", m="<think>\nreason here\n</think>\n\nThe answer.")
case("list_methods", "{{ [1,2,2].count(2) }}{{ ['a','b'].index('b') }}{{ d.keys()|list }}{{ d.values()|list }}", d={"x": 1, "y": 2})
# globals
case("globals_range_dict", "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ dict(a=1)['a'] }}")
case("strftime_now_is_string", "{{ strftime_now('%d %b %Y') is string }}{{ strftime_now('%Y')|length }}")
case("slice_big_step", "{{ [1,2,3][::9223372036854775807] }}{{ 'abc'[2::9223372036854775807] }}{{ range(9223372036854775806, 9223372036854775807, 5)|list }}")
case("unicode_text", "{{ 'naïve café — 日本語 🎉'|upper }}|{{ 'ÉCOLE'|lower }}|{{ '日本語'[::-1] }}|{{ '🎉ab'|length }}")
case("chat_like_fuzz_base",
     "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}{%- endif %}"
     "{%- set ns = namespace(i=0) %}{%- for m in messages[::-1] if m.role != 'tool' %}"
     "{%- set ns.i = loop.index0 %}{{ m.content.split('</think>')[-1].lstrip('\\n')|trim }}{%- endfor %}"
     "{{ ns.i ~ (messages|length) }}{% if add_generation_prompt %}<a>{% endif %}",
     messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "<think>r</think>\nu"}], add_generation_prompt=True)
case("bos_eos_vars", "{{ bos_token }}x{{ eos_token }}", bos_token="<s>", eos_token="</s>")
# errors
case("err_unknown_filter", "line1\n{{ x|nosuchfilter }}", x=1)
case("err_unknown_test", "{% if x is nosuchtest %}{% endif %}", x=1)
case("err_raise_exception", "a\nb\n{{ raise_exception('Conversation roles must alternate') }}")
case("err_unclosed_for", "{% for x in y %}\n{{ x }}\n")
case("err_unclosed_if", "x\n{% if true %}\nabc")
case("err_bad_expr", "{{ 1 + }}")
case("err_unexpected_endif", "a\n{% endif %}")
case("err_unknown_tag", "{% frobnicate %}")
case("err_attr_of_undefined", "ok\n{{ missing.attr }}")
case("err_add_str_int", "{{ 'a' + 1 }}")
case("err_compare_types", "{{ 1 < 'a' }}")
case("err_tojson_undefined", "{{ missing|tojson }}")
case("err_unclosed_string", "{{ 'abc }}")
case("err_unclosed_var", "abc {{ x ")
case("err_list_append", "{% set l = [] %}{{ l.append(1) }}")
case("err_ns_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}")
case("err_set_non_ns", "{% set d = {} %}{% set d.x = 1 %}")
case("err_div_zero", "{{ 1 / 0 }}")
case("err_call_undefined", "{{ nofunc(1) }}")
case("err_range_too_big", "{{ range(1000000)|length }}")


def render_jinja_cases():
    out = []
    for name, tpl, vars_ in J:
        rec = {"name": name, "template": tpl, "vars": vars_}
        try:
            rec["expected"] = _compile_jinja_template(tpl).render(**vars_)
        except Exception as e:  # noqa: BLE001 - errors are goldens too
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- chat cases
THINK_HIST = "<think>\nFirst I add 2 and 2.\nThat makes 4.\n</think>\n\nThe answer is 4."
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": "Name a prime number."}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Good morning"},
     {"role": "assistant", "content": "Bonjour"}, {"role": "user", "content": "Thank you"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": THINK_HIST},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "Solve x+1=3."}, {"role": "assistant", "content": "<think>\nSubtract 1.\n</think>\n\nx = 2."}],
    [{"role": "user", "content": "  padded question with trailing newline\n"},
     {"role": "assistant", "content": "\n  padded answer  \n"}, {"role": "user", "content": "\tok\t"}],
    [{"role": "user", "content": "Unicode: naïve café — 日本語 🎉 «quotes» \"dq\" 'sq' \\ backslash"}],
    [{"role": "user", "content": "Template-looking text {{ x }} {% if %} and <|im_start|> tokens"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
    [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"},
     {"role": "assistant", "content": "<think>r2</think>a2"}, {"role": "user", "content": "q3"},
     {"role": "assistant", "content": "a3"}, {"role": "user", "content": "q4"}],
    [{"role": "user", "content": "Explain."}, {"role": "assistant", "content": "Because.", "reasoning_content": "Let me think about it."},
     {"role": "user", "content": "More?"}],
    [{"role": "system", "content": "Multi\nline\nsystem"}, {"role": "user", "content": "line1\nline2\n\nline4"},
     {"role": "assistant", "content": "<think>\n\n</think>\n\nshort"}, {"role": "user", "content": "again", "name": None}],
]

TEMPLATES = [
    # name, kind, location, option sets
    ("qwen3", "shared", "tokenizers/qwen3", [{"enable_thinking": None}, {"enable_thinking": True}, {"enable_thinking": False}]),
    ("llama3_1", "shared", "tokenizers/llama3_1", [{}]),
    ("llama3_1_tools", "fixture", "llama3_1_tools", [{"extra": {"date_string": "26 Jul 2024"}}, {"extra": {"date_string": "01 Jan 2025"}}]),
    ("deepseek_r1_distill_qwen", "fixture", "deepseek_r1_distill_qwen", [{}]),
    ("deepseek_r1_distill_qwen_think", "fixture", "deepseek_r1_distill_qwen_think", [{}]),
    ("phi3_mini_4k", "fixture", "phi3_mini_4k", [{}]),
    ("phi3_mini_system", "fixture", "phi3_mini_system", [{}]),
    ("smollm2_instruct", "fixture", "smollm2_instruct", [{}]),
]


def token_str(v):
    if v is None:
        return None
    if isinstance(v, dict):
        return v.get("content")
    return v


def render_chat_cases():
    cases = []
    for name, kind, loc, optsets in TEMPLATES:
        if kind == "shared":
            tok = AutoTokenizer.from_pretrained(os.path.join(SHARED, loc))
            render = None
        else:
            with open(os.path.join(FIXTURES, loc, "tokenizer_config.json"), encoding="utf-8") as f:
                cfg = json.load(f)
            tok = None
            tpl = cfg["chat_template"]
            specials = {k: token_str(cfg.get(k)) for k in ("bos_token", "eos_token")}
            specials = {k: v for k, v in specials.items() if v is not None}
        for ci, conv in enumerate(CONVERSATIONS):
            for gen in (True, False):
                for opts in optsets:
                    kwargs = dict(opts.get("extra", {}))
                    if opts.get("enable_thinking") is not None:
                        kwargs["enable_thinking"] = opts["enable_thinking"]
                    rec = {"template": name, "conversation": ci, "add_generation_prompt": gen,
                           "enable_thinking": opts.get("enable_thinking"), "extra": opts.get("extra", {})}
                    try:
                        if tok is not None:
                            rec["expected"] = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kwargs)
                        else:
                            # apply_chat_template drops None-valued keys, then renders with special tokens + kwargs
                            clean = [{k: v for k, v in m.items() if v is not None} for m in conv]
                            out, _ = render_jinja_template(conversations=[clean], chat_template=tpl,
                                                           add_generation_prompt=gen, **{**specials, **kwargs})
                            rec["expected"] = out[0]
                    except Exception as e:  # noqa: BLE001
                        rec["error"] = f"{type(e).__name__}: {e}"
                    cases.append(rec)
    return cases


def main():
    meta = {"generator": "tools/gen_chat_goldens.py", "transformers": transformers.__version__, "jinja2": jinja2.__version__}
    jin = {"meta": meta, "cases": render_jinja_cases()}
    with open(os.path.join(FIXTURES, "jinja_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(jin, f, ensure_ascii=False, indent=1)
        f.write("\n")
    chat = {"meta": meta, "conversations": CONVERSATIONS,
            "templates": {n: {"kind": k, "location": l} for n, k, l, _ in TEMPLATES}, "cases": render_chat_cases()}
    with open(os.path.join(FIXTURES, "chat_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(chat, f, ensure_ascii=False, indent=1)
        f.write("\n")
    nerr = sum("error" in c for c in jin["cases"])
    print(f"jinja cases: {len(jin['cases'])} ({nerr} errors); chat cases: {len(chat['cases'])} "
          f"({sum('error' in c for c in chat['cases'])} errors)")


if __name__ == "__main__":
    main()
