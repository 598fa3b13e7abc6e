"""Train a two-layer graph transformer for node classification, forward and backward by hand.

Each node attends to its graph neighbours with scaled dot-product attention (as PyG's
TransformerConv or a sparse-attention transformer layer), through cupy_csrattn's fused
graph_attention:

    h0 = x @ W_in + b_in                                       (N, D)
    layer l:  q, k, v = h @ Wq, h @ Wk, h @ Wv                 (N, H, D/H) each
              att[d] = sum_{s in N(d)} softmax_s(<q[d], k[s]> / sqrt(D/H)) v[s]
                     = ca.graph_attention(graph, q, k, v)
              h = elu(h + concat_heads(att) @ Wo + bo)         (the residual is optional)
    logits = h @ W_cls + b_cls

Every gradient is written out: the linear maps, ELU, the residual, and the attention
through ca.graph_attention_backward (which recomputes the softmax from the forward's
log-sum-exp). The loss is softmax cross-entropy, the optimizer a hand-written Adam. The
script checks the manual backward against finite differences, trains the transformer and
a features-only MLP the same way, and prints both accuracies.

Data: a contextual stochastic block model by default, or a real graph from a Matrix
Market file (--mtx) with synthetic graph-aligned classes and noisy class features (see
gat_train.py and _common.py).

    python3 examples/transformer_train.py
    python3 examples/transformer_train.py --mtx graph.mtx --no-residual

The code is written against an array module ``xp``: NumPy on the CPU backend, CuPy on a
GPU.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (examples/_common.py: data, Linear, ELU, Adam, training loop)

import cupy_csrattn as ca  # noqa: E402


class GraphTransformerLayer:
    """Multi-head neighbourhood attention + output projection (+ residual), then ELU."""

    def __init__(self, params, name, dim, heads, rng, dtype, xp, residual=True):
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.heads, self.residual, self.xp = heads, residual, xp
        self.q = _common.Linear(params, name + ".q", dim, dim, rng, dtype, xp, bias=False)
        self.k = _common.Linear(params, name + ".k", dim, dim, rng, dtype, xp, bias=False)
        self.v = _common.Linear(params, name + ".v", dim, dim, rng, dtype, xp, bias=False)
        self.o = _common.Linear(params, name + ".o", dim, dim, rng, dtype, xp)

    def forward(self, graph, h):
        n = h.shape[0]
        split = (n, self.heads, -1)  # (N, D) -> (N, H, D/H)
        q = self.q.forward(h).reshape(split)
        k = self.k.forward(h).reshape(split)
        v = self.v.forward(h).reshape(split)
        att, lse = ca.graph_attention(graph, q, k, v, return_lse=True)  # (N, H, D/H), (N, H)
        pre = self.o.forward(att.reshape(n, -1))
        if self.residual:
            pre = pre + h
        self.saved = (graph, q, k, v, att, lse, pre)
        return _common.elu(pre, self.xp)

    def backward(self, grad_y, grads):
        """Gradient of h; adds the q, k, v, o parameter gradients to grads."""
        graph, q, k, v, att, lse, pre = self.saved
        n = grad_y.shape[0]
        grad_pre = _common.elu_backward(pre, grad_y, self.xp)
        grad_att = self.o.backward(grad_pre, grads).reshape(att.shape)
        grad_q, grad_k, grad_v = ca.graph_attention_backward(graph, q, k, v, att, grad_att, lse)
        grad_h = (
            self.q.backward(grad_q.reshape(n, -1), grads)
            + self.k.backward(grad_k.reshape(n, -1), grads)
            + self.v.backward(grad_v.reshape(n, -1), grads)
        )
        if self.residual:
            grad_h = grad_h + grad_pre
        return grad_h


class GraphTransformer:
    """Input projection, ``num_layers`` graph transformer layers, linear classifier."""

    def __init__(
        self,
        graph,
        in_features,
        num_classes,
        *,
        dim=32,
        heads=4,
        num_layers=2,
        residual=True,
        rng,
        dtype=np.float32,
        xp=np,
    ):
        self.graph, self.xp, self.params = graph, xp, {}
        self.embed = _common.Linear(self.params, "embed", in_features, dim, rng, dtype, xp)
        self.layers = [
            GraphTransformerLayer(self.params, f"layer{i + 1}", dim, heads, rng, dtype, xp, residual=residual)
            for i in range(num_layers)
        ]
        self.classify = _common.Linear(self.params, "classify", dim, num_classes, rng, dtype, xp)

    def forward(self, x):
        h = self.embed.forward(x)
        for layer in self.layers:
            h = layer.forward(self.graph, h)
        return self.classify.forward(h)

    def backward(self, grad_logits):
        grads = {}
        grad_h = self.classify.backward(grad_logits, grads)
        for layer in reversed(self.layers):
            grad_h = layer.backward(grad_h, grads)
        self.embed.backward(grad_h, grads)
        return grads


def check_gradients(seed=0, num_nodes=60, residual=True, verbose=True):
    """Finite-difference check of GraphTransformer.backward on a small float64 SBM; returns
    the max relative error."""
    data = _common.sbm_data(num_nodes, 3, degree=4, num_features=5, seed=seed)
    model = GraphTransformer(
        data.graph, 5, 3, dim=8, heads=2, residual=residual, rng=np.random.default_rng(seed), dtype=np.float64
    )
    x = data.features.astype(np.float64)
    worst, per_param = _common.gradient_check(model, x, data.labels, data.train_idx, seed=seed)
    if verbose:
        print(
            f"gradient check (float64, central differences, residual={residual}): max relative error "
            + ", ".join(f"{k} {v:.1e}" for k, v in per_param.items())
        )
    return worst


def main(argv=None):
    parser = _common.argument_parser(__doc__)
    _common.add_training_arguments(parser)
    parser.add_argument("--dim", type=_common.int_at_least(1), default=32, help="model width D, a multiple of --heads")
    parser.add_argument("--layers", type=_common.int_at_least(1), default=2, help="transformer layers")
    parser.add_argument("--no-residual", action="store_true", help="drop the residual connections")
    args = parser.parse_args(argv)
    if args.dim % args.heads:
        parser.error(f"--dim {args.dim} must be a multiple of --heads {args.heads} (each head gets --dim / --heads)")
    data = _common.load_data(parser, args)

    return _common.run_training(
        args,
        data,
        "transformer",
        lambda: check_gradients(args.seed, residual=not args.no_residual),
        lambda graph, in_features, num_classes, xp: GraphTransformer(
            graph,
            in_features,
            num_classes,
            dim=args.dim,
            heads=args.heads,
            num_layers=args.layers,
            residual=not args.no_residual,
            rng=np.random.default_rng(args.seed),
            xp=xp,
        ),
        baseline_hidden=args.dim,
    )


if __name__ == "__main__":
    main()
