#!/usr/bin/env python3
"""Keep-set goldens of kvpress 0.5.5's method presses (CriticalKVPress, CriticalAdaKVPress and
FinchPress among them), and of its ChunkPress,
PerLayerCompressionPress, ComposedPress and BlockPress wrappers, on the real SmolLM2-135M-Instruct
weights (tests/fixtures/policies/kvpress_smollm2_goldens.json), for the kvbench policies and
options that reproduce them (docs/policies.md, "kvpress method presses" and "kvpress's wrappers as
spec options").

How to run (from the repository root; the default model must be cached, tools/fetch_default_model.sh):

    python3 tools/gen_kvpress_smollm2_goldens.py [--model PATH.gguf] [--only PREFIX]...

(--only PREFIX, repeatable, regenerates the cases whose name starts with it and keeps the others from the existing file,
in their places; new cases are appended.)

It re-runs itself inside .venv-goldens (tools/goldens_env.py; kvpress==0.5.5 pinned in
tools/goldens-requirements.txt).

Model. transformers loads the default model's GGUF (Q4_1) dequantised to f32, eager attention
(kvbench's test loads the same file with `--weights f32`). Only the first LAYERS layers' keep-sets
are recorded: at the end of a prefill a layer's compression cannot change what any layer computes
in that forward pass, so the kvbench test runs the same weights truncated to LAYERS layers, and so
does this generator (four times faster).

Prompt (query-aware, as kvbench's default protocol and kvpress's `*_question` use): GSM8K test
problems with their worked answers as few-shot context (tests/data, unpacked by cmake into
build/test-data) until the context is at least 850 tokens, then one more question and "Answer:";
the whole prompt is prefilled and compressed at its end, so the observation window of the
query-aware presses holds the question. The prompt ids are recorded, the test needs no tokenizer.

Each case runs one forward pass under kvpress's own hook (`with press(model)`), which compresses
every layer's DynamicCache once at the end of the prefill. The kept positions of each (layer, kv
head) are read back by matching each kept key row against the layer's uncompressed keys (the
presses gather rows, so each kept row equals exactly one original row). Two compression ratios per
press (two settings per wrapper); budget = kvpress.utils.compute_n_kept(L, ratio). Exceptions:
LUKVPress leaves the cache whole and masks what it prunes (module.masked_key_indices, read back
instead); KVComposePress runs as its pipeline does (the context prefilled, then the question fed
to score it; run_kvcompose). Presses that load published weights or curves get the generator's
random ones instead (qfilter_press, lukv_press; written once under tests/fixtures/policies);
FastKVzipPress gets kvbench's own random_gates, redrawn here (seeded_gates), and its pruned entries
are masked like LUKVPress's (run_fastkvzip, on the sdpa instance: kvpress refuses eager there).
KVzipPress runs its own context-reconstruction passes when its context exits (run_kvzip, sdpa as
well; kvpress loads a tokenizer by the model's name, which a GGUF-loaded model lacks, so the
generator's own is handed in): its pruned entries are masked and read back the same way, and each
case also records the prompt pieces kvpress built (`kvzip_prompts`: the repeat prompts' ids, the
chat template's assistant header and preamble length), which the kvbench test compares with the
ones the engine builds (tests/kvpress: KvzipMatchesKvpressKVzipPress runs these cases, not the
one-prefill Multiplex). RestoreKVPress runs the same way (run_restorekv) on the model truncated to
RESTOREKV_LAYERS layers, with the generator's RANDOM PEFT LoRA adapter and restore embeddings
(write_restorekv_adapter: tests/fixtures/policies/restorekv_smollm2_random, loaded by transformers'
own load_adapter); its cases record the keep-sets over L + 8 positions (the restore rows kept) and
each head's sums of the restore rows' keys and values (restore_kv; the test compares them within
1e-3 relative, tests/kvpress: RestorekvMatchesKvpressRestoreKVPress).

CAMPress (decode-time) has its own file, tests/fixtures/policies/kvpress_smollm2_cam_goldens.json
(write_cam_goldens; `--only cam`): the prompt prefilled, then CAM_FORCED tokens fed one per step at
their true positions, torch.bernoulli's merge draws replaced by kvbench's seeded ones (run_cam); it
records each head's final positions and K/V sums.

Presses that rewrite cached keys or values (ThinKPress alone, ComposedPress([SnapKVPress,
ThinKPress]) as kvbench's then=think, MergingPress as merge=true, KeyRerotationPress as
rerotate=true) also record, per (layer, kv head), the key channels zeroed in every kept
key (k_zero), the channels whose ThinK score lies within TIE of the channel cut (k_tie), and the
sums of squares of the kept keys and values in f64 (k_sq, v_sq; the test compares them within
1e-3 relative, on heads without token, channel or merge-target near-ties: v_tie counts the evicted
tokens whose two most key-cosine-similar survivors, or whose best cosine and the merge threshold
or quantile, are within TIE_MERGE = 1e-5). Their kept positions are read back by the
same row match with the zeroed channels left out (KeyRerotationPress: by the value rows, a value
shared by identical tokens resolved by the key rotated back).

Near-ties. On a real model some kept/evicted boundaries are closer than f32 summation order can
resolve. Each head records, beside its kept set, the tokens whose press score lies within TIE
(relative) of the boundary between the last kept and the first evicted score (for chunk
selection: every token of a chunk whose chunk score lies within TIE of the chunk boundary; for a
wrapper that calls its press several times, ChunkPress, ComposedPress and BlockPress, the tokens
near the cut of each call, located by matching the scored key rows against the original ones). The
test requires equality everywhere else and equal kept counts (KVComposePress: counts may differ by
a head's `count_slack`, the layer's composite entries at the global cut). Sets are stored as hex bitmasks over
positions (bit i of the big-endian hex number = position i, most significant digit first: digit j
holds positions 4j..4j+3, position 4j in its bit 3).
"""
import argparse
import json
import math
import os
import sys

import goldens_env

goldens_env.ensure(["torch", "transformers", "kvpress", "gguf"])

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

ROOT = goldens_env.ROOT
OUT = os.path.join(ROOT, "tests", "fixtures", "policies", "kvpress_smollm2_goldens.json")
# RANDOM Q-filters [LAYERS, kv heads, head_dim] (torch.randn, seed QFILTER_SEED) injected into
# QFilterPress instead of the published ones; the kvbench spec loads the same file
# ({qfilters} in the spec stands for this file).
QFILTERS = os.path.join(ROOT, "tests", "fixtures", "policies", "qfilter_smollm2_random.safetensors")
QFILTER_SEED = 45
# A synthetic LU-KV budget curve [99, LAYERS, kv heads] of pruned fractions (row t: about
# (t + 1)% plus N(0, 0.1) noise per head, clipped to [0, 0.99]; numpy seed CURVE_SEED), set as
# LUKVPress's curve instead of downloading Llama-3.1-8B's ({lukv_curve} in the spec).
LUKV_CURVE = os.path.join(ROOT, "tests", "fixtures", "policies", "lukv_curve_smollm2_random.npy")
CURVE_SEED = 45
# FinchPress's delimiter: a token id the prompt does not hold (SmolLM2's <|endoftext|>); the press
# drops it from the embeddings, so its embedding never matters.
FINCH_DELIMITER = 0
PRESSES = {}  # presses(), for the helpers that call a press's static methods
# kvbench's RANDOM Fast KVzip gates of `fastkvzip:random_gates=FASTKVZIP_SEED` (seeded_gates)
# set as FastKVzipPress.gates instead of downloading Jang-Hyun/Fast-KVzip's.
FASTKVZIP_SEED = 45
# RestoreKVPress: RANDOM restore embeddings [RESTOREKV_ROWS, hidden] and a RANDOM PEFT LoRA adapter
# (rank RESTOREKV_RANK, lora_alpha RESTOREKV_ALPHA, every projection kvbench reads) written once to
# RESTOREKV_DIR (write_restorekv_adapter; torch seed RESTOREKV_SEED), loaded into transformers with
# its own PEFT loader (model.load_adapter) instead of downloading higokri/RestoreKV-<model>
# ({restorekv_adapter} in the spec). Its cases run on the model truncated to RESTOREKV_LAYERS layers
# (the case's "num_layers"; the kvbench test must stay cheap, and KVzip's cut spans every layer).
RESTOREKV_DIR = os.path.join(ROOT, "tests", "fixtures", "policies", "restorekv_smollm2_random")
RESTOREKV_SEED = 45
RESTOREKV_ROWS = 8
RESTOREKV_RANK = 4
RESTOREKV_ALPHA = 8
RESTOREKV_LAYERS = 2
RESTOREKV_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# CAMPress (decode-time): its own file, one teacher-forced run per case (run_cam).
CAM_OUT = os.path.join(ROOT, "tests", "fixtures", "policies", "kvpress_smollm2_cam_goldens.json")
CAM_FORCED = 12  # decode steps, fed ids[100:112] (any tokens; both engines see the same)
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYERS = 8
MIN_CONTEXT = 850
TIE = 1e-3
TIE_MERGE = 1e-5  # merge-target cosines: far above the two engines' key differences (about 1e-6)
# EntropyGatedChunkKVPress's spiky flags compare each chunk's mean and entropy with their medians:
# a chunk within FLAG_TIE (relative) of a median has its flag in doubt (f32 summation order moves
# those values by about 1e-6 relative; the means crowd near their median more than 1e-3 allows).
FLAG_TIE = 1e-5
torch.set_grad_enabled(False)
transformers.utils.logging.disable_progress_bar()


