"""Deliberately naive float64 reference for every op of cupy_csrattn.

Plain Python loops over destination rows, heads and edges (NumPy only for one
feature vector at a time); every input is upcast to float64 first. It shares no
strategy with the package (no segment reductions, no sparse products), so it checks
the CPU backend as well as the GPU kernels. Keep graphs small.

Shapes follow the public API: edge arrays (E, *S), node arrays (N, *S, F), per-node
scalars (N, *S), for any trailing shape S (none, (H,), (2, 3), ...), which the loops see as
prod(S) heads. Row d holds the edges indptr[d]:indptr[d+1]; edge e goes from source
indices[e] to destination d.
Semantics (from the contract): softmax subtracts the row max; an empty row gives
zero output and lse -inf; a row whose scores are all -inf gives zero weights and
lse -inf, and adds nothing to any gradient (as a row without edges), whatever its values and
grad_out hold (0 * inf would be NaN); a NaN score makes its whole row and head NaN; a +inf
score makes its row and head NaN (as scipy.special.softmax), its lse included. Sums of
terms holding both +inf and -inf are NaN, as IEEE addition gives (math.fsum would raise).
"""

import math

import numpy as np

NEG_INF = -math.inf


# ------------------------------------------------------------------ layout helpers


def _f64(a):
    return np.array(a, dtype=np.float64)  # always a copy


def _edge(a):
    """(E, *S) -> (E, H), H = prod(S) (1 for (E,)). Returns (float64 copy, S)."""
    a = _f64(a)
    return a.reshape(a.shape[0], math.prod(a.shape[1:])), a.shape[1:]


def _node_vec(a):
    """(N, *S, F) -> (N, H, F). Returns (float64 copy, S)."""
    a = _f64(a)
    return a.reshape(a.shape[0], math.prod(a.shape[1:-1]), a.shape[-1]), a.shape[1:-1]


def _node_scalar(a):
    """(N, *S) -> (N, H). Returns (float64 copy, S)."""
    return _edge(a)


def _unflatten(a, heads):
    """(N, H, ...) -> (N, *S, ...): the inverse of the flattening above."""
    return a.reshape(a.shape[0], *heads, *a.shape[2:])


def _rows(indptr):
    bounds = [int(x) for x in indptr]
    return [(d, bounds[d], bounds[d + 1]) for d in range(len(bounds) - 1)]


def _ints(indices):
    return [int(s) for s in indices]


def _fsum(terms):
    """math.fsum, or the IEEE sum (NaN) where the terms hold +inf and -inf (fsum raises)."""
    terms = list(terms)
    try:
        return math.fsum(terms)
    except (ValueError, OverflowError):
        return float(sum(terms))


def softmax_row(scores):
    """Softmax and log-sum-exp of one row's scores for one head, as Python floats."""
    scores = [float(x) for x in scores]
    if not scores:
        return [], NEG_INF
    if any(math.isnan(x) for x in scores):
        return [math.nan] * len(scores), math.nan
    top = max(scores)
    if top == NEG_INF:
        return [0.0] * len(scores), NEG_INF
    if top == math.inf:
        return [math.nan] * len(scores), math.nan
    exps = [math.exp(x - top) for x in scores]
    total = _fsum(exps)
    return [x / total for x in exps], top + math.log(total)


def leaky_relu(z, negative_slope):
    return z if z > 0 else negative_slope * z


def leaky_relu_grad(z, negative_slope):
    return 1.0 if z > 0 else negative_slope  # z == 0 uses the slope


# ------------------------------------------------------------------ softmax


def _groups(indptr, indices, norm_by):
    """The edges each softmax normalizes over, in edge order: each destination row's
    ("dst"), or the edges leaving each source ("src", sources in increasing order)."""
    if norm_by == "dst":
        return [list(range(start, stop)) for _, start, stop in _rows(indptr)]
    by_source = {}
    for e, s in enumerate(_ints(indices)):
        by_source.setdefault(s, []).append(e)
    return [by_source[s] for s in sorted(by_source)]


def edge_softmax(indptr, scores, indices=None, norm_by="dst"):
    """-> (probs like scores, lse (N,) or (N, H) per destination; None for norm_by="src")."""
    s, heads = _edge(scores)
    probs = np.zeros_like(s)
    lse = np.full((len(indptr) - 1, s.shape[1]), NEG_INF)
    for d, edges in enumerate(_groups(indptr, indices, norm_by)):
        for h in range(s.shape[1]):
            p, group_lse = softmax_row(s[edges, h])
            for j, e in enumerate(edges):
                probs[e, h] = p[j]
            if norm_by == "dst":
                lse[d, h] = group_lse
    return _unflatten(probs, heads), (_unflatten(lse, heads) if norm_by == "dst" else None)


