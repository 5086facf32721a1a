// Learned-policy checkpoints as the papers released them (docs/policies.md#gate-files): PyTorch
// .pth/.pt files written by torch (tools/gen_pth_fixtures.py → tests/fixtures/pth) read by the
// restricted unpickler give exactly the tensors safetensors gives, hence the same keep-sets in
// the engine; the checkpoint's config.json fills the policy's defaults; a checkpoint for another
// model is one error; every hostile file is refused by the CLI with exit 2 and one line, and its
// payload never runs; the released-checkpoint registry maps base models to gates.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/formats/torch_checkpoint.h"
#include "engine/policies/checkpoints.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;
using test::fixture;

std::string pth(const std::string& rel) { return fixture("pth/" + rel); }

using test::error_of;

void expect_same_tensors(const GateWeights& a, const GateWeights& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  ASSERT_FALSE(a.tensors.empty());
  for (const auto& [name, t] : a.tensors) {
    SCOPED_TRACE(name);
    const GateTensor* u = b.find(name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(t.shape, u->shape);
    ASSERT_EQ(t.data.size(), u->data.size());
    for (size_t i = 0; i < t.data.size(); ++i) ASSERT_EQ(t.data[i], u->data[i]) << "element " << i;
  }
}

TEST(TorchCheckpoint, TorchSavedFilesGiveTheSafetensorsTensors) {
  const GateSource trim{"trimkv", "gates", "trimkv_weights.pth", true};
  const GateSource wg{"wgkv", "gates", "", false};
  // The released TRIM-KV layout (a directory: trimkv_weights.pth + config.json), bf16.
  expect_same_tensors(GateWeights::load(pth("trimkv_bf16"), trim),
                      GateWeights::load(pth("trimkv_bf16.safetensors"), trim));
  // A module's state_dict() (OrderedDict + _metadata), f32, biases as views of one storage.
  expect_same_tensors(GateWeights::load(pth("trimkv_f32.pth"), trim),
                      GateWeights::load(pth("trimkv_f32.safetensors"), trim));
  // WG-KV's release: a dict of nn.Parameter, f32 and bf16.
  expect_same_tensors(GateWeights::load(pth("wgkv_f32.pt"), wg), GateWeights::load(pth("wgkv_f32.safetensors"), wg));
  expect_same_tensors(GateWeights::load(pth("wgkv_bf16.pt"), wg), GateWeights::load(pth("wgkv_bf16.safetensors"), wg));
}

TEST(TorchCheckpoint, NestedListsOfStateDictsReadUnderDottedNames) {
  // torch.save({"module": [FastKVzipGate(l).state_dict() for l in layers]}) by kvpress's own gate
  // module (tools/gen_pth_fixtures.py): the names safetensors gets from flattening it.
  const TorchCheckpoint ck = read_torch_checkpoint(pth("fastkvzip_bf16.pt"));
  std::vector<std::string> names;
  for (const auto& [name, t] : ck.tensors) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"module.0.k_base", "module.0.b", "module.0.q_proj.weight", "module.0.q_proj.bias",
                                      "module.0.k_proj.weight", "module.0.q_norm.weight", "module.0.k_norm.weight",
                                      "module.1.k_base", "module.1.b", "module.1.q_proj.weight", "module.1.q_proj.bias",
                                      "module.1.k_proj.weight", "module.1.q_norm.weight", "module.1.k_norm.weight"}));
  const GateSource fast{"fastkvzip", "gates", "", false};
  expect_same_tensors(GateWeights::load(pth("fastkvzip_bf16.pt"), fast),
                      GateWeights::load(pth("fastkvzip_bf16.safetensors"), fast));
}

TEST(TorchCheckpoint, StorageOffsetsDtypesAndConfig) {
  const TorchCheckpoint ck = read_torch_checkpoint(pth("trimkv_f32.pth"));
  const TorchTensor* b0 = nullptr;
  const TorchTensor* b1 = nullptr;
  for (const auto& [name, t] : ck.tensors) {
    EXPECT_EQ(t.dtype, TorchDType::kF32) << name;
    if (name == "model.layers.0.self_attn.retention_gate.bias") b0 = &t;
    if (name == "model.layers.1.self_attn.retention_gate.bias") b1 = &t;
  }
  ASSERT_TRUE(b0 && b1);
  EXPECT_EQ(b0->storage, b1->storage);  // one storage, two views
  EXPECT_EQ(b0->byte_offset, 0u);
  EXPECT_EQ(b1->byte_offset, 2 * sizeof(float));
  EXPECT_EQ(b1->shape, std::vector<int64_t>{2});
  for (const auto& [name, t] : read_torch_checkpoint(pth("trimkv_bf16/trimkv_weights.pth")).tensors)
    EXPECT_EQ(t.dtype, TorchDType::kBF16) << name;
  const GateWeights w = GateWeights::load(pth("trimkv_bf16"), GateSource{"trimkv", "gates", "trimkv_weights.pth", true});
  EXPECT_EQ(w.config.value("memory_size", 0.0), 16.0);
  EXPECT_EQ(w.num_layers(), 2);
}

