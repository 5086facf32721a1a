// CudaBackend's policy primitives (cuda_impl.h PolicyScratch): LayerStep::head_mlp (cuBLAS SGEMM +
// kernels.h mlp_out), window_attention and window_scores (window_attention / window_logits, GQA
// reductions and pooling on the device; only the L − w scores come back), and the per-layer policy
// hook of an eager step. The policies' decisions stay on the host (NOTES.md "Why top-k stays on the
// host").
#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/util/error.h"

namespace kvb {

using cuda::check;
using cuda::check_blas;
using cuda::cublas;
using cuda::DevMlp;

namespace {

/// Copies rows [row0, row0 + n) of the device f32 matrix `src` (rows of `width` floats) into `dst`
/// (resized to n · width), waits for the copy, and returns dst.data().
const float* copy_rows(std::vector<float>& dst, const float* src, int64_t row0, int n, int width, cudaStream_t stream,
                       const char* what) {
  dst.resize(static_cast<size_t>(n) * width);
  check(cudaMemcpyAsync(dst.data(), src + static_cast<size_t>(row0) * width, dst.size() * 4, cudaMemcpyDeviceToHost,
                        stream),
        what);
  check(cudaStreamSynchronize(stream), what);
  return dst.data();
}

}  // namespace

const DevMlp& CudaBackend::Impl::device_mlp(const HeadMlp& m) {
  const int h1 = m.shared_hidden ? 1 : m.heads;
  const float probe[4] = {m.w1[0], m.b1[0], m.w2[0], m.b2[0]};
  auto it = pol.mlps.find(m.w1);
  if (it != pol.mlps.end()) {
    const DevMlp& d = it->second;
    if (d.heads == m.heads && d.in == m.in && d.hidden == m.hidden && d.shared == m.shared_hidden &&
        std::memcmp(d.probe, probe, sizeof probe) == 0)
      return d;
    pol.mlps.erase(it);
  }
  DevMlp& d = pol.mlps[m.w1];
  d.heads = m.heads;
  d.in = m.in;
  d.hidden = m.hidden;
  d.shared = m.shared_hidden;
  std::memcpy(d.probe, probe, sizeof probe);
  d.w1.upload(m.w1, static_cast<size_t>(h1) * m.hidden * m.in, stream, "policy MLP W1");
  d.b1.upload(m.b1, static_cast<size_t>(h1) * m.hidden, stream, "policy MLP b1");
  d.w2.upload(m.w2, static_cast<size_t>(m.heads) * m.hidden, stream, "policy MLP W2");
  d.b2.upload(m.b2, static_cast<size_t>(m.heads), stream, "policy MLP b2");
  check(cudaStreamSynchronize(stream), "policy MLP upload");  // the host arrays may change after
  return d;
}

void CudaBackend::Impl::head_mlp(const HeadMlp& m, const float* x, int rows, int head, float* out, int64_t xrow0) {
  if (rows <= 0) return;
  const DevMlp& d = device_mlp(m);
  const int hid_heads = (head >= 0 || m.shared_hidden) ? 1 : m.heads;  // input and hidden head count
  const size_t xn_count = static_cast<size_t>(rows) * hid_heads * m.in;
  pol.mlp_x.grow(xn_count, "policy MLP input");
  if (x) {
    check(cudaMemcpyAsync(pol.mlp_x.p, x, xn_count * 4, cudaMemcpyHostToDevice, stream), "policy MLP input");
  } else {
    if (m.in != H) fail("head_mlp: input width {} != hidden size {}", m.in, H);
    cuda::bf16_to_f32(acts.xn.p + xrow0 * H, pol.mlp_x.p, xn_count, stream);
  }
  pol.mlp_hid.grow(static_cast<size_t>(rows) * hid_heads * m.hidden, "policy MLP hidden");
  const float one = 1.0f, zero = 0.0f;
  if (hid_heads == 1) {
    const float* w1 = d.w1.p + (head >= 0 ? static_cast<size_t>(head) * m.hidden * m.in : 0);
    check_blas(cublas().sgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m.hidden, rows, m.in, &one, w1, m.in, pol.mlp_x.p, m.in,
                              &zero, pol.mlp_hid.p, m.hidden),
               "policy MLP sgemm");
  } else {
    check_blas(cublas().sgemm_strided_batched(blas, CUBLAS_OP_T, CUBLAS_OP_N, m.hidden, rows, m.in, &one, d.w1.p, m.in,
                                              static_cast<long long>(m.hidden) * m.in, pol.mlp_x.p, m.heads * m.in,
                                              m.in, &zero, pol.mlp_hid.p, m.heads * m.hidden, m.hidden, m.heads),
               "policy MLP sgemm (batched over heads)");
  }
  const int out_heads = head >= 0 ? 1 : m.heads;
  pol.mlp_o.grow(static_cast<size_t>(rows) * out_heads, "policy MLP output");
  cuda::mlp_out(pol.mlp_hid.p, rows, hid_heads, m.heads, m.hidden, d.b1.p, d.w2.p, d.b2.p, m.shared_hidden, head,
                m.act == HeadMlp::Act::kSilu ? 0 : 1, pol.mlp_o.p, stream);
  check(cudaMemcpyAsync(out, pol.mlp_o.p, static_cast<size_t>(rows) * out_heads * 4, cudaMemcpyDeviceToHost, stream),
        "policy MLP output");
  check(cudaStreamSynchronize(stream), "policy MLP");
}

