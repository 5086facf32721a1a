#!/usr/bin/env python3
"""Golden token ids for tests/tokenizer, made with the PyPI `tokenizers` reference.

How to run (from the repository root; needs the test data: tests/data, which configuring the build
unpacks into build/test-data, or $KVB_TEST_DATA_DIR):

    python3 -m venv .venv-goldens
    .venv-goldens/bin/pip install 'tokenizers==0.23.3'
    .venv-goldens/bin/python tools/gen_tokenizer_goldens.py            # goldens
    .venv-goldens/bin/python tools/gen_tokenizer_goldens.py --tables   # unicode tables

Outputs:
  tests/fixtures/tokenizer/texts.jsonl   one {"t": text} per line (the same strings for every
                                         tokenizer), selected deterministically from
                                         the test data's datasets plus hand-written edge cases.
  tests/fixtures/tokenizer/<name>.jsonl  line i belongs to text i: {"ids": encode(text,
                                         add_special_tokens=False), "dec": decode(ids) when it
                                         differs from the text, "dsk": decode(ids,
                                         skip_special_tokens=True) when it differs from dec; every
                                         10th row also "full": encode(text) with special tokens,
                                         "fdec"/"fdsk": its two decodes}. encode(text) with special
                                         tokens == meta prefix + ids (asserted here).
  tests/fixtures/tokenizer/meta.json     reference version, tokenizer sources, counts.
  engine/tokenizer/unicode_tables.inc    (--tables) code point ranges of \\p{L} and \\p{N} as
                                         the Oniguruma regex engine inside `tokenizers` sees
                                         them (its Unicode version differs from utf8proc's).
"""
import argparse
import glob
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("KVB_TEST_DATA_DIR", os.path.join(ROOT, "build", "test-data"))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

TOKENIZERS = {
    "qwen3": "tokenizers/qwen3/tokenizer.json",
    "llama3_1": "tokenizers/llama3_1/tokenizer.json",
    "llama2": "tokenizers/llama2/tokenizer.json",
    "stories260k": "models/stories260K-hf/tokenizer.json",
}

# Hand-written snippets: multilingual text, emoji, whitespace runs, code, contractions, digits,
# special tokens written inside text. Combined pairwise below for more coverage.
SNIPPETS = [
    "Hello world", "hello   world", " leading space", "trailing space ", "  two leading",
    "I'm sure they'll say we've done it, didn't we? THEY'RE HERE. It'S ok", "'s 't 're 've 'm 'll 'd",
    "don\u2019t \u201cquoted\u201d \u2014 dash \u2026 ellipsis", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade",
    "cafe\u0301 (combining acute, NFC composes it)", "Ångström \u212b Kelvin \u212a", "ſ 'ſ long s",
    "中文分词测试：我们今天去公园玩。", "日本語のテキストです。カタカナとひらがな。", "한국어 문장입니다. 안녕하세요!",
    "Русский текст с цифрами 12345 и знаками препинания.", "Ελληνικά γράμματα αβγδ ΑΒΓΔ",
    "العربية: مرحبا بالعالم", "עברית: שלום עולם", "हिन्दी में एक वाक्य।", "ภาษาไทยไม่มีช่องว่าง",
    "Tiếng Việt có dấu: Hà Nội, Đà Nẵng", "Türkçe: İstanbul ığdır ŞEHİR", "Deutsch: Straße, Grüße, ÄÖÜ",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✅", "math ∑_{i=1}^{n} i² = n(n+1)/2, √2 ≈ 1.414, ∞, ≤ ≥ ≠",
    "numbers 1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F 1,000,000",
    "fullwidth ０１２３ ＡＢＣ", "superscripts ² ³ ¹ fractions ½ ¾ roman Ⅻ", "\u00a0nbsp\u00a0inside\u00a0text\u00a0",
    "tabs\tand\ttabs\t\t\tend", "line1\nline2\n\nline4\r\nline5\rline6", "\n\n\n", "   ", "\t", " ",
    "a" + " " * 17 + "b", "x\n" + " " * 9 + "y", "end with spaces" + " " * 6, " " * 5 + "\n" + " " * 3,
    "\u3000ideographic\u3000space", "zero\u200bwidth\u200djoiner\u2060wj", "\u2028line sep\u2029para sep",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "int main() {\n\tstd::vector<int> v{1,2,3};\n\tfor (auto& x : v) x += 1;\n}\n",
    '{"key": "value", "list": [1, 2.5, null, true], "nested": {"a": "\\u00e9"}}',
    "<html><body><p class=\"x\">Text &amp; more</p></body></html>", "SELECT * FROM t WHERE a >= 10;",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "$\\frac{a}{b}$ and $$x^2$$",
    "<|im_start|>user\nHi<|im_end|>", "<|im_start|>assistant\n<think>\n\n</think>\n\nOK<|im_end|>",
    "<|endoftext|>", "<s>hello</s>", "text<s>mid</s>text", "<unk> marker", " <s> spaced </s> ",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|reserved_special_token_5|> reserved", "<tool_call>{}</tool_call>", "<|fim_prefix|>a<|fim_suffix|>",
    "<|im_start|><|im_start|>double", "<|im_star", "<s", "</s", "<0x0A> literal byte token",
    "▁metaspace▁char▁in▁text", "Ġ Ċ byte-level chars", "\u00ff\u00fe\u0100 latin ext", "\U0001f9ea\U0001fae0 new emoji",
    "\U00010348 gothic hwair", "control \x01\x02\x1f chars", "\x7f del", "a\u0300\u0301\u0302 stacked marks",
    "UPPER lower MiXeD", "snake_case_name and camelCaseName and kebab-case-name",
    "!!!???...,,,;;;", "((([[[{{{}}}]]])))", "--- *** ___ ===", "'quoted' \"double\" `back`",
    "mixed中文English混合text", "123abc456def", "a1b2c3", "x" * 40, "🙂" * 12, "ab" * 30,
]


