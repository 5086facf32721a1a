#!/usr/bin/env python3
"""tests/fixtures/gguf/tiny_llama_named_templates.gguf: tiny_llama.gguf with named chat templates
as llama.cpp's convert script writes them (gguf-py GGUFWriter.add_chat_template with a list:
`tokenizer.chat_template` for "default", `tokenizer.chat_template.<NAME>` for the others, and the
names in `tokenizer.chat_templates`), written by gguf-py's own gguf_new_metadata script. Read by
kvbench's --chat-template NAME (harness/model_source.cpp; tests/harness/test_model_source.cpp).

    .venv-goldens/bin/python tools/gen_gguf_named_templates.py   (needs: pip install gguf)
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "gguf", "tiny_llama.gguf")
DST = os.path.join(ROOT, "tests", "fixtures", "gguf", "tiny_llama_named_templates.gguf")
TEMPLATES = [
    {"name": "default", "template": "D:{% for m in messages %}{{ m['content'] }}{% endfor %}"},
    {"name": "tool_use", "template": "T:{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"},
    {"name": "rag", "template": "R:{{ messages[-1]['content'] }}"},
]

subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", SRC, DST, "--force",
                "--chat-template", json.dumps(TEMPLATES)], check=True)
print("wrote", DST)