def default_model():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kvbench", "models", "smollm2-135m-instruct", GGUF)


def presses():
    """kvpress's press classes, imported without kvpress/__init__.py (tools/gen_policy_goldens.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gen_policy_goldens import load_kvpress
    kp = load_kvpress()
    from kvpress.presses.block_press import BlockPress
    from kvpress.presses.chunk_press import ChunkPress
    from kvpress.presses.composed_press import ComposedPress
    from kvpress.presses.keydiff_press import KeyDiffPress
    from kvpress.presses.chunkkv_press import ChunkKVPress
    from kvpress.presses.entropy_gated_chunkkv_press import EntropyGatedChunkKVPress
    from kvpress.presses.qfilter_press import QFilterPress
    from kvpress.presses.cap_press import CapPress
    from kvpress.presses.kvcompose_press import KVComposePress
    from kvpress.presses.lukv_press import LUKVPress
    from kvpress.presses.expected_attention_press import ExpectedAttentionPress
    from kvpress.presses.knorm_press import KnormPress
    from kvpress.presses.per_layer_compression_press import PerLayerCompressionPress
    from kvpress.presses.cur_press import CURPress
    from kvpress.presses.lagkv_press import LagKVPress
    from kvpress.presses.non_causal_attention_press import NonCausalAttnPress
    from kvpress.presses.simlayerkv_press import SimLayerKVPress
    from kvpress.presses.observed_attention_press import ObservedAttentionPress
    from kvpress.presses.snapkv_press import SnapKVPress
    from kvpress.presses.think_press import ThinKPress
    from kvpress.presses.merging_press import MergingPress
    from kvpress.presses.key_rerotation_press import KeyRerotationPress
    from kvpress.presses.criticalkv_press import CriticalKVPress, CriticalAdaKVPress
    from kvpress.presses.finch_press import FinchPress
    from kvpress.presses.fastkvzip_press import FastKVzipPress
    from kvpress.presses.kvzip_press import KVzipPress
    from kvpress.presses.restorekv_press import RestoreKVPress
    from kvpress.presses.cam_press import CAMPress
    from kvpress.utils import compute_n_kept
    return dict(RestoreKVPress=RestoreKVPress, KVzipPress=KVzipPress, FastKVzipPress=FastKVzipPress, CAMPress=CAMPress, ObservedAttentionPress=ObservedAttentionPress, ChunkKVPress=ChunkKVPress, SnapKVPress=SnapKVPress,
                EntropyGatedChunkKVPress=EntropyGatedChunkKVPress, QFilterPress=QFilterPress, CapPress=CapPress,
                KVComposePress=KVComposePress, LUKVPress=LUKVPress, ExpectedAttentionPress=ExpectedAttentionPress,
                LagKVPress=LagKVPress, CURPress=CURPress, NonCausalAttnPress=NonCausalAttnPress,
                SimLayerKVPress=SimLayerKVPress, ChunkPress=ChunkPress, KnormPress=KnormPress,
                PerLayerCompressionPress=PerLayerCompressionPress, ComposedPress=ComposedPress,
                BlockPress=BlockPress, KeyDiffPress=KeyDiffPress, ThinKPress=ThinKPress,
                MergingPress=MergingPress, KeyRerotationPress=KeyRerotationPress,
                CriticalKVPress=CriticalKVPress, CriticalAdaKVPress=CriticalAdaKVPress, FinchPress=FinchPress,
                compute_n_kept=compute_n_kept, **{k: v for k, v in kp.items() if k not in ("compute_n_kept",)})


def build_prompt(tok):
    """Few-shot GSM8K context (>= MIN_CONTEXT tokens) + one question: (ids, context token count)."""
    rows = [json.loads(x) for x in open(goldens_env.test_data("datasets/gsm8k/test.jsonl"))]
    text, i = "", 0
    while len(tok(text, add_special_tokens=False)["input_ids"]) < MIN_CONTEXT:
        text += f"Question: {rows[i]['question']}\nAnswer: {rows[i]['answer']}\n\n"
        i += 1
    n_ctx = len(tok(text, add_special_tokens=False)["input_ids"])
    text += f"Question: {rows[i]['question']}\nAnswer:"
    return tok(text, add_special_tokens=False)["input_ids"], n_ctx


def cases(kp, L, n_ctx):
    """(name, press, kvbench spec, budget, tie rule) of every case."""
    out = []
    for r in (0.5, 0.75):
        n = kp["compute_n_kept"](L, r)
        out.append((f"observed_attention_r{r}", kp["ObservedAttentionPress"](compression_ratio=r),
                    "observed_attention:decode=false", n, "score"))
    for r in (0.5, 0.75):  # kvpress's examples wrap SnapKVPress (window 64, kernel 5) in ChunkKVPress
        out.append((f"chunkkv_r{r}", kp["ChunkKVPress"](press=kp["SnapKVPress"](compression_ratio=r), chunk_length=20),
                    f"chunkkv:budget_kind=ratio,ratio={1 - r},decode=false", 0, ("chunks", 20, r)))
    for r in (0.5, 0.75):  # defaults chunk_length 10, low_entropy_chunk_length 4, around SnapKVPress(64, 5)
        out.append((f"entropy_chunkkv_r{r}",
                    kp["EntropyGatedChunkKVPress"](press=kp["SnapKVPress"](compression_ratio=r)),
                    f"entropy_chunkkv:budget_kind=ratio,ratio={1 - r},decode=false", 0, ("entropy", 10, 4, r)))
    for r in (0.5, 0.75):  # the random filters of QFILTERS (qfilter_press(): no download)
        n = kp["compute_n_kept"](L, r)
        out.append((f"qfilter_r{r}", qfilter_press(kp, r),
                    "qfilter:filters={qfilters},decode=false", n, "score"))
    for r in (0.5, 0.75):  # defaults tau 5, n_future_positions 512, n_sink 4, epsilon 1e-6
        n = kp["compute_n_kept"](L, r)
        out.append((f"cap_r{r}", kp["CapPress"](compression_ratio=r), "cap:decode=false", n, "score"))
    # KVComposePress scores the context with the attention of the question's queries, which its
    # pipeline feeds after the context (register_prompt_ids): kvbench's `window` = the question.
    for r in (0.5, 0.75):  # defaults structured, agg_task max, agg_group mean, agg_head mean
        out.append((f"kvcompose_r{r}", kp["KVComposePress"](compression_ratio=r),
                    f"kvcompose:ratio={1 - r},window={L - n_ctx}", 0, "kvcompose"))
    for r in (0.5, 0.75):  # default ExpectedAttentionPress(epsilon=2e-2), sink 4, window 1; LUKV_CURVE
        out.append((f"lukv_r{r}", lukv_press(kp, r),
                    f"lukv:curve={{lukv_curve}},budget_kind=ratio,ratio={1 - r},decode=false", 0, "lukv"))
    for r in (0.5, 0.75):  # defaults n_sink 4, lag_size 128: 7 scored partitions of the 1,098 tokens
        n = kp["compute_n_kept"](L, r)
        out.append((f"lagkv_r{r}", kp["LagKVPress"](compression_ratio=r), "lagkv:decode=false", n, "score"))
    for r in (0.5, 0.75):  # defaults: kv_product, 16-token local windows, 4 sinks
        n = kp["compute_n_kept"](L, r)
        out.append((f"cur_r{r}", kp["CURPress"](compression_ratio=r), "cur:decode=false", n, "score"))
    for r in (0.5, 0.75):  # chunk_size 256: four whole chunks and a padded one of L mod 256 tokens
        n = kp["compute_n_kept"](L, r)
        out.append((f"noncausal_attn_r{r}", kp["NonCausalAttnPress"](compression_ratio=r), "noncausal_attn", n,
                    "score"))
    # SimLayerKV keeps a lazy layer's first 4 and last n_recent - 1 tokens and every token of the
    # others. The default threshold 1.0 never compresses and n_recent 1024 of 1,098 tokens would keep
    # nearly all, so both are set to give lazy and busy layers among the first LAYERS (the layers'
    # attention shares are recorded; each must be at least TIE from the threshold).
    for thr, recent in ((0.5, 256), (0.56, 512)):
        out.append((f"simlayerkv_t{thr}_n{recent}", kp["SimLayerKVPress"](lazy_threshold=thr, n_recent=recent),
                    f"simlayerkv:lazy_threshold={thr},n_recent={recent}", 0, "lazy"))
    # Wrappers as kvbench options. ChunkPress(KnormPress): each chunk of chunk_length positions keeps
    # its own top max(1, int(n (1 - r))) (press_chunk); two chunk lengths and ratios.
    for r, chunk in ((0.5, 256), (0.75, 200)):
        out.append((f"chunkpress_knorm_r{r}_c{chunk}",
                    kp["ChunkPress"](press=kp["KnormPress"](compression_ratio=r), chunk_length=chunk),
                    f"knorm:budget_kind=ratio,ratio={1 - r},decode=false,press_chunk={chunk}", 0,
                    ("chunkpress", chunk, r)))
    # PerLayerCompressionPress(SnapKVPress): a compression ratio per layer (layer_ratios holds the
    # kept fractions 1 - r); two ratio lists. Binary fractions, so 1 - r is exact in both languages.
    for ratios in ((0.5, 0.25, 0.75, 0.5, 0.25, 0.75, 0.5, 0.25),
                   (0.125, 0.375, 0.625, 0.875, 0.875, 0.625, 0.375, 0.125)):
        snap = kp["SnapKVPress"](compression_ratio=0.5, window_size=64, kernel_size=5)
        kept_fracs = "/".join(f"{1 - r:g}" for r in ratios)
        out.append(("perlayer_snapkv_" + "_".join(f"{r:g}" for r in ratios[:2]),
                    kp["PerLayerCompressionPress"](press=snap, compression_ratios=list(ratios)),
                    "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,budget_kind=ratio,"
                    f"layer_ratios={kept_fracs}", 0,
                    ("layers", [kp["compute_n_kept"](L, r) for r in ratios])))
    # ComposedPress([P1, P2]): P2 scores P1's kept tokens alone and keeps its fraction of them
    # (then=P2,then_ratio=1-r2). Near-ties: each press's own cut (the "calls" rule).
    n = kp["compute_n_kept"]
    for (r1, first, spec1), (r2, second) in (
            ((0.5, "SnapKVPress", "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false"), (0.5, "KnormPress")),
            ((0.25, "SnapKVPress", "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false"),
             (0.5, "KeyDiffPress"))):
        p1 = (kp[first](compression_ratio=r1, window_size=64, kernel_size=5) if first == "SnapKVPress"
              else kp[first](compression_ratio=r1))
        out.append((f"composed_{first[:-5].lower()}_{second[:-5].lower()}_r{r1}_{r2}",
                    kp["ComposedPress"](presses=[p1, kp[second](compression_ratio=r2)]),
                    f"{spec1},then={second[:-5].lower()},then_ratio={1 - r2}", n(L, r1),
                    ("calls", lambda c, k, r1=r1, r2=r2: n(k, r1 if c == 0 else r2))))
    # BlockPress(KeyDiffPress): the budget kept through blocks, each block scored with the kept
    # tokens (the KeyDiff paper's block prompt processing); two block sizes and ratios.
    for r, block in ((0.5, 128), (0.75, 64)):
        out.append((f"blockpress_keydiff_r{r}_b{block}",
                    kp["BlockPress"](press=kp["KeyDiffPress"](compression_ratio=r), block_size=block),
                    f"keydiff:window=0,decode=false,press_block={block}", n(L, r),
                    ("calls", lambda c, k, r=r: n(L, r))))
    # Presses that rewrite cached keys (the K/V write primitive): ThinKPress alone (every token kept,
    # key channels zeroed) and kvpress's own pairing ComposedPress([SnapKVPress, ThinKPress]) as the
    # option then=think (then_ratio = kept channel fraction = 1 - key_channel_compression_ratio).
    for r in (0.5, 0.25):
        out.append((f"think_r{r}", kp["ThinKPress"](key_channel_compression_ratio=r), f"think:ratio={1 - r}", 0,
                    "think"))
    for r1, r2 in ((0.5, 0.25), (0.25, 0.5)):
        snap = kp["SnapKVPress"](compression_ratio=r1, window_size=64, kernel_size=5)
        out.append((f"composed_snapkv_think_r{r1}_{r2}",
                    kp["ComposedPress"](presses=[snap, kp["ThinKPress"](key_channel_compression_ratio=r2)]),
                    f"snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,then=think,then_ratio={1 - r2}",
                    n(L, r1), "score"))
    # MergingPress(P): P's keep-set, each evicted token's value folded into its most key-cosine-similar
    # survivor (kvbench's merge=true option; merge_threshold, merge_fraction).
    out.append(("merging_knorm_r0.5", kp["MergingPress"](press=kp["KnormPress"](compression_ratio=0.5)),
                "knorm:decode=false,merge=true", n(L, 0.5), "score"))
    snap = kp["SnapKVPress"](compression_ratio=0.75, window_size=64, kernel_size=5)
    out.append(("merging_snapkv_r0.75_t0.1_f0.75",
                kp["MergingPress"](press=snap, similarity_threshold=0.1, merge_fraction=0.75),
                "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,merge=true,merge_threshold=0.1,"
                "merge_fraction=0.75", n(L, 0.75), "score"))
    # KeyRerotationPress(P): P's keep-set, the kept keys re-rotated to their ranks (rerotate=true).
    out.append(("rerotation_knorm_r0.5", kp["KeyRerotationPress"](press=kp["KnormPress"](compression_ratio=0.5)),
                "knorm:decode=false,rerotate=true", n(L, 0.5), "score"))
    snap = kp["SnapKVPress"](compression_ratio=0.75, window_size=64, kernel_size=5)
    out.append(("rerotation_snapkv_r0.75", kp["KeyRerotationPress"](press=snap),
                "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,rerotate=true", n(L, 0.75), "score"))
    # CriticalKVPress and CriticalAdaKVPress around SnapKVPress (window 64, kernel 5), defaults epsilon
    # 1e-4, first_stage_ratio 0.5 (alpha_safeguard 0.2): the SnapKV scores in two stages, the second
    # weighted by ||W_o v||_1. Near-ties: both stages' cuts and CriticalAdaKV's budget sharing
    # (band_critical). CriticalAdaKVPress refuses eager attention: it runs on the sdpa instance.
    for r in (0.5, 0.75):
        snap = kp["SnapKVPress"](compression_ratio=r, window_size=64, kernel_size=5)
        out.append((f"criticalkv_r{r}", kp["CriticalKVPress"](press=snap), "criticalkv:decode=false", n(L, r),
                    ("critical", r)))
    for r in (0.5, 0.75):
        snap = kp["SnapKVPress"](compression_ratio=r, window_size=64, kernel_size=5)
        out.append((f"criticaladakv_r{r}", kp["CriticalAdaKVPress"](press=snap), "criticaladakv:decode=false",
                    n(L, r), ("critical", r)))
    # FinchPress: the prompt fed as context + delimiter + question (finch_feed), so its window is the
    # question's L - n_ctx tokens (kvbench's `window`); keys re-rotated (rerotate_keys=True), read back
    # as KeyRerotationPress's. Two ratios whole, one chunked (chunk_length: press_chunk). The chunk
    # length leaves a last chunk of 198 tokens whose kept half holds the whole 50-token question
    # (with 256 the last chunk of 74 would keep 18 of the question's tied max + 1 scores, any 18).
    for r, chunk in ((0.5, None), (0.75, None), (0.5, 300)):
        press = kp["FinchPress"](compression_ratio=r, chunk_length=chunk)
        press.delimiter_token_id = FINCH_DELIMITER
        if chunk is None:
            out.append((f"finch_r{r}", press, f"finch:window={L - n_ctx},decode=false", n(L, r), "score"))
        else:
            out.append((f"finch_r{r}_c{chunk}", press,
                        f"finch:window={L - n_ctx},decode=false,budget_kind=ratio,ratio={1 - r},press_chunk={chunk}",
                        0, ("chunkpress", chunk, r)))
    # FastKVzipPress (FASTKVZIP_GATES): one cut over every layer's (head, token) gate scores, and the
    # layerwise variant (one cut per layer); the pruned entries are masked (read back, run_fastkvzip).
    for r, layerwise in ((0.5, False), (0.75, False), (0.75, True)):
        out.append((f"fastkvzip_r{r}" + ("_layerwise" if layerwise else ""), fastkvzip_press(kp, r, layerwise),
                    f"fastkvzip:random_gates={FASTKVZIP_SEED},ratio={1 - r}" + (",layerwise=true" if layerwise else ""),
                    0, "fastkvzip"))
    # KVzipPress: the model's own context-reconstruction passes (run_kvzip), one cut over every
    # layer's (head, token) scores, the layerwise variant, a chunk size that makes three passes
    # (the continuation prompt and the sinks of later chunks) and KVzip+'s normalisation.
    for r, layerwise, chunk, plus in ((0.5, False, 2048, False), (0.75, False, 2048, False), (0.75, True, 2048, False),
                                      (0.5, False, 512, False), (0.5, False, 2048, True)):
        name = f"kvzip_r{r}" + ("_layerwise" if layerwise else "") + (f"_chunk{chunk}" if chunk != 2048 else "") + (
            "_plus" if plus else "")
        spec = f"kvzip:ratio={1 - r}" + (",layerwise=true" if layerwise else "") + (
            f",chunk_size={chunk}" if chunk != 2048 else "") + (",plus_norm=true" if plus else "")
        out.append((name, kp["KVzipPress"](compression_ratio=r, layerwise=layerwise, chunk_size=chunk,
                                           kvzip_plus_normalization=plus), spec, 0, "kvzip"))
    # RestoreKVPress (RESTOREKV_DIR's random adapter): KVzip's passes, then the restore pass, then the
    # cut raised by RESTOREKV_ROWS / L (run_restorekv), on RESTOREKV_LAYERS layers.
    for r in (0.5, 0.75):
        out.append((f"restorekv_r{r}", kp["RestoreKVPress"](compression_ratio=r),
                    f"restorekv:adapter={{restorekv_adapter}},ratio={1 - r}", 0, "restorekv"))
    return out


def finch_feed(ids, n_ctx):
    """FinchPress's input: the context, its delimiter token, the question (the delimiter is dropped
    from the embeddings by the press's hook and sets its window to the question's length)."""
    assert FINCH_DELIMITER not in ids
    return ids[:n_ctx] + [FINCH_DELIMITER] + ids[n_ctx:]


def band_critical(kind, base, norm, L, r, press):
    """CriticalKVPress / CriticalAdaKVPress: per head (tokens in doubt, count slack), from the inner
    press's scores `base` [Hkv, L] and the value weights `norm` [Hkv, L] (CriticalKVPress.vwl1norm),
    in double: the tokens at each stage's cut within TIE (stage 1 by base, stage 2 by (base + eps) x
    norm with the stage-1 tokens forced), for CriticalAdaKV also at the layer-wide cut that shares the
    budgets (a head's count may move by its tokens there: count_slack); when a first-stage or sharing
    cut is in doubt, the tokens around the head's final cut too."""
    n_kept = kvpress_n_kept(L, r)
    H = base.shape[0]
    s = base.clone()
    slack, alloc = [0] * H, [set() for _ in range(H)]
    if kind == "CriticalAdaKVPress":
        n_safe = int(n_kept * press.alpha_safeguard)
        if press.alpha_safeguard > 0:
            n_safe = max(1, n_safe) if n_kept > 0 else 0
        for h in range(H):
            s[h][s[h].topk(n_safe).indices] = float("inf")
        flat = s.flatten()
        budgets = torch.bincount(flat.topk(n_kept * H).indices // L, minlength=H).tolist()
        for i in band_score(flat, n_kept * H):
            alloc[i // L].add(i % L)
        slack = [len(a) for a in alloc]
        firsts = [int(b * press.first_stage_ratio) for b in budgets]
    else:
        budgets = [n_kept] * H
        first = int((1 - r) * L * press.first_stage_ratio)
        if press.first_stage_ratio > 0:
            first = max(1, first) if r < 1.0 else 0
        firsts = [first] * H
    out = []
    for h in range(H):
        band1 = set(band_score(s[h], firsts[h])) if firsts[h] > 0 else set()
        s2 = (s[h] + press.epsilon) * norm[h]
        s2[s[h].topk(firsts[h]).indices] = float("inf")
        s2[torch.isinf(s[h])] = float("inf")
        band = band1 | set(band_score(s2, budgets[h])) | alloc[h]
        k = len(band1) + slack[h]
        if k:
            order = s2.sort(descending=True, stable=True).indices.tolist()
            band |= set(order[max(0, budgets[h] - k - 1):budgets[h] + k + 1])
        out.append((sorted(band), slack[h]))
    return out


def rewrites(press):
    """True for a press that rewrites kept keys or values (ThinK, MergingPress)."""
    return think_of(press) is not None or type(press).__name__ in ("MergingPress", "KeyRerotationPress", "FinchPress")


def module_inv_freq(model):
    return model.model.rotary_emb.inv_freq


def rerotate(k, delta, inv_freq):
    """Rows k [n, D] rotated by delta [n] positions (rotate-half RoPE; angles in f32 as kvpress)."""
    f = delta.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat((f, f), -1)
    half = k.shape[-1] // 2
    rot = torch.cat((-k[:, half:], k[:, :half]), -1)
    return k * emb.cos() + rot * emb.sin()


def rerotated_match(k0, v0, k1, v1, inv_freq):
    """[n_kept, L] bool: kept row j came from position p when its value equals v0[p] exactly and, among
    such p (a layer's identical tokens share values), k0[p] rotated to rank j is closest to k1[j]."""
    eq = (v1[:, None, :] == v0[None, :, :]).all(-1)
    out = torch.zeros_like(eq)
    for j in range(k1.shape[0]):
        cand = torch.nonzero(eq[j]).flatten()
        if len(cand) > 1:
            err = (rerotate(k0[cand], j - cand, inv_freq) - k1[j][None]).abs().amax(-1)
            cand = cand[err.argmin()][None]
        out[j, cand] = True
    return out


def think_of(press):
    """The ThinKPress of a case (alone or last in a ComposedPress), or None."""
    for p in (press.presses if type(press).__name__ == "ComposedPress" else [press]):
        if type(p).__name__ == "ThinKPress":
            return p
    return None


def qfilter_press(kp, r):
    """QFilterPress(compression_ratio=r) holding the random filters of QFILTERS (written on first
    use: torch.randn(LAYERS, 3, 64) under manual_seed(QFILTER_SEED)) instead of downloading the
    published ones."""
    from safetensors.torch import save_file
    if not os.path.exists(QFILTERS):
        g = torch.Generator().manual_seed(QFILTER_SEED)
        save_file({"q_filters": torch.randn(LAYERS, 3, 64, generator=g)}, QFILTERS)
    from safetensors.torch import load_file
    press = kp["QFilterPress"](compression_ratio=r)
    filters = load_file(QFILTERS)["q_filters"]
    object.__setattr__(press, "post_init_from_model", lambda model: None)
    press.q_filters = filters
    return press


def lukv_press(kp, r):
    """LUKVPress(ExpectedAttentionPress(epsilon=2e-2), compression_ratio=r) holding the synthetic
    curve of LUKV_CURVE (written on first use)."""
    import numpy as np
    if not os.path.exists(LUKV_CURVE):
        rng = np.random.default_rng(CURVE_SEED)
        base = (np.arange(99) + 1)[:, None, None] / 100.0
        curve = np.clip(base + rng.normal(0.0, 0.1, size=(99, LAYERS, 3)), 0.0, 0.99).astype(np.float32)
        np.save(LUKV_CURVE, curve)
    press = kp["LUKVPress"](press=kp["ExpectedAttentionPress"](epsilon=2e-2), compression_ratio=r)
    press._budget_curves = np.load(LUKV_CURVE)
    return press


def seeded_normals(seed, n, start, stdv):
    """kvbench's SeededDraws(seed).normal(stdv) draws from counter `start` on, n of them
    (gate_weights.cpp: u_c = hash_uniform(seed, c), two per draw, stdv times Box-Muller in f64
    rounded to f32), as float64."""
    import numpy as np
    m = np.uint64(0xFFFFFFFFFFFFFFFF)

    def splitmix64(x):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (x ^ (x >> np.uint64(31))) & m

    def uniform(ctr):
        with np.errstate(over="ignore"):
            h = splitmix64(np.full(ctr.shape, 0x243F6A8885A308D3, dtype=np.uint64) ^ np.uint64(seed))
            h = splitmix64(h ^ ctr)
        return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    ctr = np.arange(start, start + 2 * n, dtype=np.uint64)
    u1, u2 = np.maximum(uniform(ctr[0::2]), 1e-300), uniform(ctr[1::2])
    return (stdv * np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32).astype(np.float64)


def seeded_gates(seed, layer, H, Hk, G, O, S):
    """The RANDOM gate of `layer` that fastkvzip:random_gates=seed draws (fastkvzip.cpp, gate()):
    SeededDraws(seed * 1000003 + layer), in order q_proj.weight, q_proj.bias, k_proj.weight,
    q_norm.weight, k_norm.weight, k_base, b, each mean + f32(stdv * N(0, 1)) rounded to f32."""
    import numpy as np
    spec = [("q_proj.weight", (Hk * G * O, H), 0.0, H ** -0.5), ("q_proj.bias", (Hk * G * O,), 0.0, 0.1),
            ("k_proj.weight", (Hk * O, H), 0.0, H ** -0.5), ("q_norm.weight", (O,), 1.0, 0.1),
            ("k_norm.weight", (O,), 1.0, 0.1), ("k_base", (Hk, 1, S, O), 0.0, 1.0), ("b", (Hk, 1, G), 0.0, 1.0)]
    out, at = {}, 0
    for name, shape, mean, std in spec:
        n = int(np.prod(shape))
        z = seeded_normals(seed * 1000003 + layer, n, 2 * at, std)
        out[name] = torch.from_numpy((mean + z).astype(np.float32).reshape(shape))
        at += n
    return out


def fastkvzip_press(kp, r, layerwise):
    """FastKVzipPress(compression_ratio=r, layerwise=layerwise) holding kvbench's RANDOM gates of
    random_gates=FASTKVZIP_SEED (seeded_gates: SmolLM2's 3 kv heads of 3 query groups, output_dim
    16, 16 sink keys) instead of downloading the published ones."""
    from kvpress.presses.fastkvzip_press import FastKVzipGate
    H, Hk, G, O, S = 576, 3, 3, 16, 16
    gates = []
    for layer in range(LAYERS):
        gate = FastKVzipGate(layer, H, Hk, G, torch.float32, O, S)
        gate.load_state_dict(seeded_gates(FASTKVZIP_SEED, layer, H, Hk, G, O, S))
        gates.append(gate)
    press = kp["FastKVzipPress"](compression_ratio=r, layerwise=layerwise)
    press.gates = gates
    return press


def run_fastkvzip(model, press, ids):
    """One prefill under FastKVzipPress: ([layer][head] kept positions, [layer][head] near-tie
    positions). The cache stays whole; the pruned entries are module.masked_key_indices. Near-ties:
    the entries within TIE of the cut between the last kept and first pruned of press.score_val (the
    gate scores with the sinks and the window at 1), over all layers or (layerwise) per layer."""
    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return global_cut_keep_and_ties(model, press, press.score_val[:, 0].double())


def global_cut_keep_and_ties(model, press, sv):
    """The kept positions and near-ties of FastKVzip's cut (shared by FastKVzipPress and
    KVzipPress) from the scores sv [layers, heads, L]: ([layer][head] kept positions, read from each
    layer's masked_key_indices; [layer][head] positions within TIE of the cut over all layers, or
    per layer when press.layerwise)."""
    L = sv.shape[-1]
    groups = [sv[layer:layer + 1] for layer in range(LAYERS)] if press.layerwise else [sv]
    band = []
    for grp in groups:
        flat = grp.reshape(-1)
        band.append(set(band_score(flat, flat.numel() - int(flat.numel() * press.compression_ratio))))
    keep, ties = [], []
    for layer in range(LAYERS):
        _, hi, si = model.model.layers[layer].self_attn.masked_key_indices
        b = band[layer] if press.layerwise else band[0]
        base = 0 if press.layerwise else layer * sv.shape[1] * L
        keep.append([sorted(set(range(L)) - set(si[hi == h].tolist())) for h in range(sv.shape[1])])
        ties.append([sorted(i - base - h * L for i in b if base + h * L <= i < base + (h + 1) * L)
                     for h in range(sv.shape[1])])
    return keep, ties


def run_kvzip(model, press, ids, tok):
    """One prefill under KVzipPress, whose context-reconstruction passes run when the press's
    context exits: ([layer][head] kept positions, [layer][head] near-tie positions, the prompt
    pieces kvpress built). kvpress loads the tokenizer from model.config.name_or_path, which a
    GGUF-loaded model cannot give it: the generator's own tokenizer (the same GGUF's) is handed in.
    The cache stays whole; the pruned entries are module.masked_key_indices. Near-ties: the entries
    within TIE of the cut between the last kept and first pruned of press.score_val (the sinks at
    max + 1), over all layers or (layerwise) per layer."""
    import kvpress.presses.kvzip_press as kz
    stash = {}
    post = press.compress_post

    def stashing_post(m):
        post(m)
        stash.update(sv=press.score_val.clone(), prefix=press.prefix_length, suffix=press._suffix_ids[0].tolist())

    class HandedTokenizer:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            return tok

    press.compress_post = stashing_post
    saved, kz.AutoTokenizer = kz.AutoTokenizer, HandedTokenizer
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True)
    finally:
        kz.AutoTokenizer = saved
        del press.compress_post
    keep, ties = global_cut_keep_and_ties(model, press, stash["sv"][:, 0].double())  # [layers, heads, L]
    prompts = dict(repeat=tok.encode("\n\nRepeat the previous context exactly.", add_special_tokens=False),
                   repeat_part=tok.encode("\n\nRepeat the part of the previous context exactly, starting with",
                                          add_special_tokens=False),
                   suffix=stash["suffix"], prefix=stash["prefix"])
    return keep, ties, prompts


def write_restorekv_adapter(model):
    """Writes RESTOREKV_DIR: adapter_config.json (PEFT's LoraConfig.save_pretrained),
    adapter_model.safetensors (lora_A ~ N(0, 1/in), lora_B ~ N(0, 0.05^2), stored as bf16, PEFT's key
    names) for the first RESTOREKV_LAYERS layers of `model`, and restore_embeddings.safetensors
    ([RESTOREKV_ROWS, hidden] f32 ~ N(0, s^2), s the embedding table's standard deviation); torch
    seed RESTOREKV_SEED. The same seed writes the same bytes."""
    from peft import LoraConfig
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(RESTOREKV_SEED)
    os.makedirs(RESTOREKV_DIR, exist_ok=True)
    LoraConfig(r=RESTOREKV_RANK, lora_alpha=RESTOREKV_ALPHA, target_modules=RESTOREKV_TARGETS, lora_dropout=0.0,
               bias="none").save_pretrained(RESTOREKV_DIR)
    cfg_path = os.path.join(RESTOREKV_DIR, "adapter_config.json")  # PEFT writes target_modules from a set:
    cfg = json.load(open(cfg_path))                                   # sorted here, so the bytes do not
    cfg["target_modules"] = sorted(cfg["target_modules"])             # depend on PYTHONHASHSEED
    with open(cfg_path, "w") as fh:
        fh.write(json.dumps(cfg, indent=2, sort_keys=True))
    tensors = {}
    for layer in range(RESTOREKV_LAYERS):
        for t in RESTOREKV_TARGETS:
            parent = "self_attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            lin = getattr(getattr(model.model.layers[layer], parent), t)
            key = f"base_model.model.model.layers.{layer}.{parent}.{t}"
            a = torch.randn(RESTOREKV_RANK, lin.in_features, generator=g) / math.sqrt(lin.in_features)
            b = torch.randn(lin.out_features, RESTOREKV_RANK, generator=g) * 0.05
            tensors[key + ".lora_A.weight"] = a.to(torch.bfloat16).contiguous()
            tensors[key + ".lora_B.weight"] = b.to(torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(RESTOREKV_DIR, "adapter_model.safetensors"), metadata={"format": "pt"})
    emb = model.model.embed_tokens.weight
    e = torch.randn(RESTOREKV_ROWS, emb.shape[1], generator=g) * emb.float().std().item()
    save_file({"restore_embeddings": e.float().contiguous()},
              os.path.join(RESTOREKV_DIR, "restore_embeddings.safetensors"), metadata={"format": "pt"})
    return tensors


def restorekv_model(d, f):
    """An sdpa SmolLM2 truncated to RESTOREKV_LAYERS layers with RESTOREKV_DIR's adapter loaded by
    transformers' PEFT integration (model.load_adapter, as RestoreKVPress.post_init_from_model) and
    disabled; checks that every LoRA weight arrived (a key PEFT did not map would stay random)."""
    from safetensors.torch import load_file
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="sdpa", dtype=torch.float32)
    m.model.layers = m.model.layers[:RESTOREKV_LAYERS]
    m.config.num_hidden_layers = RESTOREKV_LAYERS
    m.eval()
    m.load_adapter(RESTOREKV_DIR, adapter_name="restorekv")
    m.disable_adapters()
    want = load_file(os.path.join(RESTOREKV_DIR, "adapter_model.safetensors"))
    got = {n: p for n, p in m.named_parameters() if "lora_" in n}
    assert len(got) == len(want), (len(got), len(want))
    for k, v in want.items():
        name = k[len("base_model.model."):].replace(".weight", ".restorekv.weight")
        assert torch.equal(got[name].float(), v.float()), name
    return m


def run_restorekv(model, press, ids, tok):
    """One prefill under RestoreKVPress (its KVzip passes, restore pass and cut run when its context
    exits), with RESTOREKV_DIR's embeddings set and the adapter already on `model` (restorekv_model):
    ([layer][head] kept positions among the L + n, the restore rows at L … L + n - 1 included;
    [layer][head] near-ties of the raised cut; [layer][head] sums of the restore rows' K/V)."""
    import kvpress.presses.kvzip_press as kz
    from safetensors.torch import load_file
    press.restore_embeddings = load_file(os.path.join(RESTOREKV_DIR, "restore_embeddings.safetensors"))[
        "restore_embeddings"].to(torch.float32)
    press.restore_model_name = f"higokri/RestoreKV-{model.config.name_or_path.split('/')[-1]}"  # no download
    stash = {}
    post = press.compress_post

    def stashing_post(m):
        post(m)
        stash.update(sv=press.score_val.clone(), ratio=min(1.0, press.compression_ratio + RESTOREKV_ROWS / len(ids)))

    class HandedTokenizer:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            return tok

    press.compress_post = stashing_post
    cache = DynamicCache()
    saved, kz.AutoTokenizer = kz.AutoTokenizer, HandedTokenizer
    try:
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    finally:
        kz.AutoTokenizer = saved
        del press.compress_post
    L, n = len(ids), RESTOREKV_ROWS
    sv = stash["sv"][:, 0].double()
    flat = sv.reshape(-1)
    band = set(band_score(flat, flat.numel() - int(flat.numel() * stash["ratio"])))
    keep, ties, kv = [], [], []
    for layer in range(RESTOREKV_LAYERS):
        _, hi, si = model.model.layers[layer].self_attn.masked_key_indices
        assert (si < L).all()
        keys, values = cache.layers[layer].keys[0], cache.layers[layer].values[0]
        assert keys.shape[1] == L + n, keys.shape
        base = layer * sv.shape[1] * L
        keep.append([sorted(set(range(L + n)) - set(si[hi == h].tolist())) for h in range(sv.shape[1])])
        ties.append([sorted(i - base - h * L for i in band if base + h * L <= i < base + (h + 1) * L)
                     for h in range(sv.shape[1])])
        row = []
        for h in range(sv.shape[1]):
            k, v = keys[h, L:].double(), values[h, L:].double()
            row.append(dict(k_sq=(k * k).sum().item(), v_sq=(v * v).sum().item(), k_sum=k.sum().item(),
                            v_sum=v.sum().item(), k_abs=k.abs().sum().item(), v_abs=v.abs().sum().item()))
        kv.append(row)
    return keep, ties, kv


def hash_uniform(words):
    """kvbench's scoring::hash_uniform: SplitMix64 over the words, the top 53 bits as [0, 1)."""
    m = (1 << 64) - 1

    def splitmix64(x):
        x = (x + 0x9E3779B97F4A7C15) & m
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)
    h = 0x243F6A8885A308D3
    for w in words:
        h = splitmix64(h ^ (w & m))
    return (h >> 11) * (1.0 / 9007199254740992.0)