int CudaBackend::Impl::stage_window(const QueryHistory& qh, SeqId seq, int l, int h) {
  const int wq = qh.count[l];
  std::vector<float> qs(static_cast<size_t>(G) * wq * D);
  std::vector<int32_t> qp(static_cast<size_t>(G) * wq);
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < wq; ++j) {
      const int slot = (qh.head[l] - wq + j + qh.window) % qh.window;
      std::memcpy(&qs[(static_cast<size_t>(g) * wq + j) * D],
                  &qh.q[l][(static_cast<size_t>(slot) * Hq + h * G + g) * D], sizeof(float) * D);
      qp[static_cast<size_t>(g) * wq + j] = qh.pos[l][slot];
    }
  pol.win_q.upload(qs, stream, "window queries");
  pol.win_qpos.upload(qp, stream, "window queries");
  pol.win_pages.upload(cache.pages(seq, l, h), stream, "window pages");
  check(cudaStreamSynchronize(stream), "window queries");  // qs/qp are freed on return
  return wq;
}

std::vector<float> CudaBackend::Impl::window_scores(const QueryHistory& qh, SeqId seq, int l, int h,
                                                    const WindowScoreSpec& sp, int* w_out) {
  const int wq = stage_window(qh, seq, l, h);
  const int32_t Lh = cache.length(seq, l, h);
  *w_out = wq;
  const int32_t n = Lh - wq;
  if (n <= 0 || wq <= 0) return {};
  const int R = G * wq;
  pol.win_p.grow(static_cast<size_t>(R) * Lh, "window attention");
  pol.win_s.grow(n, "window scores");
  if (sp.gqa == scoring::Gqa::kMaxLogits) {
    // No window or soft-cap here: the CPU backend computes R-KV's max-logits reduction with the
    // host scoring::window_logits, which applies neither (NOTES.md, "Issue 30").
    cuda::window_logits(pol.win_q.p, pol.win_qpos.p, R, pol.win_pages.p, Lh, P, D, scale, 0, 0.0f, pool.k.p, pool.pos.p,
                        pol.win_p.p, stream);
    pol.win_r.grow(static_cast<size_t>(wq) * n, "window scores");
    cuda::gqa_max_rows(pol.win_p.p, G, wq, Lh, n, pol.win_r.p, stream);
    cuda::softmax_rows(pol.win_r.p, wq, n, stream);
    cuda::window_col_reduce(pol.win_r.p, n, 1, wq, n, 0, pol.win_s.p, stream);
  } else {
    cuda::window_attention(pol.win_q.p, pol.win_qpos.p, R, pol.win_pages.p, Lh, P, D, scale, wts.layers[l].window,
                           attn_softcap, pool.k.p, pool.pos.p, pol.win_p.p, stream);
    cuda::window_col_reduce(pol.win_p.p, Lh, G, wq, n, sp.gqa == scoring::Gqa::kMax ? 0 : 1, pol.win_s.p, stream);
  }
  const float* res = pol.win_s.p;
  if (sp.pool != scoring::Pool::kNone && sp.kernel > 1) {
    pol.win_s2.grow(n, "window scores");
    cuda::pool1d(pol.win_s.p, n, sp.kernel, sp.pool == scoring::Pool::kMax ? 1 : 2, pol.win_s2.p, stream);
    res = pol.win_s2.p;
  }
  std::vector<float> out(n);
  check(cudaMemcpyAsync(out.data(), res, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, stream), "window scores");
  check(cudaStreamSynchronize(stream), "window scores");
  return out;
}