def gsm8k_questions(n):
    rows = [json.loads(l) for l in open(os.path.join(SHARED, "datasets/gsm8k/test.jsonl"), encoding="utf-8")]
    return [r["question"] for r in rows[:n]], [r["answer"] for r in rows[n:n + 250]]


def math500_problems():
    rows = [json.loads(l) for l in open(os.path.join(SHARED, "datasets/math500/test.jsonl"), encoding="utf-8")]
    return [r["problem"] for r in rows]


def html_chunks(n, rng):
    files = sorted(glob.glob(os.path.join(SHARED, "datasets/longproc/html_to_tsv/webpage/*.html")))
    out = []
    i = 0
    while len(out) < n:
        f = files[(i * 7) % len(files)]
        text = open(f, encoding="utf-8", errors="replace").read()
        length = rng.randint(100, 900)
        start = rng.randint(0, max(0, len(text) - length))
        out.append(text[start:start + length])
        i += 1
    return out


def synthetic(rng, n):
    out = list(SNIPPETS)
    while len(out) < n:
        a, b = rng.choice(SNIPPETS), rng.choice(SNIPPETS)
        sep = rng.choice(["", " ", "\n", "  ", "\t", "\n\n", " \n "])
        out.append(a + sep + b)
    return out


def build_texts():
    rng = random.Random(20240601)
    q, answers = gsm8k_questions(600)
    texts = q + answers + math500_problems() + html_chunks(350, rng) + synthetic(rng, 400)
    return texts