def cam_cases(kp):
    """(name, press, kvbench spec, budget) of the CAMPress cases: KnormPress scores, a compression
    after 8 decode steps, at two target sizes."""
    out = []
    for target in (512, 768):
        press = kp["CAMPress"](base_press=kp["KnormPress"](), compression_interval=8, target_size=target)
        out.append((f"cam_knorm_t{target}", press, "cam:scorer=knorm,interval=8,merge_budget=32,seed=0", target))
    return out


def run_cam(model, press, ids, forced, seed=0):
    """The prompt prefilled, then `forced` fed one token per step under CAMPress, with kvpress's
    torch.bernoulli merge draws replaced by kvbench's (`cam`: merge iff u < p, u =
    hash_uniform(seed, sample seed 0, layer, kv head, j, L) for the j-th merge token of a layer
    compressed at L tokens). Returns per layer: the kept positions of each kv head at the end, the
    positions within TIE of the keep cut (the mean over kv heads of KnormPress's score), and the
    number of merge decisions in doubt (u within TIE_MERGE of p, or a merge-candidate cut within
    TIE_MERGE: key norms differ between the engines by about 1e-6), plus the final keys and
    values."""
    seen = {}
    inner_compress, inner_score, bern = press.compress, press.base_press.score, torch.bernoulli

    def score(module, hidden_states, keys, values, attentions, kwargs):
        s = inner_score(module, hidden_states, keys, values, attentions, kwargs)
        seen[module.layer_idx]["mean"] = s[0].double().mean(0)
        return s

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        layer = module.layer_idx
        assert layer not in seen, "one compression per layer"
        seen[layer] = dict(L=keys.shape[2], orig=keys[0].clone(), doubt=0)
        seen["now"] = layer
        k, v = inner_compress(module, hidden_states, keys, values, attentions, kwargs)
        seen[layer]["kept"] = [int(i) for i in (k[0][0][:, None, :] == keys[0][0][None, :, :]).all(-1)
                               .float().argmax(-1).tolist()]
        return k, v

    def bernoulli(p):
        layer = seen["now"]
        L = seen[layer]["L"]
        u = torch.tensor([[[hash_uniform([seed, 0, layer, h, j, L]) for j in range(p.shape[2])]
                           for h in range(p.shape[1])]], dtype=torch.float64)
        seen[layer]["doubt"] += int(((u - p.double()).abs() <= TIE_MERGE).sum())
        return (u < p.double()).to(p.dtype)

    object.__setattr__(press, "compress", compress)
    object.__setattr__(press.base_press, "score", score)
    torch.bernoulli = bernoulli
    try:
        cache = DynamicCache()
        with press(model):
            model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
            for i, t in enumerate(forced):  # at their true positions, as kvpress's pipeline passes them
                model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True,
                      position_ids=torch.tensor([[len(ids) + i]]))
    finally:
        torch.bernoulli = bern
    out = []
    for layer in range(LAYERS):
        w = seen[layer]
        L, mean, kept = w["L"], w["mean"], sorted(w["kept"])
        end = cache.layers[layer].keys.shape[2]
        positions = kept + list(range(L, L + end - len(kept)))
        band = band_score(mean, press.target_size)
        evicted = sorted(set(range(L)) - set(kept))
        k = min(press.compression_interval, len(evicted))
        doubt = w["doubt"] + len(band_score(mean[evicted], k, TIE_MERGE))
        out.append(dict(positions=positions, band=band, doubt=doubt, keys=cache.layers[layer].keys[0],
                        values=cache.layers[layer].values[0]))
    return out


