#!/usr/bin/env python3
"""Makes the GGUF test fixtures and their goldens (tests/fixtures/gguf/) from the Python references.

How to run (from the repository root; the script creates and re-enters its own virtualenv when the
references are not importable):

    python3 tools/gen_gguf_goldens.py                # fixtures + goldens; SmolLM2 goldens when the
                                                     # model is in the cache (tools/fetch_default_model.sh)
    python3 tools/gen_gguf_goldens.py --smollm2 PATH # or name the SmolLM2 .gguf explicitly

References (PyPI): `gguf` (writer, quantize/dequantize, reader), `transformers` (GGUF model and
tokenizer loading: AutoModelForCausalLM / AutoTokenizer.from_pretrained(gguf_file=...)), `tokenizers`,
`torch` (CPU), `numpy`.

What it writes (all small; the real SmolLM2 file is ~98 MB and is never committed):
  quant_types.gguf            one tensor per supported ggml type + metadata of every value type
  quant_types.golden.json     per tensor: HF shape, gguf.quants.dequantize() checksum + head values;
                              the metadata as GGUFReader parses it
  tiny_llama.gguf             a random-weight llama (mixed F32/F16/BF16/Q8_0/Q4_0/Q4_1, untied
                              lm_head, Q/K rows permuted as llama.cpp's converter does) with a
                              byte-level BPE ("gpt2") tokenizer trained here, and SmolLM2's template
  stories260K.gguf            tests/data/models/stories260K-hf converted as llama.cpp would (tied,
                              Q8_0/F16/F32) with the llama2.c SentencePiece vocabulary and scores
  <name>.golden.json          for both models: transformers' config, its state dict (checksums),
                              its tokenizer.json (backend_tokenizer) and tokenizer_config
  <name>.ids.json             token ids of >= 500 strings from transformers' GGUF tokenizer
  <name>_logits.json          last-position logits of fixed prompts, transformers forward (f32)
  smollm2.golden.json, smollm2.ids.json, smollm2_logits.json  (only with the real file)

Checksum (tests/gguf/gguf_test.cpp implements the same): the tensor as C-contiguous float32 in HF
shape, bits b_i as uint32; sum_i b_i * ((2i+1) * 0x9E3779B97F4A7C15) mod 2^64, as 16 hex digits.
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, ".venv-goldens")
REQS = ["numpy", "gguf==0.19.0", "torch", "transformers>=5", "accelerate", "safetensors", "tokenizers", "sentencepiece", "jinja2"]


def _ensure_env():
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("KVB_GOLDENS_VENV") == "1":
            raise
        if not os.path.exists(os.path.join(VENV, "bin", "python")):
            subprocess.check_call([sys.executable, "-m", "venv", VENV])
            subprocess.check_call([os.path.join(VENV, "bin", "pip"), "install",
                                   "--extra-index-url", "https://download.pytorch.org/whl/cpu", *REQS])
        os.environ["KVB_GOLDENS_VENV"] = "1"
        os.execv(os.path.join(VENV, "bin", "python"), [os.path.join(VENV, "bin", "python"), *sys.argv])


_ensure_env()

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants  # noqa: E402

OUT = os.path.join(REPO, "tests", "fixtures", "gguf")
SHARED = os.path.join(REPO, "tests", "data")  # plain files: models/stories260K-hf, models/stories260K
MULT = np.uint64(0x9E3779B97F4A7C15)


def checksum(a: np.ndarray) -> str:
    bits = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    i = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mult = (np.uint64(2) * i + np.uint64(1)) * MULT
        return "%016x" % int((bits * mult).sum(dtype=np.uint64))


def tensor_golden(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a, dtype=np.float32)
    flat = a.reshape(-1)
    return {"shape": list(a.shape), "checksum": checksum(a),
            "head": [float(x) for x in flat[:8]], "sum": float(flat.astype(np.float64).sum())}


def dump(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":"))
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# 1. quant_types.gguf: every supported tensor type, every metadata value type
# ---------------------------------------------------------------------------------------------
def random_kquant_blocks(rng, qtype, n_blocks):
    """Raw K-quant blocks (gguf-py has no K-quant quantizer): random quant bits and scales,
    finite fp16 super-block scales. Dequantisation is defined for any bit pattern."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    d = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    dmin = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    if qtype in (Q.Q4_K, Q.Q5_K):
        raw[:, 0:2] = d
        raw[:, 2:4] = dmin
    elif qtype == Q.Q6_K:
        raw[:, type_size - 2:] = d
    return raw


