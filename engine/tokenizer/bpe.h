// Byte-pair-encoding model of Hugging Face `tokenizers` (tokenizer.json `"model": {"type":
// "BPE"}`): merge-rank BPE over the characters of one pre-tokenized word, with optional
// byte fallback ("<0xAB>" tokens, SentencePiece style), unknown-token fusion and
// `ignore_merges` (Llama-3). Follows tokenizers/src/models/bpe/{model,word}.rs: the lowest
// merge rank is applied first, ties broken by the leftmost position (priority queue over a
// linked list of symbols, O(n log n) per word). Results of words up to 256 bytes are cached.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::tok {

/// Transparent string hash so maps keyed by std::string can be probed with string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
/// token string -> id map with heterogeneous lookup.
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

/// The BPE model. Immutable after construction except for its internal (thread-safe) cache.
class BpeModel {
 public:
  /// Builds from the tokenizer.json `model` object. Throws kvb::Error("<origin>: model.<field>:
  /// ...") for a missing/ill-typed vocab, malformed merges, merges naming tokens absent from the
  /// vocab, or an unk_token absent from the vocab.
  BpeModel(const nlohmann::json& model, const std::string& origin);

  /// Appends the ids of one pre-tokenized `word` (UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  /// Vocabulary lookup.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The vocabulary entries, as (token, id).
  const VocabMap& vocab() const { return vocab_; }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  VocabMap vocab_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xAB>" per byte, -1 when absent

  // Word cache, sharded to keep lock contention low under multi-threaded encode.
  static constexpr size_t kShards = 16, kShardCapacity = 8192, kMaxCachedWordBytes = 256;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::unique_ptr<Shard[]> cache_;
};

}  // namespace kvb::tok