def write_cam_goldens(model, kp, ids):
    """CAM_OUT: the CAMPress cases (cam_cases) on the teacher-forced continuation."""
    forced = ids[100:100 + CAM_FORCED]
    L = len(ids) + CAM_FORCED
    out = []
    for name, press, spec, budget in cam_cases(kp):
        res = run_cam(model, press, ids, forced)
        layers = []
        for r in res:
            heads = []
            for h in range(r["keys"].shape[0]):
                kd, vd = r["keys"][h].double(), r["values"][h].double()
                heads.append(dict(keep=hexmask(r["positions"], L), tie=hexmask(r["band"], L), n_tie=len(r["band"]),
                                  v_tie=r["doubt"], k_sq=float((kd ** 2).sum()), v_sq=float((vd ** 2).sum()),
                                  k_sum=float(kd.sum()), k_abs=float(kd.abs().sum()), v_sum=float(vd.sum()),
                                  v_abs=float(vd.abs().sum())))
            layers.append(heads)
        print(f"  {name}: doubts per layer {[r['doubt'] for r in res]}")
        print(f"  {name}: kept {len(res[0]['positions'])}, near-ties {sum(len(r['band']) for r in res)}, "
              f"merge decisions in doubt {sum(r['doubt'] for r in res)}")
        args_ = dict(compression_interval=press.compression_interval, target_size=press.target_size,
                     merge_budget=press.merge_budget, hidden_states_buffer_size=press.hidden_states_buffer_size,
                     base_press="KnormPress")
        out.append(dict(name=name, press="CAMPress", kvpress_args=args_, spec=spec, budget=budget, layers=layers))
    goldens_env.write_json(CAM_OUT, generator="tools/gen_kvpress_smollm2_goldens.py", kvpress="0.5.5",
                           torch=torch.__version__, transformers=transformers.__version__, model=GGUF,
                           weights="f32 (dequantised by transformers)", num_layers=LAYERS, prompt=ids, forced=forced,
                           tie_relative=TIE, cases=out)