def make_quant_types():
    rng = np.random.default_rng(1234)
    path = os.path.join(OUT, "quant_types.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    # metadata of every value type
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo wörld ✓")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1.0 / 3.0)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_str", ["a", "", "ünï"])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_key_value("test.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8)
    w.add_key_value("test.arr_bool", [True, False], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    w.add_array("test.arr_nested", [[1, 2], [3]])

    tensors = {}
    rows, cols = 3, 512
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    for qt in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
        name = "t_" + qt.name.lower()
        if qt == Q.F32:
            w.add_tensor(name, x)
            raw = x
        elif qt == Q.F16:
            raw = x.astype(np.float16)
            w.add_tensor(name, raw)
        else:
            raw = quants.quantize(x, qt)
            w.add_tensor(name, raw, raw_dtype=qt)
        tensors[name] = (raw, qt)
    for qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        name = "t_" + qt.name.lower()
        raw = random_kquant_blocks(rng, qt, rows * cols // 256).reshape(rows, -1)
        w.add_tensor(name, raw, raw_dtype=qt)
        tensors[name] = (raw, qt)
    # a 3-D tensor: GGUF stores dims innermost first; HF shape is the reverse
    x3 = rng.standard_normal((2, 3, 64)).astype(np.float32)
    raw3 = quants.quantize(x3, Q.Q8_0)
    w.add_tensor("t_3d_q8_0", raw3, raw_dtype=Q.Q8_0)
    tensors["t_3d_q8_0"] = (raw3, Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # goldens from the reader + gguf.quants.dequantize (independent of the writer's inputs)
    r = gguf.GGUFReader(path)
    golden = {"tensors": {}, "metadata": {}}
    for t in r.tensors:
        deq = quants.dequantize(t.data, t.tensor_type)
        g = tensor_golden(deq)
        g["type"] = t.tensor_type.name
        g["gguf_dims"] = [int(d) for d in t.shape]
        golden["tensors"][t.name] = g
    for k, f in r.fields.items():
        if not k.startswith("test.") and k != "general.alignment":
            continue
        golden["metadata"][k] = field_value(f)
    golden["alignment"] = int(r.alignment)
    golden["data_offset"] = int(r.data_offset)
    dump(os.path.join(OUT, "quant_types.golden.json"), golden, indent=1)


def field_value(f):
    """The value as stored. gguf-py's contents() flattens nested arrays, so those are rebuilt from
    the raw parts the reader keeps (elem type, count, then each inner array's type/count/items)."""
    vt = gguf.GGUFValueType
    if len(f.types) >= 2 and f.types[0] == vt.ARRAY and f.types[1] == vt.ARRAY:
        parts = [p.tolist() for p in f.parts[3:]]  # after key length, key, value type

        def walk(i):  # parts[i] = elem type, parts[i+1] = count
            et, n = vt(parts[i][0]), parts[i + 1][0]
            i += 2
            out = []
            for _ in range(n):
                if et == vt.ARRAY:
                    v, i = walk(i)
                elif et == vt.STRING:
                    v, i = bytes(parts[i + 1]).decode(), i + 2
                else:
                    v, i = parts[i][0], i + 1
                out.append(v)
            return out, i

        return walk(0)[0]
    return f.contents()


# ---------------------------------------------------------------------------------------------
# 2. model fixtures
# ---------------------------------------------------------------------------------------------
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = """The quick brown fox jumps over the lazy dog. Once upon a time, there was a little girl named Lily.
She liked to play in the park with her friends. def main(): return 42  # code
Numbers: 3.14159, 2718, 1,000,000 and 2024-11-22. Hello world! It's what they're doing, we'll see.
Machine learning models compress the key value cache to save memory during long generation.
"""


def train_byte_bpe():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=420, min_frequency=1,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 20, trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    types = [3 if t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>") else 1 for t in tokens]
    # a user-defined token (type 4) and a mislabelled control token outside the byte alphabet
    tokens += ["<think>", "[PAD 1]"]
    types += [4, 3]
    return tokens, merges, types


def llama_permute(w, n_head, n_head_kv):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (the rotary interleave)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def add_typed(w, name, arr, qt):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if qt == Q.F32:
        w.add_tensor(name, arr)
    elif qt == Q.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        w.add_tensor(name, quants.quantize(arr, qt), raw_dtype=qt)


def write_llama_gguf(path, cfg, weights, types_for, tok_meta, name):
    """weights: HF-named float32 arrays; types_for(hf_name, array) -> ggml type."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(len(tok_meta["tokens"]))
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_file_type(1)
    tm = tok_meta
    w.add_tokenizer_model(tm["model"])
    if "pre" in tm:
        w.add_tokenizer_pre(tm["pre"])
    w.add_token_list(tm["tokens"])
    w.add_token_types(tm["types"])
    if "scores" in tm:
        w.add_token_scores(tm["scores"])
    if "merges" in tm:
        w.add_token_merges(tm["merges"])
    for k in ("bos", "eos", "unk", "pad"):
        if k + "_id" in tm:
            getattr(w, {"bos": "add_bos_token_id", "eos": "add_eos_token_id", "unk": "add_unk_token_id",
                        "pad": "add_pad_token_id"}[k])(tm[k + "_id"])
    if "add_bos" in tm:
        w.add_add_bos_token(tm["add_bos"])
    if "add_space_prefix" in tm:
        w.add_add_space_prefix(tm["add_space_prefix"])
    if "chat_template" in tm:
        w.add_chat_template(tm["chat_template"])
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rename = [("model.embed_tokens.", "token_embd."), ("lm_head.", "output."), ("model.norm.", "output_norm."),
              (".self_attn.q_proj.", ".attn_q."), (".self_attn.k_proj.", ".attn_k."),
              (".self_attn.v_proj.", ".attn_v."), (".self_attn.o_proj.", ".attn_output."),
              (".mlp.gate_proj.", ".ffn_gate."), (".mlp.up_proj.", ".ffn_up."), (".mlp.down_proj.", ".ffn_down."),
              (".input_layernorm.", ".attn_norm."), (".post_attention_layernorm.", ".ffn_norm."),
              ("model.layers.", "blk.")]
    for hf, arr in weights.items():
        g = hf
        for a, b in rename:
            g = g.replace(a, b)
        if ".attn_q." in g:
            arr = llama_permute(arr, nh, nh)
        elif ".attn_k." in g:
            arr = llama_permute(arr, nh, nkv)
        add_typed(w, g, arr, types_for(hf, arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny_llama():
    rng = np.random.default_rng(7)
    tokens, merges, types = train_byte_bpe()
    V = len(tokens)
    cfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, rope_theta=50000.0, rms_norm_eps=1e-5)
    H, I, hd = 64, 128, 16
    wts = {"model.embed_tokens.weight": rng.standard_normal((V, H)) * 0.5}
    for l in range(2):
        p = f"model.layers.{l}."
        wts[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(H)
        wts[p + "self_attn.q_proj.weight"] = rng.standard_normal((4 * hd, H)) * 0.2
        wts[p + "self_attn.k_proj.weight"] = rng.standard_normal((2 * hd, H)) * 0.2
        wts[p + "self_attn.v_proj.weight"] = rng.standard_normal((2 * hd, H)) * 0.2
        wts[p + "self_attn.o_proj.weight"] = rng.standard_normal((H, 4 * hd)) * 0.2
        wts[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(H)
        wts[p + "mlp.gate_proj.weight"] = rng.standard_normal((I, H)) * 0.2
        wts[p + "mlp.up_proj.weight"] = rng.standard_normal((I, H)) * 0.2
        wts[p + "mlp.down_proj.weight"] = rng.standard_normal((H, I)) * 0.1
    wts["model.norm.weight"] = 1 + 0.1 * rng.standard_normal(H)
    wts["lm_head.weight"] = rng.standard_normal((V, H)) * 0.3
    wts = {k: v.astype(np.float32) for k, v in wts.items()}
    kinds = {"q_proj": Q.Q4_0, "k_proj": Q.Q4_1, "v_proj": Q.Q8_0, "o_proj": Q.F16, "gate_proj": Q.BF16,
             "up_proj": Q.Q4_1, "down_proj": Q.Q8_0, "embed_tokens": Q.Q8_0, "lm_head": Q.F16}

    def types_for(name, arr):
        if arr.ndim == 1:
            return Q.F32
        for k, v in kinds.items():
            if k in name:
                return v
        return Q.F32

    tok_meta = dict(model="gpt2", pre="qwen2", tokens=tokens, types=types, merges=merges,
                    bos_id=1, eos_id=2, unk_id=0, pad_id=2, add_bos=False, add_space_prefix=False,
                    chat_template=SMOLLM2_TEMPLATE)
    path = os.path.join(OUT, "tiny_llama.gguf")
    write_llama_gguf(path, cfg, wts, types_for, tok_meta, "tiny-llama")
    return path


def read_tok512(path):
    """llama2.c tokenizer.bin: int32 max_len, then per token: float32 score, int32 len, bytes."""
    data = open(path, "rb").read()
    off = 4
    scores, pieces = [], []
    while off < len(data):
        s, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append(data[off:off + n])
        off += n
        scores.append(s)
    return pieces, scores


def make_stories():
    from safetensors.numpy import load_file
    src = os.path.join(SHARED, "models", "stories260K-hf")
    cfg = json.load(open(os.path.join(src, "config.json")))
    wts = {k: v.astype(np.float32) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    tj = json.load(open(os.path.join(src, "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    _, scores = read_tok512(os.path.join(SHARED, "models", "stories260K", "tok512.bin"))
    assert len(scores) == len(tokens)
    # llama.cpp's SentencePiece token types: 2 unknown, 3 control, 6 byte, 1 normal
    types = []
    for i, t in enumerate(tokens):
        if i == 0:
            types.append(2)
        elif i in (1, 2):
            types.append(3)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(6)
        else:
            types.append(1)

    def types_for(name, arr):
        if arr.ndim == 1:
            return Q.F32
        return Q.Q8_0 if arr.shape[-1] % 32 == 0 else Q.F16

    tok_meta = dict(model="llama", tokens=tokens, types=types, scores=scores, bos_id=1, eos_id=2, unk_id=0,
                    add_space_prefix=True)
    path = os.path.join(OUT, "stories260K.gguf")
    wts.pop("lm_head.weight", None)  # tied: llama.cpp writes no output.weight
    write_llama_gguf(path, cfg, wts, types_for, tok_meta, "stories260K")
    return path


# ---------------------------------------------------------------------------------------------
# 3. goldens from transformers
# ---------------------------------------------------------------------------------------------
def load_hf(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    return tok, model


CONFIG_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
               "rms_norm_eps", "tie_word_embeddings", "bos_token_id", "eos_token_id"]


def model_golden(path, tok, model, with_tokenizer_json=True):
    cfgd = model.config.to_dict()
    cfg = {k: cfgd.get(k) for k in CONFIG_KEYS}
    rp = cfgd.get("rope_parameters") or {}
    cfg["rope_theta"] = rp.get("rope_theta", cfgd.get("rope_theta"))
    cfg["rope_type"] = rp.get("rope_type", "default")
    sd = model.state_dict()
    tensors = {}
    seen = set()
    for k, v in sd.items():
        if k == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        tensors[k] = tensor_golden(v.detach().float().numpy())
        seen.add(k)
    g = {"config": cfg, "tensors": tensors}
    tc = {k: v for k, v in tok.init_kwargs.items()
          if k in ("bos_token", "eos_token", "unk_token", "pad_token", "add_bos_token", "add_eos_token", "chat_template")}
    g["tokenizer_config"] = {k: (str(v) if not isinstance(v, (bool, type(None))) else v) for k, v in tc.items()}
    tj = json.loads(tok.backend_tokenizer.to_str())
    if with_tokenizer_json:
        g["tokenizer_json"] = tj
    else:
        m = tj["model"]
        g["tokenizer_json_structure"] = {k: v for k, v in tj.items() if k not in ("model", "added_tokens")}
        g["tokenizer_json_structure"]["model"] = {k: v for k, v in m.items() if k not in ("vocab", "merges")}
        g["tokenizer_json_structure"]["added_tokens"] = tj["added_tokens"]
        g["tokenizer_json_structure"]["vocab_size"] = len(m["vocab"])
        g["tokenizer_json_structure"]["num_merges"] = len(m["merges"])
        g["tokenizer_json_structure"]["first_merges"] = m["merges"][:20]
        g["tokenizer_json_structure"]["last_merges"] = m["merges"][-20:]
    return g


def test_strings(n=560):
    base = [
        "", " ", "  ", "\n", "\n\n", "\t", " \t\n ", "a", "A", "hello", " hello", "hello ", "  hello  ",
        "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "Once upon a time, there was a little girl named Lily. She liked to play.",
        "It's what they're doing; we'll see, I'd say, you've got it, I'm here.",
        "IT'S LOUD AND THEY'RE HERE", "3.14159", "1234567890", "2024-11-22T03:14:00Z", "1,000,000",
        "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>",
        "<s>hello</s>", "<think>let me think</think>", "[PAD 1]", "<unk>", "<|im_end|><|im_end|>",
        "héllo wörld café naïve", "Straße", "日本語のテキスト", "中文字符测试", "한국어", "Привет, мир!",
        "مرحبا بالعالم", "שלום", "ελληνικά", "🙂🚀👍🏽", "e\u0301", "\u00a0nbsp", "zero\u200bwidth",
        "tab\tseparated\tvalues", "line1\r\nline2\r\n", "   leading spaces", "trailing spaces   ",
        "multiple     spaces", "!!!???...", "$100 & 50% off #1 @user", "a\\b/c|d", "\"quoted\" 'single'",
        "x = y + z - w * v / u", "αβγ", "∑∫√∞", "ﬁ ligature", "ＡＢＣ fullwidth", "Ǆ", "İstanbul",
        "The cat sat on the mat.\n\nThe dog barked.", "KV cache eviction policies: SnapKV, H2O, R-KV.",
    ]
    words = ("the of and to in is was for on that with as by at from it an be this which or are "
             "Lily Tom park happy little big dog cat sun play friends time once upon there said "
             "model cache memory token key value attention layer head budget 42 7 2024 3.5 "
             "é ü ß 日本 中文 🙂 ( ) [ ] { } , . ; : ! ? ' \" - _ / \\ \n \t").split(" ")
    rng = random.Random(20241122)
    out = list(base)
    while len(out) < n:
        k = rng.randint(1, 14)
        parts = [rng.choice(words) for _ in range(k)]
        seps = [rng.choice([" ", " ", " ", "", "  ", "\n", ", "]) for _ in range(k)]
        s = "".join(p + q for p, q in zip(parts, seps))
        if rng.random() < 0.1:
            s = rng.choice(["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<think>"]) + s
        if rng.random() < 0.3:
            s = s.strip()
        out.append(s)
    return out


def ids_golden(tok, strings):
    rows = []
    for s in strings:
        rows.append({"text": s, "ids": tok.encode(s, add_special_tokens=True),
                     "ids_no_special": tok.encode(s, add_special_tokens=False)})
    return {"reference": "transformers AutoTokenizer.from_pretrained(gguf_file=...) %s" % __import__(
        "transformers").__version__, "cases": rows}


def logits_golden(tok, model, prompts, top=None, chat=None):
    res = []
    for p in prompts:
        if chat:
            text = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True)
        else:
            text = p
        ids = tok.encode(text, add_special_tokens=True)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float().numpy()
        entry = {"prompt": p, "text": text, "input_ids": ids, "vocab_size": int(logits.size),
                 "max_abs": float(np.abs(logits).max())}
        if top:
            idx = np.argsort(-logits, kind="stable")[:top]
            entry["top_indices"] = [int(i) for i in idx]
            entry["top_logits"] = [float(logits[i]) for i in idx]
        else:
            entry["logits"] = [float(x) for x in logits]
        res.append(entry)
    return {"reference": "transformers %s AutoModelForCausalLM.from_pretrained(gguf_file=...), float32, "
                         "dequantised weights; last-position logits" % __import__("transformers").__version__,
            "prompts": res}


def default_smollm2_path():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kvbench", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default=default_smollm2_path())
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    make_quant_types()
    strings = test_strings()
    prompts = ["Once upon a time", "The capital of France is", "1, 2, 3, 4,"]
    for name, maker in (("tiny_llama", make_tiny_llama), ("stories260K", make_stories)):
        path = maker()
        tok, model = load_hf(path)
        dump(os.path.join(OUT, name + ".golden.json"), model_golden(path, tok, model), indent=1)
        dump(os.path.join(OUT, name + ".ids.json"), ids_golden(tok, strings))
        dump(os.path.join(OUT, name + "_logits.json"), logits_golden(tok, model, prompts))
    if os.path.exists(args.smollm2):
        tok, model = load_hf(args.smollm2)
        g = model_golden(args.smollm2, tok, model, with_tokenizer_json=False)
        g["file_sha256"] = __import__("hashlib").sha256(open(args.smollm2, "rb").read()).hexdigest()
        dump(os.path.join(OUT, "smollm2.golden.json"), g, indent=1)
        dump(os.path.join(OUT, "smollm2.ids.json"), ids_golden(tok, strings))
        chat_prompts = ["What is 7 times 8?", "Write one sentence about the sea.",
                        "Tom has 3 apples and buys 5 more. How many apples does he have?"]
        dump(os.path.join(OUT, "smollm2_logits.json"), logits_golden(tok, model, chat_prompts, top=50, chat=True),
             indent=1)
    else:
        print("SmolLM2 GGUF not found at %s: skipping its goldens (run tools/fetch_default_model.sh)" % args.smollm2)


if __name__ == "__main__":
    main()