def edge_softmax_backward(indptr, probs, grad_probs, indices=None, norm_by="dst"):
    """grad_scores[e] = p[e] * (g[e] - sum_group p * g), the groups of edge_softmax. A zero p
    adds nothing (its gradient is 0, its g enters no sum), so a group of zero weights, all its
    scores -inf, has zero gradient whatever grad_probs holds."""
    p, heads = _edge(probs)
    g, _ = _edge(grad_probs)
    grad = np.zeros_like(p)
    for edges in _groups(indptr, indices, norm_by):
        for h in range(p.shape[1]):
            weighed = [e for e in edges if p[e, h] != 0]
            dot = _fsum(p[e, h] * g[e, h] for e in weighed)
            for e in weighed:
                grad[e, h] = p[e, h] * (g[e, h] - dot)
    return _unflatten(grad, heads)


# ------------------------------------------------------------------ spmm


def spmm(indptr, indices, weights, values):
    """out[d] = sum over row d's edges e of weights[e] * values[src(e)]; weights None -> 1."""
    v, heads = _node_vec(values)
    src = _ints(indices)
    w = np.ones((len(src), v.shape[1])) if weights is None else _edge(weights)[0]
    out = np.zeros((len(indptr) - 1, v.shape[1], v.shape[2]))
    for d, start, stop in _rows(indptr):
        for h in range(v.shape[1]):
            acc = np.zeros(v.shape[2])
            for e in range(start, stop):
                acc += w[e, h] * v[src[e], h]
            out[d, h] = acc
    return _unflatten(out, heads)


def spmm_backward(indptr, indices, weights, values, grad_out):
    """-> (grad_weights or None when weights is None, grad_values)."""
    v, heads = _node_vec(values)
    go, _ = _node_vec(grad_out)
    src = _ints(indices)
    w = np.ones((len(src), v.shape[1])) if weights is None else _edge(weights)[0]
    grad_w = np.zeros((len(src), v.shape[1]))
    grad_v = np.zeros_like(v)
    for d, start, stop in _rows(indptr):
        for h in range(v.shape[1]):
            for e in range(start, stop):
                grad_w[e, h] = float(np.dot(go[d, h], v[src[e], h]))
                grad_v[src[e], h] += w[e, h] * go[d, h]
    grad_weights = None if weights is None else _unflatten(grad_w, _edge(weights)[1])
    return grad_weights, _unflatten(grad_v, heads)


# ------------------------------------------------------------------ sddmm


def _sddmm_operands(dst_feat, src_feat, op):
    """(dst, src, heads): (N, H, D) vectors for "dot", (N, H) scalars for "add"."""
    node = _node_vec if op == "dot" else _node_scalar
    a, heads = node(dst_feat)
    b, _ = node(src_feat)
    return a, b, heads


def sddmm(indptr, indices, dst_feat, src_feat, op="dot", scale=1.0):
    """ "dot": scale * <dst[d], src[s]>; "add": dst[d] + src[s]. -> (E,) or (E, H)."""
    src = _ints(indices)
    a, b, heads = _sddmm_operands(dst_feat, src_feat, op)
    out = np.zeros((len(src), a.shape[1]))
    for d, start, stop in _rows(indptr):
        for h in range(a.shape[1]):
            for e in range(start, stop):
                if op == "dot":
                    out[e, h] = scale * _fsum(a[d, h] * b[src[e], h])
                else:
                    out[e, h] = a[d, h] + b[src[e], h]
    return _unflatten(out, heads)


def sddmm_backward(indptr, indices, dst_feat, src_feat, grad_scores, op="dot", scale=1.0, skip=None):
    """-> (grad_dst_feat, grad_src_feat); the edges and heads of the (E, H) bool ``skip`` add nothing."""
    src = _ints(indices)
    a, b, heads = _sddmm_operands(dst_feat, src_feat, op)
    g, _ = _edge(grad_scores)
    grad_a = np.zeros_like(a)
    grad_b = np.zeros_like(b)
    for d, start, stop in _rows(indptr):
        for h in range(a.shape[1]):
            for e in range(start, stop):
                if skip is not None and skip[e, h]:
                    continue
                if op == "dot":
                    grad_a[d, h] += scale * g[e, h] * b[src[e], h]
                    grad_b[src[e], h] += scale * g[e, h] * a[d, h]
                else:
                    grad_a[d, h] += g[e, h]
                    grad_b[src[e], h] += g[e, h]
    return _unflatten(grad_a, heads), _unflatten(grad_b, heads)


# ------------------------------------------------------------------ fused attention