def record_lazy_shares(press, snapkv):
    """Wraps SimLayerKVPress.is_lazy to record each layer's attention share (kvpress's own formula)."""
    shares, inner = {}, press.is_lazy

    def is_lazy(module, hidden_states, keys, position_embeddings):
        a = snapkv.compute_window_attention(module, hidden_states, keys, press.n_last, position_embeddings)
        a = a.mean((0, 1, 2))
        shares[module.layer_idx] = (a[:press.n_initial].sum() + a[-press.n_recent:].sum()).item()
        return inner(module, hidden_states, keys, position_embeddings)

    press.is_lazy = is_lazy
    return shares


def run_case(model, press, ids, calls=None):
    """One prefill under `press`: ([layer][head] kept positions, [layer] score tensors [Hkv, L]).
    With `calls` (a dict), every score call of every inner press is also recorded per layer as
    (positions [Hkv][n] of the scored keys, scores [Hkv, n])."""
    orig, scores, rows, queries = {}, {}, {}, {}
    kind = type(press).__name__
    think = think_of(press)
    if think is not None:  # the window queries ThinK scores channels with, per layer
        inner_q = think.compute_window_queries

        def window_queries(module, hidden_states, position_embeddings):
            q = inner_q(module, hidden_states, position_embeddings)
            queries[module.layer_idx] = q[0].clone().double()
            return q
        object.__setattr__(think, "compute_window_queries", window_queries)
    scorer = press.press if hasattr(press, "press") else press
    # PerLayerCompressionPress runs its inner press's forward_hook, which calls the inner compress;
    # ComposedPress runs each press's forward_hook in turn: the first one sees the original keys.
    hooked = scorer if kind == "PerLayerCompressionPress" else press.presses[0] if kind == "ComposedPress" else press
    inner_compress = hooked.compress

    orig_v = {}
    if calls is not None and "norm" in calls:  # the value weights of CriticalKVPress, per layer
        norms = calls["norm"]

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        orig[module.layer_idx] = keys.clone()
        orig_v[module.layer_idx] = values.clone()
        if calls is not None and "norm" in calls:
            norms[module.layer_idx] = PRESSES["CriticalKVPress"].vwl1norm(values, module)[0].double()
        return inner_compress(module, hidden_states, keys, values, attentions, kwargs)

    def wrap(inner_score):
        def score(module, hidden_states, keys, values, attentions, kwargs):
            s = inner_score(module, hidden_states, keys, values, attentions, kwargs)
            if kind == "ChunkPress" and module.layer_idx in scores:  # one call per chunk
                scores[module.layer_idx] = torch.cat([scores[module.layer_idx], s[0].clone().double()], -1)
            else:
                scores[module.layer_idx] = s[0].clone().double()
            if calls is not None and "norm" not in calls:  # each scored key row is one original row
                k0 = orig[module.layer_idx][0]
                if module.layer_idx not in rows:
                    rows[module.layer_idx] = [{r.numpy().tobytes(): i for i, r in enumerate(k0[h])}
                                              for h in range(k0.shape[0])]
                pos = [[rows[module.layer_idx][h][r.numpy().tobytes()] for r in keys[0][h]]
                       for h in range(k0.shape[0])]
                calls.setdefault(module.layer_idx, []).append((pos, s[0].clone().double()))
            return s
        return score

    object.__setattr__(hooked, "compress", compress)
    for sc in (press.presses if kind == "ComposedPress" else [scorer]):
        if hasattr(sc, "score"):  # SimLayerKVPress has no per-token score
            object.__setattr__(sc, "score", wrap(sc.score))
    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    keep, final = [], []
    for layer in range(LAYERS):
        k0, k1 = orig[layer][0], cache.layers[layer].keys[0]
        final.append((k1.clone(), cache.layers[layer].values[0].clone()))
        heads = []
        for h in range(k0.shape[0]):
            # Key channels a press zeroed in every kept key are left out of the match.
            zero = (k1[h] == 0).all(0) if think is not None else torch.zeros(k1.shape[-1], dtype=torch.bool)
            eq = (k1[h][:, None, :] == k0[h].masked_fill(zero, 0)[None, :, :]).all(-1)
            if kind in ("KeyRerotationPress", "FinchPress"):  # keys rotated: the values match, the rotation decides
                eq = rerotated_match(k0[h], orig_v[layer][0][h], k1[h], cache.layers[layer].values[0][h],
                                     module_inv_freq(model))
            assert bool((eq.sum(-1) == 1).all()), "a kept key row does not match exactly one original row"
            heads.append(sorted(int(i) for i in eq.float().argmax(-1).tolist()))
        if kind in ("LUKVPress", "CriticalAdaKVPress"):  # the cache stays whole; the pruned tokens are masked
            _, hi, si = model.model.layers[layer].self_attn.masked_key_indices
            pruned = [set(si[hi == h].tolist()) for h in range(k0.shape[0])]
            heads = [[i for i in kept if i not in pruned[h]] for h, kept in enumerate(heads)]
        keep.append(heads)
    if rewrites(press):
        return keep, scores, dict(final=final, queries=queries, orig=orig, think=think,
                                  merge=press if kind == "MergingPress" else None)
    return keep, scores