/// Per step, the cached positions of every (layer, kv_head): the keep-sets the policy produced.
std::vector<std::vector<int64_t>> keep_trace(const std::string& spec, int64_t budget, int steps = 60) {
  static std::shared_ptr<Model> m = Model::load_dir(fixture("models/tiny-qwen3"));
  Engine e(m, {}, make_policy(PolicySpec::parse(spec, budget)));
  std::vector<std::vector<int64_t>> trace;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    std::vector<int64_t> row;
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int h = 0; h < kv.config().num_kv_heads; ++h) {
        row.push_back(-1);  // separator
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) row.push_back(kv.position(s, l, h, i));
      }
    trace.push_back(std::move(row));
  };
  GenerationRequest r;
  r.prompt = {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59};
  r.max_new_tokens = steps;
  e.generate({r}, nullptr);
  return trace;
}

TEST(TorchCheckpoint, PthGatesGiveTheSafetensorsKeepSets) {
  struct Pair {
    std::string policy, a, b;
    int64_t budget;
  };
  const std::vector<Pair> pairs = {
      {"trimkv:buffer=4,gates=", pth("trimkv_bf16"), pth("trimkv_bf16.safetensors"), 8},
      {"trimkv:buffer=4,gates=", pth("trimkv_f32.pth"), pth("trimkv_f32.safetensors"), 8},
      {"wgkv:window=4,gates=", pth("wgkv_f32.pt"), pth("wgkv_f32.safetensors"), 0},
      {"wgkv:window=4,gates=", pth("wgkv_bf16.pt"), pth("wgkv_bf16.safetensors"), 0},
      // The published Fast-KVzip layout, {"module": [layer state dicts]}, read as it is.
      {"fastkvzip:ratio=0.5,gates=", pth("fastkvzip_bf16.pt"), pth("fastkvzip_bf16.safetensors"), 0},
  };
  for (const auto& p : pairs) {
    SCOPED_TRACE(p.policy + p.a);
    const auto ta = keep_trace(p.policy + p.a, p.budget);
    const auto tb = keep_trace(p.policy + p.b, p.budget);
    EXPECT_EQ(ta, tb);
    // The gates decide: random gates of the same shapes keep other tokens (so this test can fail).
    const std::string rnd = p.policy.substr(0, p.policy.find("gates=")) + "random_gates=5";
    EXPECT_NE(ta, keep_trace(rnd, p.budget));
    // Something was evicted: the keep-sets are not the full cache.
    EXPECT_LT(ta.back().size(), 4 * (21 + 60u));
  }
}

TEST(TorchCheckpoint, CheckpointConfigFillsDefaultsUnlessGiven) {
  auto resolved = [](const std::string& spec, int64_t budget) {
    return make_policy(PolicySpec::parse(spec, budget))->resolved_params();
  };
  const std::string dir = pth("trimkv_bf16");
  nlohmann::json r = resolved("trimkv:gates=" + dir, 0);
  EXPECT_EQ(r["buffer"], 8) << r.dump();   // config.json buffer_size
  EXPECT_EQ(r["budget"], 16) << r.dump();  // config.json memory_size (16.0), no budget given
  r = resolved("trimkv:buffer=3,gates=" + dir, 64);
  EXPECT_EQ(r["buffer"], 3) << r.dump();
  EXPECT_EQ(r["budget"], 64) << r.dump();
  // Without a config.json the policy's own defaults stand.
  r = resolved("trimkv:gates=" + pth("trimkv_bf16.safetensors"), 64);
  EXPECT_EQ(r["buffer"], 128) << r.dump();
}

TEST(TorchCheckpoint, ACheckpointForAnotherModelIsOneError) {
  // tiny-llama3 has head_dim 24; the gates' config.json says 32.
  auto m = Model::load_dir(fixture("models/tiny-llama3"));
  const std::string dir = pth("trimkv_bf16");
  Engine e(m, {}, make_policy(PolicySpec::parse("trimkv:gates=" + dir, 8)));
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 2;
  const std::string err = error_of([&] { e.generate({r}, nullptr); });
  EXPECT_EQ(err, dir +
                     "/config.json: head_dim: the gates were trained for kvbench/tiny-qwen3 with head_dim = 32; "
                     "this model has 24");
  // No config: the layers the tensors cover are checked (gates of one layer on a 2-layer model).
  GateWeights one = GateWeights::load(pth("trimkv_f32.safetensors"), GateSource{"trimkv", "gates", "", false});
  for (auto it = one.tensors.begin(); it != one.tensors.end();)
    it = it->first.rfind("model.layers.1.", 0) == 0 ? one.tensors.erase(it) : std::next(it);
  const std::string path =
      (fs::temp_directory_path() / ("kvb_one_layer_" + std::to_string(getpid()) + ".safetensors")).string();
  save_gate_weights(one, path);
  Engine e2(Model::load_dir(fixture("models/tiny-qwen3")), {}, make_policy(PolicySpec::parse("trimkv:gates=" + path, 8)));
  EXPECT_EQ(error_of([&] { e2.generate({r}, nullptr); }),
            path + ": tensors: the gates cover 1 decoder layers; this model has 2 (gates for another model?)");
  fs::remove(path);
}