def attention_aggregate(indptr, indices, scores, values):
    """-> (out (N,[H,]F), lse (N,[H])): per row, softmax over its edges, then the weighted sum."""
    s, _ = _edge(scores)
    v, heads = _node_vec(values)
    src = _ints(indices)
    out = np.zeros((len(indptr) - 1, v.shape[1], v.shape[2]))
    lse = np.full((len(indptr) - 1, v.shape[1]), NEG_INF)
    for d, start, stop in _rows(indptr):
        for h in range(v.shape[1]):
            p, lse[d, h] = softmax_row(s[start:stop, h])
            if lse[d, h] == NEG_INF:
                continue  # no weight (no edges, or scores all -inf): zero output, whatever the values
            acc = np.zeros(v.shape[2])
            for j, e in enumerate(range(start, stop)):
                acc += p[j] * v[src[e], h]
            out[d, h] = acc
    return _unflatten(out, heads), _unflatten(lse, heads)


def attention_aggregate_backward(indptr, indices, scores, values, grad_out):
    """-> (grad_scores, grad_values)."""
    s, s_heads = _edge(scores)
    v, heads = _node_vec(values)
    go, _ = _node_vec(grad_out)
    src = _ints(indices)
    grad_s = np.zeros_like(s)
    grad_v = np.zeros_like(v)
    for d, start, stop in _rows(indptr):
        for h in range(v.shape[1]):
            p, row_lse = softmax_row(s[start:stop, h])
            if row_lse == NEG_INF:
                continue  # no weight: adds nothing, whatever the values and grad_out
            grad_p = [float(np.dot(go[d, h], v[src[e], h])) for e in range(start, stop)]
            dot = _fsum(pj * gj for pj, gj in zip(p, grad_p))
            for j, e in enumerate(range(start, stop)):
                grad_s[e, h] = p[j] * (grad_p[j] - dot)
                grad_v[src[e], h] += p[j] * go[d, h]
    return _unflatten(grad_s, s_heads), _unflatten(grad_v, heads)


def _weightless(indptr, scores):
    """(E, H) bool: the edges of the rows and heads without weight (lse -inf)."""
    s, _ = _edge(scores)
    skip = np.zeros(s.shape, dtype=bool)
    for _, start, stop in _rows(indptr):
        skip[start:stop] = [softmax_row(s[start:stop, h])[1] == NEG_INF for h in range(s.shape[1])]
    return skip


def _default_scale(q, scale):  # 1 / sqrt(D); 1 for D = 0, as the op takes it (every score is 0)
    return scale if scale is not None else 1.0 / math.sqrt(np.shape(q)[-1] or 1)


def _per_edge(indices, node, edge_feat):
    """node[src(e)] + edge_feat[e] for every edge e, (E, *S, D) float64 (edge_feat None: 0)."""
    rows = _f64(node)[_ints(indices)]
    return rows if edge_feat is None else rows + _f64(edge_feat)


def _source_sums(indices, per_edge, num_src):
    """(num_src, ...): for each source, the sum of per_edge over its edges, one edge at a time."""
    total = np.zeros((num_src, *per_edge.shape[1:]))
    for e, s in enumerate(_ints(indices)):
        total[s] += per_edge[e]
    return total


# graph_attention gives each edge its own key k[s] + edge_feat[e] and value v[s] + edge_feat[e]:
# the ops above then run on the graph whose edge e reads source e of those per-edge arrays.


def graph_attention(indptr, indices, q, k, v, scale=None, edge_feat=None):
    """softmax_e(scale * <q[d], k[s] + edge_feat[e]>) weighting v[s] + edge_feat[e] -> (out, lse)."""
    each = np.arange(len(indices))
    keys, values = _per_edge(indices, k, edge_feat), _per_edge(indices, v, edge_feat)
    scores = sddmm(indptr, each, q, keys, "dot", _default_scale(q, scale))
    return attention_aggregate(indptr, each, scores, values)


def graph_attention_backward(indptr, indices, q, k, v, grad_out, scale=None, edge_feat=None):
    """-> (grad_q, grad_k, grad_v), and grad_edge_feat when edge_feat is given; recomputes the
    forward from q, k, v."""
    scale = _default_scale(q, scale)
    each = np.arange(len(indices))
    keys, values = _per_edge(indices, k, edge_feat), _per_edge(indices, v, edge_feat)
    scores = sddmm(indptr, each, q, keys, "dot", scale)
    grad_scores, grad_values = attention_aggregate_backward(indptr, each, scores, values, grad_out)
    skip = _weightless(indptr, scores)  # rows without weight add nothing (q or a key is infinite there)
    grad_q, grad_keys = sddmm_backward(indptr, each, q, keys, grad_scores, "dot", scale, skip)
    grads = grad_q, _source_sums(indices, grad_keys, len(k)), _source_sums(indices, grad_values, len(v))
    return grads if edge_feat is None else (*grads, grad_keys + grad_values)