def run_kvcompose(model, press, ids, n_ctx):
    """KVComposePress as its pipeline runs it: the context ids[:n_ctx] prefilled, then the question
    ids[n_ctx:] fed as the prompt whose attention scores the context. Returns ([layer][head] kept
    positions, [layer][head] near-tie positions). The question's tokens are counted as kept (the
    pipeline feeds them again to generate; kvbench keeps its `window`). Asserts that no composite
    entry lies within TIE of the global cut (a layer's count would be in doubt); a head's near-ties
    are those of its own top-count cut."""
    seen = {}
    register, prepare = press.register_context_ids, press.prepare_important_masks

    def register_context_ids(context_ids):
        register(context_ids)
        press.register_prompt_ids([torch.tensor([ids[n_ctx:]])])

    def prepare_important_masks():
        prepare()
        seen["scores"] = press.scores.clone().double()
        seen["composite"] = press.composite_scores_per_layer.clone().double()
        seen["count"] = [int(c) for c in press.important_per_layer]
        seen["mask"] = [[m.clone() for m in layer] for layer in press.important_mask_per_kv_head]

    object.__setattr__(press, "register_context_ids", register_context_ids)
    object.__setattr__(press, "prepare_important_masks", prepare_important_masks)
    cache = DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([ids[:n_ctx]]), past_key_values=cache, use_cache=True)
    comp = seen["composite"]
    n = kvpress_n_kept(comp.numel(), press.compression_ratio)
    v = comp.reshape(-1).sort(descending=True).values
    a, b = v[n - 1].item(), v[n].item()
    tol = FLAG_TIE * max(abs(a), abs(b), 1e-30)
    # Composite entries at the global cut (layer 0's curve repeats the largest layer's exactly):
    # a layer's count may move by as many as it holds there (its "count_slack").
    slack = [int(((comp[layer] >= b - tol) & (comp[layer] <= a + tol)).sum()) if a - b <= tol else 0
             for layer in range(LAYERS)]
    keep, ties = [], []
    for layer in range(LAYERS):
        count = seen["count"][layer]
        assert cache.layers[layer].keys.shape[2] == count
        keep.append([sorted(seen["mask"][layer][h].nonzero().squeeze(-1).tolist()) + list(range(n_ctx, len(ids)))
                     for h in range(len(seen["mask"][layer]))])
        heads = []
        for h in range(len(seen["mask"][layer])):
            sc = seen["scores"][layer][h]
            order = sc.sort(descending=True, stable=True).indices.tolist()
            d = slack[layer]
            band = set(band_score(sc, count)) | set(order[max(0, count - d):count + d])
            heads.append((sorted(band), d))
        ties.append(heads)
    return keep, ties


