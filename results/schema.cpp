#include "results/schema.h"

namespace kvb::results {

const std::vector<std::string>& migrations() {
  static const std::vector<std::string> m = {
      // v0 -> v1: the initial schema.
      R"SQL(
CREATE TABLE runs (
  run_id          INTEGER PRIMARY KEY,
  run_key         TEXT NOT NULL UNIQUE,
  name            TEXT NOT NULL DEFAULT '',
  kvbench_version TEXT NOT NULL,
  git_sha         TEXT NOT NULL,
  host            TEXT NOT NULL,
  backend         TEXT NOT NULL,
  device          TEXT NOT NULL,
  config_json     TEXT NOT NULL,
  started_at      TEXT NOT NULL,
  finished_at     TEXT
);
CREATE TABLE run_models (
  run_id         INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  model_id       TEXT NOT NULL,
  revision       TEXT NOT NULL,
  weights_sha256 TEXT NOT NULL,
  PRIMARY KEY (run_id, model_id)
);
CREATE TABLE run_datasets (
  run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  task   TEXT NOT NULL,
  source TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  PRIMARY KEY (run_id, task)
);
CREATE TABLE run_parts (
  part_id     INTEGER PRIMARY KEY,
  part_uid    TEXT NOT NULL UNIQUE,
  run_id      INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  shard_index INTEGER NOT NULL,
  shard_count INTEGER NOT NULL,
  host        TEXT NOT NULL,
  pid         INTEGER NOT NULL,
  started_at  TEXT NOT NULL,
  finished_at TEXT
);
CREATE TABLE work_items (
  item_key           TEXT PRIMARY KEY,
  model_id           TEXT NOT NULL,
  model_revision     TEXT NOT NULL,
  policy             TEXT NOT NULL,
  policy_params_json TEXT NOT NULL,
  policy_label       TEXT NOT NULL,
  budget             INTEGER NOT NULL,
  task               TEXT NOT NULL,
  example_id         TEXT NOT NULL,
  prompt_sha256      TEXT NOT NULL,
  sample_index       INTEGER NOT NULL,
  seed               INTEGER NOT NULL,
  sampling_json      TEXT NOT NULL
);
CREATE INDEX work_items_cell ON work_items (model_id, task, policy_label, budget);
CREATE TABLE generations (
  run_id            INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  item_key          TEXT NOT NULL REFERENCES work_items(item_key),
  text              TEXT NOT NULL,
  prompt_tokens     INTEGER NOT NULL,
  generated_tokens  INTEGER NOT NULL,
  finish_reason     TEXT NOT NULL,
  prefill_s         REAL NOT NULL,
  decode_s          REAL NOT NULL,
  ttft_s            REAL NOT NULL,
  evictions         INTEGER NOT NULL,
  kv_bytes_peak     INTEGER NOT NULL,
  kv_bytes_final    INTEGER NOT NULL,
  device_peak_bytes INTEGER NOT NULL,
  extra_json        TEXT NOT NULL DEFAULT '{}',
  created_at        TEXT NOT NULL,
  PRIMARY KEY (run_id, item_key)
);
CREATE TABLE grades (
  run_id      INTEGER NOT NULL,
  item_key    TEXT NOT NULL,
  score       REAL CHECK (score IS NULL OR (score >= 0 AND score <= 1)),
  extracted   TEXT NOT NULL DEFAULT '',
  pred_norm   TEXT NOT NULL DEFAULT '',
  gold_norm   TEXT NOT NULL DEFAULT '',
  reason      TEXT NOT NULL DEFAULT '',
  grader      TEXT NOT NULL DEFAULT '',
  ungraded    INTEGER NOT NULL DEFAULT 0 CHECK (ungraded IN (0, 1)),
  judge_key   TEXT,
  graded_at   TEXT NOT NULL,
  PRIMARY KEY (run_id, item_key),
  FOREIGN KEY (run_id, item_key) REFERENCES generations(run_id, item_key) ON DELETE CASCADE
);
CREATE TABLE judge_cache (
  judge_key   TEXT PRIMARY KEY,
  judge_model TEXT NOT NULL,
  request     TEXT NOT NULL,
  response    TEXT NOT NULL,
  score       REAL,
  created_at  TEXT NOT NULL
);
-- Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..1000 (filled by kvbench from
-- its own t quantile function); views fall back to the normal 1.959964 beyond df 1000.
CREATE TABLE t975 (df INTEGER PRIMARY KEY, t REAL NOT NULL);
)SQL",
      // v1 -> v2: the LLM-judge cache records which judge template a verdict used (judge_key
      // already hashes judge model + template + question + answer + prediction), and a partial
      // index finds the ungraded grades `kvbench grade --retry-failed` re-judges.
      R"SQL(
ALTER TABLE judge_cache ADD COLUMN template TEXT NOT NULL DEFAULT '';
CREATE INDEX grades_ungraded ON grades (run_id, item_key) WHERE ungraded = 1;
)SQL",
      // v2 -> v3: the K+V bytes a sequence's attention read per decode step (mean over its decode
      // steps, summed over layers and kv heads; read-selection policies such as Quest read less
      // than they hold). NULL in rows written before, and for sequences without a decode step.
      R"SQL(
ALTER TABLE generations ADD COLUMN kv_bytes_read_step REAL;
)SQL",
      // v3 -> v4 (issue 33): the steady KV footprint after compression (the most page bytes held
      // at the end of a step from the prompt end on) and the sequence's share of the decode
      // steps' wall time (aggregate decode throughput). NULL in rows written before. From v4 on
      // kv_bytes_peak counts a step's compressions at the step's end (chunk-independent).
      R"SQL(