def _gat_scores(indptr, indices, a_dst, a_src, negative_slope, edge_score):
    z, heads = _edge(sddmm(indptr, indices, a_dst, a_src, "add"))
    if edge_score is not None:
        z += _edge(edge_score)[0]
    scores = np.array([[leaky_relu(x, negative_slope) for x in row] for row in z]).reshape(z.shape)
    return z, _unflatten(scores, heads)


def gat_attention(indptr, indices, a_dst, a_src, values, negative_slope=0.2, edge_score=None):
    """softmax_e(leaky_relu(a_dst[d] + a_src[s] + edge_score[e])) weighting values[s] -> (out, lse)."""
    _, scores = _gat_scores(indptr, indices, a_dst, a_src, negative_slope, edge_score)
    return attention_aggregate(indptr, indices, scores, values)


def gat_attention_backward(indptr, indices, a_dst, a_src, values, grad_out, negative_slope=0.2, edge_score=None):
    """-> (grad_a_dst, grad_a_src, grad_values), and grad_edge_score when edge_score is given."""
    z, scores = _gat_scores(indptr, indices, a_dst, a_src, negative_slope, edge_score)
    grad_scores, grad_values = attention_aggregate_backward(indptr, indices, scores, values, grad_out)
    g, heads = _edge(grad_scores)
    grad_z = np.zeros_like(g)
    for e in range(g.shape[0]):
        for h in range(g.shape[1]):
            grad_z[e, h] = g[e, h] * leaky_relu_grad(z[e, h], negative_slope)
    grad_z = _unflatten(grad_z, heads)
    grad_a_dst, grad_a_src = sddmm_backward(indptr, indices, a_dst, a_src, grad_z, "add")
    grads = grad_a_dst, grad_a_src, grad_values
    return grads if edge_score is None else (*grads, grad_z)


def _gatv2_operands(x_dst, x_src, att):
    """(x_dst, x_src as (N, H, D), att as (H, D), the trailing shape S)."""
    xd, heads = _node_vec(x_dst)
    xs, _ = _node_vec(x_src)
    return xd, xs, _f64(att).reshape(xd.shape[1], xd.shape[2]), heads


def _gatv2_scores(indptr, indices, xd, xs, a, negative_slope):
    """(E, H) scores sum_k att[h, k] * leaky_relu(x_dst[d, h, k] + x_src[s, h, k])."""
    src = _ints(indices)
    scores = np.zeros((len(src), xd.shape[1]))
    for d, start, stop in _rows(indptr):
        for h in range(xd.shape[1]):
            for e in range(start, stop):
                z = xd[d, h] + xs[src[e], h]
                scores[e, h] = _fsum(a[h, k] * leaky_relu(z[k], negative_slope) for k in range(len(z)))
    return scores


def gatv2_attention(indptr, indices, x_dst, x_src, att, negative_slope=0.2):
    """softmax_e(sum_k att[k] * leaky_relu(x_dst[d] + x_src[s])[k]) weighting x_src[s] -> (out, lse)."""
    xd, xs, a, heads = _gatv2_operands(x_dst, x_src, att)
    scores = _gatv2_scores(indptr, indices, xd, xs, a, negative_slope)
    out, lse = attention_aggregate(indptr, indices, scores, xs)
    return _unflatten(out, heads), _unflatten(lse, heads)


def gatv2_attention_backward(indptr, indices, x_dst, x_src, att, grad_out, negative_slope=0.2):
    """-> (grad_x_dst, grad_x_src, grad_att); recomputes the forward."""
    xd, xs, a, heads = _gatv2_operands(x_dst, x_src, att)
    go, _ = _node_vec(grad_out)
    scores = _gatv2_scores(indptr, indices, xd, xs, a, negative_slope)
    grad_scores, grad_xs = attention_aggregate_backward(indptr, indices, scores, xs, go)
    grad_xd = np.zeros_like(xd)
    grad_a = np.zeros_like(a)
    src = _ints(indices)
    skip = _weightless(indptr, scores)  # rows without weight add nothing (leaky_relu(z) is -inf there)
    for d, start, stop in _rows(indptr):
        for h in range(xd.shape[1]):
            for e in range(start, stop):
                if skip[e, h]:
                    continue
                z = xd[d, h] + xs[src[e], h]
                for k in range(len(z)):
                    grad_z = grad_scores[e, h] * a[h, k] * leaky_relu_grad(z[k], negative_slope)
                    grad_xd[d, h, k] += grad_z
                    grad_xs[src[e], h, k] += grad_z
                    grad_a[h, k] += grad_scores[e, h] * leaky_relu(z[k], negative_slope)
    return _unflatten(grad_xd, heads), _unflatten(grad_xs, heads), grad_a.reshape(np.shape(att))
