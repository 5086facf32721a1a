// The kvpress 0.5.5 migration table (kvpress_table.h). The kvpress arguments are read from the
// press classes of kvpress 0.5.5 (kvpress/presses/*.py, their dataclass defaults); the kvbench specs
// are those the goldens were generated with (tools/gen_policy_model_goldens.py,
// tools/gen_threshold_goldens.py, tools/gen_kvzap_goldens.py).
#include "engine/policies/kvpress_table.h"

namespace kvb {

const char* kvpress_status_name(KvpressStatus s) {
  switch (s) {
    case KvpressStatus::kGolden: return "golden";
    case KvpressStatus::kChecked: return "checked";
    case KvpressStatus::kRule: return "rule";
    case KvpressStatus::kWrapper: return "wrapper";
    case KvpressStatus::kMissing: return "missing";
    case KvpressStatus::kExcused: return "excused";
  }
  return "?";
}

const std::vector<KvpressRow>& kvpress_table() {
  using S = KvpressStatus;
  static const std::vector<KvpressRow> rows = {
      // Scorer presses: one prefill compression (decode=false), budget int(L·(1−r)).
      {"KnormPress", "compression_ratio=r", "knorm:decode=false", S::kGolden, "policy_model_goldens.json:KnormPress",
       "", ""},
      {"SnapKVPress", "compression_ratio=r, window_size=64, kernel_size=5",
       "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false", S::kGolden, "policy_model_goldens.json:SnapKVPress",
       "window", "kvbench's snapkv defaults are R-KV's (window 8, kernel 7, max pool, max_logits)"},
      {"StreamingLLMPress", "compression_ratio=r, n_sink=4", "streamingllm:sinks=4,decode=false", S::kGolden,
       "policy_model_goldens.json:StreamingLLMPress", "", ""},
      {"TOVAPress", "compression_ratio=r", "tova:decode=false", S::kGolden, "policy_model_goldens.json:TOVAPress", "", ""},
      {"KeyDiffPress", "compression_ratio=r", "keydiff:window=0,decode=false", S::kGolden,
       "policy_model_goldens.json:KeyDiffPress", "", ""},
      {"ExpectedAttentionPress", "compression_ratio=r, n_future_positions=512, n_sink=4, epsilon=0",
       "expected_attention:n_future=512,sinks=4,epsilon=0,decode=false", S::kGolden,
       "policy_model_goldens.json:ExpectedAttentionPress", "", ""},
      {"AdaKVPress", "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), alpha_safeguard=0.20",
       "adakv:window=64,kernel=5,pool=avg,gqa=mean,alpha=0.2,decode=false", S::kGolden,
       "policy_model_goldens.json:AdaKVPress", "window", "the budget is the average per kv head of a layer"},
      {"PyramidKVPress", "compression_ratio=r, window_size=64, kernel_size=5, beta=20",
       "pyramidkv:window=64,kernel=5,pool=avg,gqa=mean,beta=20,layer_budget=kvpress,align=1,decode=false", S::kGolden,
       "policy_model_goldens.json:PyramidKVPress", "window,beta", "budget: the average over the layers"},
      {"DuoAttentionPress", "head_compression_ratio=s", "duoattention:pattern=DIR,sparsity=s,decode=false", S::kGolden,
       "policy_model_goldens.json:DuoAttentionPress", "pattern,sparsity",
       "pattern: the released attn_patterns of mit-han-lab/duo-attention; no budget: streaming heads keep sink_size + "
       "recent_size"},
      {"RandomPress", "compression_ratio=r, seed=s", "random:seed=s,decode=false", S::kRule, "", "",
       "uniform scores as kvpress, drawn by kvbench's own generator: other tokens for the same seed"},
      // Threshold presses: DMSPress keeps what scores above a threshold.
      {"DMSPress(KnormPress)", "press=KnormPress(), threshold=t, sliding_window_size=128, decoding=False",
       "knorm:budget_kind=threshold,threshold=t,window=128,buffer=1,decode=false", S::kGolden,
       "threshold_goldens.json:dms_knorm*", "threshold,window,decode", "decoding=True is decode=true"},
      {"DMSPress(SnapKVPress)", "press=SnapKVPress(), threshold=t, sliding_window_size=128, decoding=False",
       "snapkv:budget_kind=threshold,threshold=t,window=128,buffer=1,decode=false", S::kChecked, "", "",
       "12 of 12 continuations and every kept set equal (issue 45's check, SmolLM2-135M, f32 weights)"},
      {"DMSPress(KVzapPress)", "press=KVzapPress(model_type=\"mlp\"), threshold=t, sliding_window_size=128, decoding=True",
       "kvzap:scorer=DIR,threshold=t,window=128", S::kGolden, "kvzap_goldens.json:*", "scorer,threshold,window",
       "model_type=\"linear\" checkpoints load the same way (the scorer's tensors say which)"},
      // Method presses kvbench does not have yet (issue 45).
      {"ObservedAttentionPress", "compression_ratio=r", "observed_attention:decode=false", S::kGolden,
       "kvpress_smollm2_goldens.json:ObservedAttentionPress", "", ""},
      {"CriticalKVPress",
       "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), epsilon=1e-4, first_stage_ratio=0.5",
       "criticalkv:window=64,kernel=5,pool=avg,gqa=mean,epsilon=1e-4,first_stage_ratio=0.5,decode=false", S::kGolden,
       "kvpress_smollm2_goldens.json:CriticalKVPress", "",
       "press=SnapKVPress only; the value weights ‖W_o·v‖₁ from the o_proj weights (LayerStep::out_proj_head)"},
      {"CriticalAdaKVPress",
       "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), alpha_safeguard=0.20, epsilon=1e-4, "
       "first_stage_ratio=0.5",
       "criticaladakv:window=64,kernel=5,pool=avg,gqa=mean,alpha=0.2,epsilon=1e-4,first_stage_ratio=0.5,decode=false",
       S::kGolden, "kvpress_smollm2_goldens.json:CriticalAdaKVPress", "",
       "press=SnapKVPress only; the budget is the average per kv head of a layer; pruned tokens are evicted "
       "(kvpress masks them)"},
      {"ChunkKVPress", "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), chunk_length=20",
       "chunkkv:chunk=20,window=64,kernel=5,pool=avg,gqa=mean,decode=false", S::kGolden,
       "kvpress_smollm2_goldens.json:ChunkKVPress", "", "one keep-set per layer; budget_kind=ratio,ratio=1-r"},
      {"EntropyGatedChunkKVPress",
       "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), chunk_length=10, "
       "low_entropy_chunk_length=4",
       "entropy_chunkkv:chunk=10,low_entropy_chunk=4,window=64,kernel=5,pool=avg,gqa=mean,decode=false", S::kGolden,
       "kvpress_smollm2_goldens.json:EntropyGatedChunkKVPress", "",
       "one keep-set per layer; budget_kind=ratio,ratio=1-r; equal chunk means and token scores go to the earlier"},
      {"SimLayerKVPress", "lazy_threshold=1.0, n_last=1, n_recent=1024, n_initial=4",
       "simlayerkv:lazy_threshold=1.0,n_last=1,n_recent=1024,n_initial=4", S::kGolden,
       "kvpress_smollm2_goldens.json:SimLayerKVPress", "lazy_threshold,n_recent",
       "no budget: a lazy layer keeps its initial + recent tokens; prompt only"},
      {"LagKVPress", "compression_ratio=r, n_sink=4, lag_size=128, cross_scoring=False",
       "lagkv:sinks=4,lag=128,cross=false,decode=false", S::kGolden, "kvpress_smollm2_goldens.json:LagKVPress", "", ""},
      {"FinchPress", "compression_ratio=r, chunk_length=None, normalize_scores=True, rerotate_keys=True",
       "finch:normalize=true,rerotate_keys=true,decode=false", S::kGolden, "kvpress_smollm2_goldens.json:FinchPress",
       "window,press_chunk",
       "window=q, the question's q tokens (kvpress: after the delimiter token); chunk_length=N is "
       "budget_kind=ratio,ratio=1-r,press_chunk=N"},
      {"KVzipPress", "compression_ratio=r, layerwise=False, n_sink=4, kvzip_plus_normalization=False, chunk_size=2048",
       "kvzip:layerwise=false,sinks=4,plus_norm=false,chunk_size=2048", S::kGolden,
       "kvpress_smollm2_goldens.json:KVzipPress", "ratio,layerwise,chunk_size,plus_norm",
       "ratio=1-r; the engine's scoring passes (repeat prompt + chat template's assistant header + each chunk "
       "again, rolled back after), built from the model's tokenizer and chat template; prompt only, kvbench "
       "evicts what kvpress masks"},
      {"FastKVzipPress",
       "compression_ratio=r, layerwise=False, n_sink=4, window_size=4096, window_ratio=0.02 (trained gates)",
       "fastkvzip:gates=FILE,layerwise=false,sinks=4,window=4096,window_ratio=0.02", S::kGolden,
       "kvpress_smollm2_goldens.json:FastKVzipPress", "ratio,layerwise,gates,random_gates",
       "ratio=1-r; gates: the published .pt's {\"module\": [...]} layout read as module.{l}.* tensors (docs/policies.md, fastkvzip); "
       "the golden injects kvbench's random_gates into kvpress; prompt only, kvbench evicts what kvpress masks"},
      {"CURPress", "compression_ratio=r, num_sinks=4, leverage_type=\"kv_product\", local_window_size=16",
       "cur:sinks=4,leverage=kv_product,local_window=16,decode=false", S::kGolden,
       "kvpress_smollm2_goldens.json:CURPress", "", "use_random_leverage=True is not offered (torch's random stream)"},
      {"LeverageScorePress", "compression_ratio=r, sketch_dimension=48", "", S::kExcused, "", "",
       "its Gaussian sketch is drawn from torch's random generator at every call: equal keep-sets would need torch's "
       "random stream bit for bit"},
      {"CompactorPress", "compression_ratio=r, sink_size_start=8, sink_size_end=4, chunk_size=256, sketch_dimension=48",
       "", S::kExcused, "", "",
       "its score adds LeverageScorePress's, whose Gaussian sketch is drawn from torch's random generator at every "
       "call: equal keep-sets would need torch's random stream bit for bit"},
      {"NonCausalAttnPress", "compression_ratio=r, chunk_size=256", "noncausal_attn:chunk=256", S::kGolden,
       "kvpress_smollm2_goldens.json:NonCausalAttnPress", "", "prompt only, as kvpress"},
      {"QFilterPress", "compression_ratio=r (the published Q-filters of the model)",
       "qfilter:filters=FILE,decode=false", S::kGolden, "kvpress_smollm2_goldens.json:QFilterPress", "",
       "filters: a Hub id (nthngdy/<model>_qfilt), a directory or a file with q_filters; the golden injects random "
       "filters into kvpress"},
      {"ThinKPress", "key_channel_compression_ratio=c, window_size=32", "think:window=32", S::kGolden,
       "kvpress_smollm2_goldens.json:ThinKPress", "",
       "ratio=1-c (kept key channels); ComposedPress([P, ThinKPress]) is P's then=think,then_ratio=1-c"},
      {"CAMPress", "base_press=P, compression_interval=512, target_size=2048, merge_budget=32 (merges values)",
       "cam:scorer=knorm,interval=512,merge_budget=32", S::kGolden, "kvpress_smollm2_cam_goldens.json:CAMPress",
       "interval",
       "--budget target_size; scorer: a token-local scored policy (P); kvpress's unseeded torch.bernoulli merge draws "
       "are kvbench's seeded ones, injected into kvpress for the golden"},
      {"MergingPress", "press=P, similarity_threshold=0.0, merge_fraction=1.0 (merges values)",
       "knorm:decode=false,merge=true", S::kGolden, "kvpress_smollm2_goldens.json:merging_knorm*", "",
       "any policy P: P's spec plus merge=true,merge_threshold=t,merge_fraction=f"},
      {"KVComposePress", "compression_ratio=r, structured=True, agg_task=\"max\", agg_group=\"mean\", agg_head=\"mean\"",
       "kvcompose:agg_task=max,agg_group=mean,agg_head=mean,structured=true", S::kGolden,
       "kvpress_smollm2_goldens.json:KVComposePress", "ratio,window",
       "ratio=1-r; window=q, the question's q tokens (kvpress's pipeline feeds them after the context), kept; prompt only"},
      {"CapPress", "compression_ratio=r, tau=5.0, n_future_positions=512, n_sink=4, epsilon=1e-6",
       "cap:tau=5,n_future=512,sinks=4,epsilon=1e-6,decode=false", S::kGolden, "kvpress_smollm2_goldens.json:CapPress",
       "", "in double with a Cholesky solve (kvpress: f32)"},
      {"LUKVPress", "press=ExpectedAttentionPress(epsilon=2e-2), compression_ratio=r, sink=4, window=1",
       "lukv:curve=FILE,sinks=4,window=1,epsilon=0.02,decode=false", S::kGolden, "kvpress_smollm2_goldens.json:LUKVPress",
       "", "curve: the .npy of the model and press (LU-KV's curve_data); budget_kind=ratio,ratio=1-r"},
      {"RestoreKVPress", "compression_ratio=r, layerwise=False, n_sink=4, chunk_size=2048 (learned adapter)",
       "restorekv:adapter=DIR,layerwise=false,sinks=4,chunk_size=2048", S::kGolden,
       "kvpress_smollm2_goldens.json:RestoreKVPress", "ratio,adapter,random_adapter",
       "ratio=1-r; adapter: the folder higokri/RestoreKV-<model> publishes (PEFT LoRA + restore_embeddings); the "
       "golden injects a random adapter into kvpress; the engine's restore pass (input embeddings through the "
       "LoRA) after kvzip's scoring passes, its rows kept; later tokens follow at P + n; CPU backends only"},
      {"KVgradPress", "compression_ratio=r, layerwise=False, n_sink=4, chunk_size=512", "", S::kExcused, "", "",
       "its score is input x gradient of the loss: a backward pass, which an inference engine does not run"},
      // Wrappers: what they do is a protocol option of every kvbench policy.
      {"DecodingPress", "base_press=P, compression_interval=512, target_size=2048",
       "<P>:decode=true,buffer=512 (--budget 2048)", S::kWrapper, "", "",
       "kvbench keeps slots in position order and rotates each window query at its own position; "
       "kvpress does neither (\"Compared with kvpress's decode-time compression\")"},
      {"PrefillDecodingPress", "prefilling_press=P, decoding_press=DecodingPress(P, ...)", "<P>:decode=true",
       S::kWrapper, "", "", "compress=prompt_end (the default): once at the prompt's end, then every buffer tokens"},
      {"CompressionRatioDecodingPress", "base_press=P, compression_interval=512, target_compression_ratio=0.5",
       "<P>:budget_kind=ratio,ratio=0.5,decode=true,buffer=512", S::kWrapper, "", "",
       "the same schedule; its keep-sets have not been compared with kvpress's"},
      // Wrappers kvbench has as spec options of its scored policies (ScheduledPolicy), each pinned
      // with one inner press; the option works with any scored policy (notes).
      {"ChunkPress", "press=KnormPress(compression_ratio=r), chunk_length=1024",
       "knorm:budget_kind=ratio,ratio=0.5,decode=false,press_chunk=1024", S::kGolden,
       "kvpress_smollm2_goldens.json:ChunkPress", "press_chunk",
       "any press: <P>:budget_kind=ratio,ratio=1-r,decode=false,press_chunk=N; kvbench scores the whole prompt and "
       "keeps each chunk's top, kvpress scores each chunk alone: equal when a token's score reads only that token"},
      {"BlockPress", "press=KeyDiffPress(compression_ratio=r), block_size=128",
       "keydiff:window=0,decode=false,press_block=128", S::kGolden, "kvpress_smollm2_goldens.json:BlockPress",
       "press_block", "any press that scores a subset of its cache alone (knorm, keydiff): <P>:press_block=N"},
      {"PerLayerCompressionPress",
       "press=SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5), compression_ratios=[r0, r1, ...]",
       "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,budget_kind=ratio,layer_ratios=0.5/0.75", S::kGolden,
       "kvpress_smollm2_goldens.json:PerLayerCompressionPress", "layer_ratios",
       "any press: <P>:budget_kind=ratio,layer_ratios=f0/f1/... with one kept fraction f = 1-r per layer"},
      {"ComposedPress",
       "presses=[SnapKVPress(compression_ratio=r1, window_size=64, kernel_size=5), KnormPress(compression_ratio=r2)]",
       "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,then=knorm,then_ratio=0.5", S::kGolden,
       "kvpress_smollm2_goldens.json:ComposedPress", "then,then_ratio",
       "two presses: <P1>:...,then=<P2>,then_ratio=1-r2 (P2 knorm or keydiff: it scores P1's kept tokens alone); "
       "--budget int(L(1-r1))"},
      {"KeyRerotationPress", "press=P", "knorm:decode=false,rerotate=true", S::kGolden,
       "kvpress_smollm2_goldens.json:rerotation_knorm*", "",
       "any policy P: P's spec plus rerotate=true; cached and later positions stay the true ones, as kvpress"},
  };
  return rows;
}

}  // namespace kvb