ALTER TABLE generations ADD COLUMN kv_bytes_steady INTEGER;
ALTER TABLE generations ADD COLUMN decode_share_s REAL;
)SQL",
      // v4 -> v5 (issue 41): the realised KV tokens per (layer, kv_head) from the prompt end on —
      // their mean over the steps and the most one head held — because a budget_kind=threshold
      // policy has no fixed budget. NULL in rows written before. (A separate step: other columns
      // added concurrently go in steps of their own.)
      R"SQL(
ALTER TABLE generations ADD COLUMN kv_tokens_mean REAL;
ALTER TABLE generations ADD COLUMN kv_tokens_peak INTEGER;
)SQL",
      // v5 -> v6 (issue 40): the content of every file a run read — model weights, config,
      // tokenizer, chat template, dataset files — by SHA-256, so a resume or a merge never mixes
      // results of changed inputs. runs.inputs_sha256 digests the run's run_inputs rows; NULL
      // for runs stored before v6 (their inputs are unknown). file_hashes caches a file's hash
      // under its (path, device, inode, size, mtime, ctime), so an unchanged multi-GB model is
      // not read again on resume.
      R"SQL(
ALTER TABLE runs ADD COLUMN inputs_sha256 TEXT;
CREATE TABLE run_inputs (
  run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  role   TEXT NOT NULL,
  owner  TEXT NOT NULL,
  name   TEXT NOT NULL,
  path   TEXT NOT NULL,
  bytes  INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  PRIMARY KEY (run_id, owner, name)
);
CREATE TABLE file_hashes (
  path      TEXT PRIMARY KEY,
  dev       INTEGER NOT NULL,
  inode     INTEGER NOT NULL,
  bytes     INTEGER NOT NULL,
  mtime_ns  INTEGER NOT NULL,
  ctime_ns  INTEGER NOT NULL,
  sha256    TEXT NOT NULL,
  hashed_at TEXT NOT NULL
);
)SQL",
  };
  return m;
}

