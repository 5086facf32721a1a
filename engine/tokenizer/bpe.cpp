// BPE model; see bpe.h.
#include "engine/tokenizer/bpe.h"

#include <algorithm>

#include "engine/tokenizer/unicode.h"
#include "engine/util/error.h"

namespace kvb::tok {

using nlohmann::json;

BpeModel::BpeModel(const json& model, const std::string& origin) : cache_(new Shard[kShards]) {
  if (!model.contains("vocab")) fail_at(origin, "model.vocab", "missing (a BPE model needs a vocabulary)");
  const json& vocab = model["vocab"];
  if (!vocab.is_object()) fail_at(origin, "model.vocab", "must be an object of token -> id, got {}", vocab.type_name());
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      fail_at(origin, "model.vocab", "token {:?} has a non-integer or out-of-range id {}", it.key(), it.value().dump());
    vocab_[it.key()] = it.value().get<int32_t>();
  }

  auto opt_string = [&](const char* key) -> std::optional<std::string> {
    if (!model.contains(key) || model[key].is_null()) return std::nullopt;
    if (!model[key].is_string()) fail_at(origin, std::string("model.") + key, "must be a string or null");
    return model[key].get<std::string>();
  };
  auto opt_bool = [&](const char* key) {
    if (!model.contains(key) || model[key].is_null()) return false;
    if (!model[key].is_boolean()) fail_at(origin, std::string("model.") + key, "must be a boolean");
    return model[key].get<bool>();
  };
  continuing_subword_prefix_ = opt_string("continuing_subword_prefix").value_or("");
  end_of_word_suffix_ = opt_string("end_of_word_suffix").value_or("");
  fuse_unk_ = opt_bool("fuse_unk");
  byte_fallback_ = opt_bool("byte_fallback");
  ignore_merges_ = opt_bool("ignore_merges");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
    fail_at(origin, "model.dropout", "BPE dropout is not supported (encoding must be deterministic)");
  if (auto unk = opt_string("unk_token")) {
    auto it = vocab_.find(*unk);
    if (it == vocab_.end()) fail_at(origin, "model.unk_token", "{:?} is not in the vocabulary", *unk);
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  if (!model.contains("merges") || model["merges"].is_null()) return;  // a BPE without merges
  const json& merges = model["merges"];
  if (!merges.is_array()) fail_at(origin, "model.merges", "must be an array, got {}", merges.type_name());
  merges_.reserve(merges.size() * 2);
  const size_t prefix_len = continuing_subword_prefix_.size();
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = fmt::format("model.merges[{}]", i);
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail_at(origin, field, "{:?} is not two tokens separated by one space", s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail_at(origin, field, "must be \"a b\" or [\"a\", \"b\"], got {}", m.dump());
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end()) fail_at(origin, field, "token {:?} is not in the vocabulary", a);
    if (ib == vocab_.end()) fail_at(origin, field, "token {:?} is not in the vocabulary", b);
    std::string merged = a;
    merged.append(b, std::min(prefix_len, b.size()), std::string::npos);
    auto im = vocab_.find(merged);
    if (im == vocab_.end()) fail_at(origin, field, "merged token {:?} is not in the vocabulary", merged);
    merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(i), im->second};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  Shard& shard = cache_[std::hash<std::string_view>{}(word) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    if (auto it = shard.map.find(word); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + start, out.end()));
}

// tokenizers/src/models/bpe/model.rs merge_word + word.rs merge_all.
void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  thread_local std::string piece;
  syms.clear();
  heap.clear();

  auto add = [&](int32_t id) {
    const int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({id, idx - 1, idx + 1, true});
  };
  int32_t pending_unk = -1;  // unk id awaiting emission (fused runs); -1 = none
  for (size_t i = 0; i < word.size();) {
    size_t len;
    uni::decode_utf8(word, i, &len);
    const bool is_first = i == 0, is_last = i + len == word.size();
    std::string_view ch = word.substr(i, len);
    std::string_view key = ch;
    if ((!is_first && !continuing_subword_prefix_.empty()) || (is_last && !end_of_word_suffix_.empty())) {
      piece.clear();
      if (!is_first) piece += continuing_subword_prefix_;
      piece += ch;
      if (is_last) piece += end_of_word_suffix_;
      key = piece;
    }
    i += len;
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : key) all &= byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {  // like HF, a pending unk is not flushed before the byte tokens
        for (char c : key) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  if (syms.empty()) return;
  syms.back().next = -1;

  // Max-heap on priority: lower rank first, then lower position.
  auto lower_priority = [](const Cand& x, const Cand& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
  auto push = [&](int32_t pos, int32_t left, int32_t right) {
    auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, it->second.new_id});
    std::push_heap(heap.begin(), heap.end(), lower_priority);
  };
  for (size_t k = 0; k + 1 < syms.size(); ++k) push(static_cast<int32_t>(k), syms[k].id, syms[k + 1].id);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const Cand top = heap.back();
    heap.pop_back();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    Sym& right = syms[next_pos];
    auto it = merges_.find(pair_key(cur.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale candidate
    cur.id = top.new_id;
    cur.next = right.next;
    right.alive = false;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev, syms[cur.prev].id, cur.id);
    if (cur.next >= 0) push(top.pos, cur.id, syms[cur.next].id);
  }
  for (const Sym& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace kvb::tok