TEST(TorchCheckpoint, HostileFilesAreRefusedWithExitTwoAndOneLine) {
  struct Case {
    std::string file, says;
  };
  const std::vector<Case> cases = {
      {"evil_os_system.pth", "global posix.system is not allowed"},
      {"evil_eval.pth", "global builtins.eval is not allowed"},
      {"evil_reduce_storage.pth", "REDUCE of torch.FloatStorage"},
      {"evil_oversized.pth", "bytes, but the pickle declares"},
      {"evil_outside.pth", "lie outside storage"},
      {"evil_overlap.pth", "overlap partially"},
      {"evil_truncated.pth", "not a readable ZIP archive"},
      {"evil_truncated_pickle.pth", "truncated pickle"},
      {"evil_noncontiguous.pth", "is not contiguous"},
      {"evil_bigendian.pth", "big-endian checkpoints are not supported"},
      {"evil_not_a_dict.pth", "the pickle holds a list, not a state dict"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string f = pth(c.file);
    ASSERT_TRUE(fs::exists(f));
    for (const std::string policy : {"trimkv", "wgkv"}) {
      auto [rc, out] = test::run_cli("policies --resolve '" + policy + ":gates=" + f + "' --budget 8");
      EXPECT_EQ(rc, 2) << out;
      EXPECT_EQ(out.rfind("kvbench: error: " + f + ": ", 0), 0u) << out;
      EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
      EXPECT_NE(out.find(c.says), std::string::npos) << out;
    }
  }
  // The payloads (touch /tmp/kvb_pwned_<name>) never ran.
  EXPECT_FALSE(fs::exists("/tmp/kvb_pwned_os_system"));
  EXPECT_FALSE(fs::exists("/tmp/kvb_pwned_eval"));
}

/// Hand-written pickles for the unpickler's bounds (what the fuzzer explores at random).
TEST(TorchCheckpoint, UnpicklerRefusesMalformedStreams) {
  auto err = [](const std::string& p) {
    return error_of([&] { parse_torch_state_dict_pickle(p, "f.pth", "archive/data.pkl"); });
  };
  using namespace std::string_literals;
  EXPECT_EQ(err("\x80\x02}."s), "(no kvb::Error)");  // an empty state dict is fine
  EXPECT_NE(err("").find("byte 0: truncated pickle"), std::string::npos);
  EXPECT_NE(err("\x80\x02"s).find("truncated pickle"), std::string::npos);
  EXPECT_NE(err("\x80\x02s."s).find("stack underflow"), std::string::npos);
  EXPECT_NE(err("\x80\x02}q\x00X\x01\x00\x00\x00"
                "ah\x00s."s)
                .find("a dict may not contain itself"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}h\x07."s).find("memo entry 7 was never stored"), std::string::npos);
  EXPECT_NE(err("\x80\x02}(X\xff\xff\xff\x7f"s).find("truncated pickle"), std::string::npos);
  EXPECT_NE(err("\x80\x02}(u(."s).find("STOP with an open MARK"), std::string::npos);
  EXPECT_NE(err("\x80\x02]."s).find("the pickle holds a list, not a state dict"), std::string::npos);
  // Lists inside the dict: only tensors at the leaves, no list inside itself, no container read
  // twice, at most 16 levels.
  EXPECT_NE(err("\x80\x02}X\x01\x00\x00\x00"
                "a]K\x05"
                "as."s)
                .find("entry 'a.0' is a int, not a tensor"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}X\x01\x00\x00\x00"
                "a]q\x00h\x00"
                "as."s)
                .find("a list may not contain itself"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}X\x01\x00\x00\x00"
                "a]q\x00sX\x01\x00\x00\x00"
                "bh\x00s."s)
                .find("entry 'b' is a dict or list already read above"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}X\x01\x00\x00\x00"
                "a"s +
                std::string(18, ']') + std::string(17, 'a') + "s."s)
                .find("nested deeper than 16 levels"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}K\x01"
                "a."s)
                .find("APPEND(S) on a dict, not a list"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}(K\x01K\x02u."s).find("dict key is a int"), std::string::npos);
  EXPECT_NE(err("\x80\x02"
                "cos\nsystem\n."s)
                .find("byte 2: global os.system is not allowed"),
            std::string::npos);
  EXPECT_NE(err("\x80\x02}}."s).find("STOP with 2 objects"), std::string::npos);
  EXPECT_NE(err("\x80\x09}."s).find("pickle protocol 9"), std::string::npos);
  // A persistent id that is not a storage tuple.
  EXPECT_NE(err("\x80\x02}X\x01\x00\x00\x00"
                "aX\x01\x00\x00\x00"
                "bQs."s)
                .find("not a 5-tuple"),
            std::string::npos);
}