const std::string& views_sql() {
  static const std::string v = R"SQL(
DROP VIEW IF EXISTS v_samples;
DROP VIEW IF EXISTS v_items;
DROP VIEW IF EXISTS v_cells;
DROP VIEW IF EXISTS v_pass_at_k;
DROP VIEW IF EXISTS v_maj_at_k;

-- One row per stored generation, with its work item and grade. `score` is NULL when the
-- sample is not graded yet or the grader marked it ungraded; `correct` is score >= 1 (full
-- credit) for graded samples.
CREATE VIEW v_samples AS
SELECT g.run_id, w.item_key, w.model_id, w.model_revision, w.task, w.policy, w.policy_label,
       w.budget, w.example_id, w.sample_index, w.seed,
       g.prompt_tokens, g.generated_tokens, g.finish_reason, g.prefill_s, g.decode_s, g.ttft_s,
       g.evictions, g.kv_bytes_peak, g.kv_bytes_final, g.device_peak_bytes, g.kv_bytes_read_step,
       g.kv_bytes_steady, g.decode_share_s, g.kv_tokens_mean, g.kv_tokens_peak,
       CASE WHEN gr.ungraded = 0 THEN gr.score END AS score,
       CASE WHEN gr.ungraded = 0 AND gr.score IS NOT NULL
            THEN (gr.score >= 1.0 - 1e-9) END AS correct,
       gr.pred_norm, gr.extracted, gr.gold_norm, gr.grader,
       COALESCE(gr.ungraded, 0) AS ungraded, (gr.item_key IS NULL) AS not_graded
FROM generations g
JOIN work_items w ON w.item_key = g.item_key
LEFT JOIN grades gr ON gr.run_id = g.run_id AND gr.item_key = g.item_key;

-- One row per (cell, example): n graded samples, c correct ones, their mean score.
CREATE VIEW v_items AS
SELECT run_id, model_id, task, policy_label, budget, example_id,
       COUNT(score) AS n, SUM(correct) AS c, AVG(score) AS mean_score
FROM v_samples
GROUP BY run_id, model_id, task, policy_label, budget, example_id;

-- One row per cell (run, model, task, policy spec, budget).
--   pass1            mean over examples of the per-example mean score (= mean over samples
--                    when every example has the same number of samples)
--   pass1_lo/hi      95% Wilson score interval of pass1 over n = n_examples (examples are the
--                    independent units; z = 1.959963984540054, z^2 = 3.841458820694124); never
--                    outside [0, 1]; NULL with fewer than 2 graded examples
--   decode_tok_s     per-sequence decode rate: generated tokens / the seconds of the decode
--                    steps each sequence took part in, summed over the cell's sequences
--   decode_tok_s_agg aggregate decode rate: generated tokens / the decode steps' wall time
--                    (sum of decode_share_s; NULL when a row predates schema v4)
--   prefill_tok_s    per-sequence prefill rate: prompt tokens / prefill seconds (the seconds
--                    of the prefill steps each sequence took part in)
--   ttft_s_mean      mean time to first token (request start to first sampled token)
--   kv_bytes_*       per-sequence KV-cache bytes (mean of peaks, max of peaks, mean final)
--   kv_bytes_steady_mean  mean steady footprint after compression (NULL unless every row of the
--                    cell has one: rows from before schema v4 do not)
--   kv_tokens_mean   mean over sequences of the realised KV tokens per (layer, kv_head) (each
--                    sequence's mean over its steps from the prompt end on); kv_tokens_peak the
--                    most tokens one head held in any sequence of the cell. NULL unless every row
--                    has them (rows from before schema v5 do not)
--   evicted_frac     share of sequences where the policy evicted at least once
--   kv_bytes_read_step_mean  mean over sequences of the K+V bytes read per decode step (NULL when
--                    no sequence of the cell measured it: rows from before schema v3)
CREATE VIEW v_cells AS
WITH acc AS (
  SELECT run_id, model_id, task, policy_label, budget,
         COUNT(*) AS n_examples, SUM(n) AS n_graded, AVG(mean_score) AS pass1,
         CASE WHEN COUNT(*) > 1 THEN
           sqrt(max(0.0, (SUM(mean_score * mean_score) - COUNT(*) * AVG(mean_score) * AVG(mean_score))
                         / (COUNT(*) - 1))) END AS sd
  FROM v_items WHERE n > 0
  GROUP BY run_id, model_id, task, policy_label, budget
), perf AS (
  SELECT run_id, model_id, task, policy, policy_label, budget,
         COUNT(*) AS n_samples,
         SUM(ungraded) AS n_ungraded, SUM(not_graded) AS n_not_graded,
         SUM(generated_tokens) / NULLIF(SUM(decode_s), 0) AS decode_tok_s,
         SUM(prompt_tokens) / NULLIF(SUM(prefill_s), 0) AS prefill_tok_s,
         AVG(ttft_s) AS ttft_s_mean,
         AVG(generated_tokens) AS generated_tokens_mean,
         AVG(kv_bytes_peak) AS kv_bytes_peak_mean, MAX(kv_bytes_peak) AS kv_bytes_peak_max,
         AVG(kv_bytes_final) AS kv_bytes_final_mean, MAX(device_peak_bytes) AS device_peak_bytes,
         AVG(evictions) AS evictions_mean, AVG(evictions > 0) AS evicted_frac,
         AVG(finish_reason = 'length') AS truncated_frac,
         AVG(kv_bytes_read_step) AS kv_bytes_read_step_mean,
         CASE WHEN COUNT(decode_share_s) = COUNT(*)
              THEN SUM(generated_tokens) / NULLIF(SUM(decode_share_s), 0) END AS decode_tok_s_agg,
         CASE WHEN COUNT(kv_bytes_steady) = COUNT(*) THEN AVG(kv_bytes_steady) END AS kv_bytes_steady_mean,
         CASE WHEN COUNT(kv_tokens_mean) = COUNT(*) THEN AVG(kv_tokens_mean) END AS kv_tokens_mean,
         CASE WHEN COUNT(kv_tokens_peak) = COUNT(*) THEN MAX(kv_tokens_peak) END AS kv_tokens_peak
  FROM v_samples
  GROUP BY run_id, model_id, task, policy_label, budget
)
SELECT perf.run_id, perf.model_id, perf.task, perf.policy, perf.policy_label, perf.budget,
       perf.n_samples, acc.n_examples, acc.n_graded, perf.n_ungraded, perf.n_not_graded,
       acc.pass1,
       CASE WHEN acc.n_examples > 1 THEN max(0.0,
         (acc.pass1 + 3.841458820694124 / (2.0 * acc.n_examples)) / (1.0 + 3.841458820694124 / acc.n_examples)
         - 1.959963984540054 * sqrt(max(0.0, acc.pass1 * (1.0 - acc.pass1)) / acc.n_examples
                                    + 3.841458820694124 / (4.0 * acc.n_examples * acc.n_examples))
           / (1.0 + 3.841458820694124 / acc.n_examples)) END AS pass1_lo,
       CASE WHEN acc.n_examples > 1 THEN min(1.0,
         (acc.pass1 + 3.841458820694124 / (2.0 * acc.n_examples)) / (1.0 + 3.841458820694124 / acc.n_examples)
         + 1.959963984540054 * sqrt(max(0.0, acc.pass1 * (1.0 - acc.pass1)) / acc.n_examples
                                    + 3.841458820694124 / (4.0 * acc.n_examples * acc.n_examples))
           / (1.0 + 3.841458820694124 / acc.n_examples)) END AS pass1_hi,
       perf.decode_tok_s, perf.prefill_tok_s, perf.ttft_s_mean, perf.generated_tokens_mean,
       perf.kv_bytes_peak_mean, perf.kv_bytes_peak_max, perf.kv_bytes_final_mean,
       perf.device_peak_bytes, perf.evictions_mean, perf.evicted_frac, perf.truncated_frac,
       perf.kv_bytes_read_step_mean, perf.decode_tok_s_agg, perf.kv_bytes_steady_mean,
       perf.kv_tokens_mean, perf.kv_tokens_peak
FROM perf
LEFT JOIN acc USING (run_id, model_id, task, policy_label, budget);

-- Unbiased pass@k (Chen et al. 2021) per cell for k = 1, 2, 4, ... up to each example's n:
-- per example 1 - C(n-c,k)/C(n,k) = 1 - prod_{i=n-c+1..n} (1 - k/i), then the mean over the
-- examples that have at least k graded samples.
CREATE VIEW v_pass_at_k AS
WITH RECURSIVE ks(k) AS (SELECT 1 UNION ALL SELECT k * 2 FROM ks WHERE k < 512),
ik AS (
  SELECT i.run_id, i.model_id, i.task, i.policy_label, i.budget, i.example_id, i.n, i.c, ks.k
  FROM v_items i JOIN ks ON ks.k <= i.n
),
prod(run_id, model_id, task, policy_label, budget, example_id, n, k, i, p) AS (
  SELECT run_id, model_id, task, policy_label, budget, example_id, n, k, n - c + 1, 1.0
  FROM ik WHERE n - c >= k
  UNION ALL
  SELECT run_id, model_id, task, policy_label, budget, example_id, n, k, i + 1,
         p * (1.0 - CAST(k AS REAL) / i)
  FROM prod WHERE i <= n
),
per_item AS (
  SELECT run_id, model_id, task, policy_label, budget, example_id, k, 1.0 - p AS pass_k
  FROM prod WHERE i = n + 1
  UNION ALL
  SELECT run_id, model_id, task, policy_label, budget, example_id, k, 1.0
  FROM ik WHERE n - c < k
)
SELECT run_id, model_id, task, policy_label, budget, k,
       COUNT(*) AS n_examples, AVG(pass_k) AS pass_at_k
FROM per_item
GROUP BY run_id, model_id, task, policy_label, budget, k;

-- maj@k per cell for k = 1, 2, 4, ...: per example, the plurality normalised answer among the
-- first k graded samples (by sample index; ties -> the answer seen first) is correct when any
-- of those samples carrying it was graded correct; then the mean over examples with >= k.
CREATE VIEW v_maj_at_k AS
WITH RECURSIVE ks(k) AS (SELECT 1 UNION ALL SELECT k * 2 FROM ks WHERE k < 512),
s AS (
  SELECT run_id, model_id, task, policy_label, budget, example_id, sample_index,
         COALESCE(pred_norm, '') AS ans, correct,
         ROW_NUMBER() OVER (PARTITION BY run_id, model_id, task, policy_label, budget, example_id
                            ORDER BY sample_index) AS r,
         COUNT(*) OVER (PARTITION BY run_id, model_id, task, policy_label, budget, example_id) AS n
  FROM v_samples WHERE correct IS NOT NULL
),
votes AS (
  SELECT s.run_id, s.model_id, s.task, s.policy_label, s.budget, s.example_id, ks.k, s.ans,
         COUNT(*) AS votes, MIN(s.r) AS first_r, MAX(s.correct) AS ans_correct
  FROM s JOIN ks ON ks.k <= s.n AND s.r <= ks.k
  GROUP BY s.run_id, s.model_id, s.task, s.policy_label, s.budget, s.example_id, ks.k, s.ans
),
ranked AS (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY run_id, model_id, task, policy_label, budget,
                                            example_id, k
                               ORDER BY votes DESC, first_r ASC) AS pos
  FROM votes
)
SELECT run_id, model_id, task, policy_label, budget, k,
       COUNT(*) AS n_examples, AVG(ans_correct) AS maj_at_k
FROM ranked WHERE pos = 1
GROUP BY run_id, model_id, task, policy_label, budget, k;
)SQL";
  return v;
}

}  // namespace kvb::results