void CudaBackend::Impl::policy_layer(Step& step, int l, const std::vector<std::vector<float>>& colsum_h) {
  using clock = std::chrono::steady_clock;
  check(cudaStreamSynchronize(stream), "layer");
  const auto tp = clock::now();
  for (int b = 0; b < step.B; ++b) {
    step.evicted += policy_layer_item(step, l, b, colsum_h);
    flush_compaction(step.csrc_h, step.cdst_h);
  }
  step.policy_s += std::chrono::duration<double>(clock::now() - tp).count();
}

int64_t CudaBackend::Impl::policy_layer_item(Step& step, int l, int b, const std::vector<std::vector<float>>& colsum_h) {
  const PolicyNeeds& needs = step.needs;
  const std::vector<int32_t>& row0 = step.row0;
  const ForwardItem& it = step.items[b];
  std::vector<float> wq_buf;
  LayerStep st = policy_driver::layer_step(cache, it, l, step.dims, wq_buf);
  std::vector<float> li, kp, qp, res;
  if (needs.layer_input && !needs.layer_input_via_mlp) {
    std::vector<uint16_t> bits(static_cast<size_t>(it.n) * H);
    check(cudaMemcpyAsync(bits.data(), acts.xn.p + static_cast<size_t>(row0[b]) * H, bits.size() * 2,
                          cudaMemcpyDeviceToHost, stream),
          "layer input");
    check(cudaStreamSynchronize(stream), "layer input");
    li.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) li[i] = bf16_bits_to_f32(bits[i]);
    st.layer_input = li.data();
  }
  if (needs.layer_residual)  // DMS: the f32 residual stream, before this layer's output projection adds to it
    st.layer_residual = copy_rows(res, acts.x.p, row0[b], it.n, H, stream, "layer residual");
  if (needs.keys_pre_rope)
    st.keys_pre_rope = copy_rows(kp, acts.kpre.p, row0[b], it.n, Hkv * D, stream, "keys before RoPE");
  if (needs.queries_pre_rope)  // LocRet's retaining heads, Expected Attention's query statistics
    st.queries_pre_rope = copy_rows(qp, acts.qpre.p, row0[b], it.n, Hq * D, stream, "queries before RoPE");
  if (needs.out_proj)  // CriticalKV: the host Model's W_o, which the device copy was uploaded from
    st.out_proj_head = policy_driver::out_proj_head(m.layers()[l].wo, Hq, D);
  std::vector<std::vector<float>> cs_item;
  if (needs.attention_colsum) {
    cs_item.assign(colsum_h.begin() + static_cast<size_t>(b) * Hkv, colsum_h.begin() + static_cast<size_t>(b + 1) * Hkv);
    st.attention_colsum = &cs_item;
  }
  QueryHistory* qh = it.history;
  st.window_attention = policy_driver::memo_window_attention(qh, Hkv, [&, qh, l](int h, std::vector<float>& o) {
    const int wq = stage_window(*qh, st.seq, l, h);
    const int32_t Lh = cache.length(st.seq, l, h);
    pol.win_p.grow(std::max<size_t>(static_cast<size_t>(G) * wq * Lh, 1), "window attention");
    cuda::window_attention(pol.win_q.p, pol.win_qpos.p, G * wq, pol.win_pages.p, Lh, P, D, scale, wts.layers[l].window,
                           attn_softcap, pool.k.p, pool.pos.p, pol.win_p.p, stream);
    o.resize(static_cast<size_t>(G) * wq * Lh);
    if (!o.empty())
      check(cudaMemcpyAsync(o.data(), pol.win_p.p, o.size() * 4, cudaMemcpyDeviceToHost, stream), "window attention");
    check(cudaStreamSynchronize(stream), "window attention");
    return wq;
  });
  st.window_scores = [&, qh, l](int h, const WindowScoreSpec& sp, int* w_out) -> std::vector<float> {
    if (!qh || qh->q.empty()) fail("policy asked for window scores without declaring window_queries");
    if (h < 0 || h >= Hkv) fail("window_scores: kv head {} of {}", h, Hkv);
    return window_scores(*qh, st.seq, l, h, sp, w_out);
  };
  const int64_t xrow0 = row0[b];
  st.head_mlp = [&, xrow0](const HeadMlp& mm, const float* xx, int rows, int head, float* o) {
    head_mlp(mm, xx, rows, head, o, xrow0);
  };
  return policy_driver::run_layer(*step.policy, st, step.compact_fn, step.write_fn);
}

}  // namespace kvb