TEST(TorchCheckpoint, HubIdsNeedTheCliFetcherAndSpecsAreParsed) {
  EXPECT_TRUE(is_hub_gate_spec("ngocbh/TrimKV-Qwen3-4B-Math"));
  EXPECT_TRUE(is_hub_gate_spec("WG-KV/checkpoints/qwen3-4b-instruct-2507-0.16.pt"));
  EXPECT_TRUE(is_hub_gate_spec("ngocbh/TrimKV-Qwen3-4B-Math@0123abc"));
  EXPECT_FALSE(is_hub_gate_spec("/abs/path.pth"));
  EXPECT_FALSE(is_hub_gate_spec("./rel.pth"));
  EXPECT_FALSE(is_hub_gate_spec("org/../etc/passwd"));
  EXPECT_FALSE(is_hub_gate_spec("nofolder.pth"));
  std::vector<std::string> asked;
  set_hub_file_fetcher([&](const std::string& repo, const std::string& rev, const std::string& path) -> std::string {
    asked.push_back(repo + "@" + rev + ":" + path);
    return path == "config.json" ? pth("trimkv_bf16/config.json") : pth("trimkv_bf16/trimkv_weights.pth");
  });
  const GateWeights w =
      GateWeights::load("ngocbh/TrimKV-Qwen3-4B-Math@abc", GateSource{"trimkv", "gates", "trimkv_weights.pth", true});
  EXPECT_EQ(asked, (std::vector<std::string>{"ngocbh/TrimKV-Qwen3-4B-Math@abc:trimkv_weights.pth",
                                             "ngocbh/TrimKV-Qwen3-4B-Math@abc:config.json"}));
  EXPECT_EQ(w.config.value("buffer_size", 0), 8);
  EXPECT_NE(error_of([] {
              GateWeights::load("WG-KV/checkpoints", GateSource{"wgkv", "gates", "", false});
            }).find("name the checkpoint file"),
            std::string::npos);
  set_hub_file_fetcher(nullptr);
  EXPECT_NE(error_of([] {
              GateWeights::load("ngocbh/TrimKV-Qwen3-4B-Math", GateSource{"trimkv", "gates", "", false});
            }).find("cannot download"),
            std::string::npos);
}

TEST(ReleasedCheckpoints, BaseModelsMapToTheirGates) {
  const KnownCheckpoint* c = default_checkpoint("trimkv", "Qwen/Qwen3-4B");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weights, "ngocbh/TrimKV-Qwen3-4B-Math");
  c = default_checkpoint("trimkv", "qwen/qwen3-4b@main");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weights, "ngocbh/TrimKV-Qwen3-4B-Math");
  c = default_checkpoint("trimkv", "/home/u/.cache/huggingface/hub/models--Qwen--Qwen3-4B-Instruct-2507/snapshots/abc/");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weights, "ngocbh/TrimKV-Qwen3-4B-Instruct-2507");
  c = default_checkpoint("wgkv", "meta-llama/Llama-3.1-8B-Instruct");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weights, "WG-KV/checkpoints/llama-3.1-8b-instruct-0.16.pt");
  EXPECT_EQ(default_checkpoint("trimkv", "smollm2-135m-instruct"), nullptr);
  EXPECT_EQ(default_checkpoint("trimkv", "HuggingFaceTB/SmolLM2-135M-Instruct"), nullptr);
  EXPECT_EQ(default_checkpoint("snapkv", "Qwen/Qwen3-4B"), nullptr);
  EXPECT_EQ(default_checkpoint("trimkv", fixture("models/tiny-qwen3")), nullptr);
  // Every entry is a policy whose registry entry needs learned weights, and a Hub id.
  for (const auto& k : known_checkpoints()) {
    bool learned = false;
    for (const auto& info : policy_registry())
      if (info.name == k.policy) learned = info.learned.has_value();
    EXPECT_TRUE(learned) << k.policy;
    EXPECT_TRUE(is_hub_gate_spec(k.weights)) << k.weights;
  }
}

}  // namespace
}  // namespace kvb