def kvpress_n_kept(k, r):
    from kvpress.utils import compute_n_kept
    return compute_n_kept(k, r)


def band_score(s, n, tie=TIE):
    """Tokens in doubt at a top-n cut of scores s: when the last kept (a) and first evicted (b) score
    differ by at most `tie` relative, every token scoring within [b - tol, a + tol]; else none."""
    v = s.sort(descending=True).values
    if n >= len(v):
        return []
    a, b = v[n - 1].item(), v[n].item()
    tol = tie * max(abs(a), abs(b), 1e-30)
    if a - b > tol:
        return []
    return [i for i in range(len(s)) if b - tol <= s[i].item() <= a + tol]


def written_head(w, layer, h, kept):
    """The kept K/V of head h after a press that rewrites keys (ThinK) or values (MergingPress, whose
    v_tie counts the evicted tokens with two near-equal merge targets): the zeroed key channels, the
    channels in doubt at ThinK's cut (its channel score, restated from ThinKPress.compress: mean over
    the window queries of q^2 averaged over the GQA group, times the mean over the kept keys of k^2,
    within TIE of the cut), and the sums of squares of the kept keys and values (f64)."""
    k1, v1 = w["final"][layer]
    D = k1.shape[-1]
    kd, vd = k1[h].double(), v1[h].double()
    sums = dict(k_sq=float((kd ** 2).sum()), v_sq=float((vd ** 2).sum()), k_sum=float(kd.sum()),
                k_abs=float(kd.abs().sum()), v_sum=float(vd.sum()), v_abs=float(vd.abs().sum()))
    if w["think"] is None and w["merge"] is None:  # KeyRerotationPress: keys rotated, values gathered
        return dict(k_zero=[], k_tie=[], v_tie=0, **sums)
    if w["think"] is None:  # MergingPress: keys untouched. An evicted token whose two best survivors'
        # key cosines are within TIE_MERGE may merge into either, one whose best cosine is within
        # TIE_MERGE of the threshold or of the merge_fraction quantile may merge or not: v_tie counts them
        mp = w["merge"]
        k0 = w["orig"][layer][0][h].double()
        kn = k0 / k0.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        ev = sorted(set(range(k0.shape[0])) - set(kept))
        sim = kn[ev] @ kn[kept].T
        top = sim.topk(2, dim=-1).values
        near = (top[:, 0] - top[:, 1]).abs() <= TIE_MERGE
        near |= (top[:, 0] - mp.similarity_threshold).abs() <= TIE_MERGE
        if mp.merge_fraction < 1.0:
            ok = top[:, 0] >= mp.similarity_threshold
            q = top[:, 0].masked_fill(~ok, float("-inf")).quantile(1.0 - mp.merge_fraction)
            near |= (top[:, 0] - q).abs() <= TIE_MERGE
        return dict(k_zero=[], k_tie=[], v_tie=int(near.sum().item()), **sums)
    q = w["queries"][layer]  # [Hq, w, D]
    Hkv = k1.shape[0]
    qn = (q ** 2).mean(1).view(Hkv, q.shape[0] // Hkv, D).mean(1)
    k0 = w["orig"][layer][0][h][kept].double()
    s = qn[h] * (k0 ** 2).mean(0)
    n_pruned = int(D * w["think"].key_channel_compression_ratio)
    zero = [int(d) for d in torch.nonzero((k1[h] == 0).all(0)).flatten().tolist()]
    assert len(zero) == n_pruned, (layer, h, zero, n_pruned)
    return dict(k_zero=zero, k_tie=sorted(band_score(s, D - n_pruned)), v_tie=0, **sums)


def band_chunks(s, chunk, ratio):
    """ChunkKVPress: the tokens of every chunk whose mean head-summed score is in doubt at the cut."""
    t = s.sum(0)
    L = len(t)
    bounds = [(c, min(L, c + chunk)) for c in range(0, L, chunk)]
    means = torch.stack([t[a:b].mean() for a, b in bounds])
    k = max(1, int(len(bounds) * (1 - ratio)))
    chunks = band_score(means, k)
    return [i for c in chunks for i in range(*bounds[c])]


def band_entropy(s, chunk, low, ratio):
    """EntropyGatedChunkKVPress: the tokens in doubt. Redoes kvpress's selection in double on the
    head-summed score. A chunk is in doubt when its mean (entropy) is within FLAG_TIE of the median
    mean (entropy) while its other flag makes the spiky flag depend on it: the selection is redone
    for every combination of those chunks' spiky flags (each flag alone when more than 6), and every
    token kept by some but not all is in doubt. Also in doubt, in each run: the tokens of every chunk whose mean is within TIE of the
    mean of the chunk the budget ran out in (the visiting order there), each partly kept chunk's
    own top-n cut, and the cut of the final top-up over the remaining tokens."""
    import itertools
    t = s.sum(0)
    L = len(t)
    bounds = [(c, min(L, c + chunk)) for c in range(0, L, chunk)]
    means = [t[a:b].mean().item() for a, b in bounds]

    def entropy(x):
        if len(x) == 1:
            return 0.0
        x = x - min(x.min().item(), 0.0)
        p = x / (x.sum() + 1e-8)
        return min(1.0, max(0.0, (-(p * (p + 1e-8).log()).sum() / math.log(len(x))).item()))
    ents = [entropy(t[a:b]) for a, b in bounds]
    n = len(bounds)
    m_med = sorted(means)[(n - 1) // 2]
    e_med = sorted(ents)[(n - 1) // 2]
    high = [m >= m_med for m in means]
    lowe = [e < e_med for e in ents]
    doubt = []
    for c in range(n):
        near_m = means[c] != m_med and abs(means[c] - m_med) <= FLAG_TIE * max(abs(m_med), 1e-30)
        near_e = ents[c] != e_med and abs(ents[c] - e_med) <= FLAG_TIE * max(abs(e_med), 1e-30)
        if (near_m and lowe[c]) or (near_e and high[c]):
            doubt.append(c)

    def select(spiky):
        budget = max(1, int(L * (1 - ratio)))
        keep = torch.zeros(L, dtype=torch.bool)
        band = set()
        last = None
        for c in sorted(range(n), key=lambda c: -means[c]):
            if budget <= 0:
                break
            a, b = bounds[c]
            k = min(b - a, budget)
            if spiky[c]:
                k = min(k, low)
            if k == b - a:
                keep[a:b] = True
            else:
                keep[t[a:b].topk(k).indices + a] = True
                band |= {a + i for i in band_score(t[a:b], k)}
            budget -= k
            last = c
        if last is not None:  # the chunks around the point where the budget ran out
            ref = means[last]
            for c in range(n):
                if abs(means[c] - ref) <= TIE * max(abs(ref), 1e-30) and c != last:
                    band |= set(range(*bounds[c])) | set(range(*bounds[last]))
        if budget > 0:
            rest = (~keep).nonzero().squeeze(-1)
            band |= {rest[i].item() for i in band_score(t[rest], budget)}
        return keep, band

    base = [high[c] and lowe[c] for c in range(n)]
    keep0, band = select(base)
    # Every combination of the flags in doubt when there are few, else each flag flipped alone.
    combos = (itertools.product([False, True], repeat=len(doubt)) if len(doubt) <= 6 else
              [[(not base[d]) if d == c else base[d] for d in doubt] for c in doubt])
    for flips in combos:
        spiky = list(base)
        for c, f in zip(doubt, flips):
            spiky[c] = f
        keep, b = select(spiky)
        band |= b | set((keep ^ keep0).nonzero().squeeze(-1).tolist())
    return sorted(band)


def hexmask(positions, L):
    bits = ["0"] * (((L + 3) // 4) * 4)
    for p in positions:
        bits[p] = "1"
    return "".join("%x" % int("".join(bits[j:j + 4]), 2) for j in range(0, len(bits), 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--only", action="append", default=[],
                    help="regenerate only the cases whose name starts with this (repeatable); the others are "
                         "copied from the existing golden file, which must hold the same prompt")
    args = ap.parse_args()
    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="eager", dtype=torch.float32)
    # ChunkKVPress refuses attention weights (eager passes them): it runs on an sdpa instance.
    sdpa = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="sdpa", dtype=torch.float32)
    for m in (model, sdpa):  # the later layers cannot change the first LAYERS' keep-sets: dropped
        m.model.layers = m.model.layers[:LAYERS]
        m.config.num_hidden_layers = LAYERS
        m.eval()
    ids, n_ctx = build_prompt(tok)
    L = len(ids)
    print(f"prompt {L} tokens (context {n_ctx})")
    kp = presses()
    PRESSES.update(kp)
    if not args.only or any(o.startswith("cam") for o in args.only):  # CAMPress: its own file
        write_cam_goldens(model, kp, ids)
        if args.only and all(o.startswith("cam") for o in args.only):
            return
    out = []
    old = {}
    restorekv = None  # restorekv_model, loaded for the first RestoreKVPress case
    if args.only:
        prev = json.load(open(OUT))
        assert prev["prompt"] == ids, "--only needs the existing golden's prompt"
        old = {c["name"]: c for c in prev["cases"]}
    for name, press, spec, budget, tie in cases(kp, L, n_ctx):
        if args.only and not any(name.startswith(o) for o in args.only):
            out.append(old[name])
            continue
        shares = record_lazy_shares(press, kp["SnapKVPress"]) if tie == "lazy" else None
        calls = {} if isinstance(tie, tuple) and tie[0] == "calls" else None
        if isinstance(tie, tuple) and tie[0] == "critical":
            calls = {"norm": {}}
        sdpa_only = tie == "lukv" or isinstance(tie, tuple) and (tie[0] in ("chunks", "chunkpress", "entropy") or type(press).__name__ in ("BlockPress", "CriticalAdaKVPress"))
        feed = finch_feed(ids, n_ctx) if type(press).__name__ == "FinchPress" else ids
        if tie == "kvcompose":
            keep, scores = run_kvcompose(model, press, ids, n_ctx)
            written = None
        elif tie == "fastkvzip":  # kvpress refuses eager attention here
            keep, scores = run_fastkvzip(sdpa, press, ids)
            written = None
        elif tie == "kvzip":  # kvpress refuses eager attention here too
            keep, scores, kvzip_prompts = run_kvzip(sdpa, press, ids, tok)
            written = None
        elif tie == "restorekv":
            if restorekv is None:
                write_restorekv_adapter(sdpa)
                restorekv = restorekv_model(d, f)
            keep, scores, restore_kv = run_restorekv(restorekv, press, ids, tok)
            written = None
        else:
            res = run_case(sdpa if sdpa_only else model, press, feed, calls)
            keep, scores, written = res if len(res) == 3 else (*res, None)
        extra = {}
        if tie == "kvzip":
            extra["kvzip_prompts"] = kvzip_prompts
        if tie == "restorekv":
            extra.update(num_layers=RESTOREKV_LAYERS, restore_rows=RESTOREKV_ROWS, restore_kv=restore_kv)
        if shares is not None:
            extra["lazy_shares"] = [shares[layer] for layer in range(LAYERS)]
            margin = min(abs(v - press.lazy_threshold) for v in extra["lazy_shares"])
            assert margin > TIE, (name, extra["lazy_shares"])
            lazy = [v > press.lazy_threshold for v in extra["lazy_shares"]]
            assert any(lazy) and not all(lazy), (name, extra["lazy_shares"])
        layers = []
        for layer in range(RESTOREKV_LAYERS if tie == "restorekv" else LAYERS):
            heads = []
            for h, kept in enumerate(keep[layer]):
                extra_head = {}
                if tie == "think":  # every token kept
                    assert len(kept) == L, (name, layer, h, len(kept))
                    band = []
                elif tie == "score":
                    assert len(kept) == budget, (name, layer, h, len(kept), budget)
                    band = band_score(scores[layer][h], budget)
                elif tie == "lazy":
                    band = []
                elif tie == "kvcompose":
                    band, slack = scores[layer][h]
                elif tie in ("fastkvzip", "kvzip", "restorekv"):
                    band = scores[layer][h]
                elif tie == "lukv":  # the sinks and the window score above all, as LUKVPress sets them
                    sc = scores[layer][h].clone()
                    sc[:press.sink] = scores[layer].max() + 1
                    sc[L - press.window:] = scores[layer].max() + 1
                    band = band_score(sc, len(kept))
                elif tie[0] == "chunkpress":
                    band = []
                    for a in range(0, L, tie[1]):
                        n = min(L, a + tie[1]) - a
                        band += [a + i for i in band_score(scores[layer][h][a:a + n], max(1, int(n * (1 - tie[2]))))]
                    assert len(kept) == sum(max(1, int((min(L, a + tie[1]) - a) * (1 - tie[2])))
                                            for a in range(0, L, tie[1])), (name, layer, h)
                elif tie[0] == "critical":
                    if h == 0:
                        crit = band_critical(type(press).__name__, scores[layer], calls["norm"][layer], L, tie[1], press)
                    band, slack = crit[h]
                    if slack:
                        extra_head = {"count_slack": slack}
                    if type(press).__name__ == "CriticalKVPress":
                        assert len(kept) == budget, (name, layer, h, len(kept), budget)
                elif tie[0] == "calls":  # every score call's own cut, in positions
                    band = set()
                    for c, (pos, sc) in enumerate(calls[layer]):
                        band |= {pos[h][i] for i in band_score(sc[h], tie[1](c, len(pos[h])))}
                    band = sorted(band)
                    assert len(kept) == (budget if type(press).__name__ == "BlockPress"
                                         else tie[1](1, budget)), (name, layer, h, len(kept))
                elif tie[0] == "entropy":
                    assert len(kept) == max(1, int(L * (1 - tie[3]))), (name, layer, h, len(kept))
                    band = band_entropy(scores[layer], tie[1], tie[2], tie[3])
                elif tie[0] == "layers":
                    assert len(kept) == tie[1][layer], (name, layer, h, len(kept))
                    band = band_score(scores[layer][h], tie[1][layer])
                else:
                    band = band_chunks(scores[layer], tie[1], tie[2])
                heads.append(dict(keep=hexmask(kept, L + (RESTOREKV_ROWS if tie == "restorekv" else 0)),
                                  tie=hexmask(band, L), n_tie=len(band)))
                if written is not None:
                    heads[-1].update(written_head(written, layer, h, kept))
                if tie == "kvcompose" and slack:
                    heads[-1]["count_slack"] = slack
                heads[-1].update(extra_head)
            layers.append(heads)
        n_tie = sum(h["n_tie"] for lay in layers for h in lay)
        print(f"  {name}: budget {budget}, kept {len(keep[0][0])}, near-tie tokens {n_tie}")
        args_ = {k: v for k, v in press.__dict__.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if hasattr(press, "press"):
            args_.update({"press." + k: v for k, v in press.press.__dict__.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
            args_["press"] = type(press.press).__name__
        if hasattr(press, "compression_ratios"):
            args_["compression_ratios"] = list(press.compression_ratios)
        out.append(dict(name=name, press=type(press).__name__, kvpress_args=args_, spec=spec, budget=budget,
                        layers=layers, **extra))
    if args.only:  # the existing cases keep their places; new ones follow
        prev_names = [c["name"] for c in prev["cases"]]
        by_name = {c["name"]: c for c in out}
        out = [by_name[x] for x in prev_names if x in by_name] + [c for c in out if c["name"] not in prev_names]
    goldens_env.write_json(OUT, generator="tools/gen_kvpress_smollm2_goldens.py", kvpress="0.5.5",
                           torch=torch.__version__, transformers=transformers.__version__, model=GGUF,
                           weights="f32 (dequantised by transformers)", num_layers=LAYERS, prompt=ids,
                           context_tokens=n_ctx, tie_relative=TIE, cases=out)


if __name__ == "__main__":
    main()