def gen_goldens():
    from tokenizers import Tokenizer
    import tokenizers
    texts = build_texts()
    os.makedirs(FIX, exist_ok=True)
    with open(os.path.join(FIX, "texts.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"t": t}, ensure_ascii=False) + "\n")
    meta = {"tokenizers_version": tokenizers.__version__, "texts": len(texts), "tokenizers": {}}
    for name, rel in TOKENIZERS.items():
        tok = Tokenizer.from_file(os.path.join(SHARED, rel))
        prefix = tok.encode("", add_special_tokens=True).ids
        with open(os.path.join(FIX, name + ".jsonl"), "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                ids = tok.encode(t, add_special_tokens=False).ids
                full = tok.encode(t, add_special_tokens=True).ids
                # The post-processor (TemplateProcessing) only prepends `prefix` (BOS).
                assert full == prefix + ids, (name, i)
                row = {"ids": ids}
                dec = tok.decode(ids, skip_special_tokens=False)
                if dec != t:
                    row["dec"] = dec
                dsk = tok.decode(ids, skip_special_tokens=True)
                if dsk != dec:
                    row["dsk"] = dsk
                if i % 10 == 0:
                    row["full"] = full
                    row["fdec"] = tok.decode(full, skip_special_tokens=False)
                    row["fdsk"] = tok.decode(full, skip_special_tokens=True)
                f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        info = {"source": rel, "strings": len(texts), "prefix": prefix,
                "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
        cfg_path = os.path.join(os.path.dirname(os.path.join(SHARED, rel)), "tokenizer_config.json")
        cfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
        for key in ("bos_token", "eos_token"):
            v = cfg.get(key)
            v = v.get("content") if isinstance(v, dict) else v
            info[key.replace("_token", "_id")] = tok.token_to_id(v) if v else None
        info["special_ids"] = sorted(i for i, a in tok.get_added_tokens_decoder().items() if a.special)
        info["pieces"] = {str(i): tok.id_to_token(i) for i in range(0, info["vocab_size"], 997)}
        meta["tokenizers"][name] = info
        print(name, len(texts), "strings")
    meta["chat"] = gen_chat_goldens()
    with open(os.path.join(FIX, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)


CHAT_MESSAGES = [
    {"role": "system", "content": "You are a careful assistant.  Answer briefly."},
    {"role": "user", "content": "What is 7 \u00d7 8? Show <b>work</b>\n\n  then answer."},
    {"role": "assistant", "content": "7 \u00d7 8 = 56."},
    {"role": "user", "content": "And 中文 <|im_start|> 😀?"},
]


def gen_chat_goldens():
    """Rendered chat prompts (transformers apply_chat_template) for the CLI test of
    `kvbench tokenize --chat`; the messages are written to messages.json."""
    from transformers import AutoTokenizer
    with open(os.path.join(FIX, "messages.json"), "w", encoding="utf-8") as f:
        json.dump(CHAT_MESSAGES, f, indent=1, ensure_ascii=False)
    t = AutoTokenizer.from_pretrained(os.path.join(SHARED, "tokenizers/qwen3"))
    out = {}
    for key, kwargs in (("qwen3", {}), ("qwen3_no_thinking", {"enable_thinking": False})):
        prompt = t.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=True, **kwargs)
        ids = t.apply_chat_template(CHAT_MESSAGES, tokenize=True, add_generation_prompt=True, **kwargs)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        out[key] = {"prompt": prompt, "ids": list(ids)}
    return out


def onig_set(pattern):
    """Code points matched by `pattern` in the Oniguruma engine of `tokenizers`."""
    from tokenizers import pre_tokenizers, Regex
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    cps = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000)]
    out = []
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        kept = set()
        for piece, _ in split.pre_tokenize_str("".join("\x01" + chr(c) for c in chunk)):
            kept.update(ord(ch) for ch in piece)
        out.extend(c for c in chunk if c not in kept)
    ranges = []
    for c in out:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def gen_tables():
    import tokenizers
    path = os.path.join(ROOT, "engine", "tokenizer", "unicode_tables.inc")
    with open(path, "w") as f:
        f.write("// Generated by tools/gen_tokenizer_goldens.py --tables from tokenizers %s (Oniguruma).\n"
                % tokenizers.__version__)
        f.write("// Inclusive code point ranges; do not edit by hand.\n")
        for name, pat in (("kLetterRanges", r"\p{L}"), ("kNumberRanges", r"\p{N}"), ("kSpaceRanges", r"\s")):
            r = onig_set(pat)
            f.write("static constexpr CodeRange %s[] = {\n" % name)
            for a, b in r:
                f.write("    {0x%X, 0x%X},\n" % (a, b))
            f.write("};\n")
            print(name, len(r), "ranges")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", action="store_true", help="write engine/tokenizer/unicode_tables.inc")
    args = ap.parse_args()
    if not os.path.isdir(SHARED):
        sys.exit(f"{SHARED}: not found; configure the build first (cmake -S . -B build), which unpacks tests/data there")
    gen_tables() if args.tables else gen_goldens()
