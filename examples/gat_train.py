"""Train a two-layer multi-head GAT for node classification, forward and backward by hand.

The model (Velickovic et al., "Graph Attention Networks", 2018), in plain array math plus
cupy_csrattn's fused GAT attention:

    layer l:  z = x @ W                      (N, H, F)   one projection per head
              s_src = <z, a_src>, s_dst = <z, a_dst>   (N, H)  per-node attention scalars
              out[d] = sum_{s in N(d)} softmax_s(leaky_relu(s_dst[d] + s_src[s])) z[s]
                                              = ca.gat_attention(graph, s_dst, s_src, z)
    hidden = elu(concat_heads(layer 1) + b1)
    logits = mean_heads(layer 2) + b2

Every gradient is written out: the linear maps, ELU, the attention through
ca.gat_attention_backward (which recomputes the softmax from the forward's log-sum-exp
instead of storing one weight per edge), and the products with a_src / a_dst. The loss is
softmax cross-entropy, the optimizer a hand-written Adam. The script checks the manual
backward against finite differences, trains the GAT and a features-only MLP the same way,
and prints both accuracies.

Data: a contextual stochastic block model (noisy class features, homophilous edges) by
default, or a real graph from a Matrix Market file (--mtx) with synthetic classes that
follow the graph (a Voronoi partition around random seed nodes) and features = class mean
+ noise.

    python3 examples/gat_train.py                        # SBM, 3000 nodes
    python3 examples/gat_train.py --mtx graph.mtx        # a real graph
    python3 examples/gat_train.py --device gpu --epochs 300

The code is written against an array module ``xp``: NumPy on the CPU backend, CuPy on a
GPU.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (examples/_common.py: data, Linear, ELU, Adam, training loop)

import cupy_csrattn as ca  # noqa: E402

NEGATIVE_SLOPE = 0.2


class GATLayer:
    """One multi-head GAT attention layer (no bias, no activation: the model adds them)."""

    def __init__(self, params, name, in_features, heads, features, rng, dtype, xp):
        self.params, self.name, self.heads, self.xp = params, name, heads, xp
        params[name + ".W"] = _common.glorot(rng, (in_features, heads * features), dtype, xp)
        params[name + ".a_src"] = _common.glorot(rng, (heads, features), dtype, xp)
        params[name + ".a_dst"] = _common.glorot(rng, (heads, features), dtype, xp)

    def forward(self, graph, x):
        """(N, in_features) -> (N, H, F)."""
        p, n = self.params, self.name
        z = (x @ p[n + ".W"]).reshape(x.shape[0], self.heads, -1)  # (N, H, F)
        s_src = (z * p[n + ".a_src"]).sum(axis=2)  # (N, H)
        s_dst = (z * p[n + ".a_dst"]).sum(axis=2)  # (N, H)
        out, lse = ca.gat_attention(graph, s_dst, s_src, z, negative_slope=NEGATIVE_SLOPE, return_lse=True)
        self.saved = (graph, x, z, s_src, s_dst, out, lse)
        return out

    def backward(self, grad_out, grads):
        """grad_out (N, H, F) -> gradient of x; adds W, a_src, a_dst gradients to grads."""
        p, n, xp = self.params, self.name, self.xp
        graph, x, z, s_src, s_dst, out, lse = self.saved
        grad_s_dst, grad_s_src, grad_z = ca.gat_attention_backward(
            graph, s_dst, s_src, z, out, grad_out, lse, negative_slope=NEGATIVE_SLOPE
        )
        # s_src[n, h] = sum_f z[n, h, f] a_src[h, f], and the same for s_dst.
        grads[n + ".a_src"] = xp.einsum("nh,nhf->hf", grad_s_src, z)
        grads[n + ".a_dst"] = xp.einsum("nh,nhf->hf", grad_s_dst, z)
        grad_z = grad_z + grad_s_src[:, :, None] * p[n + ".a_src"] + grad_s_dst[:, :, None] * p[n + ".a_dst"]
        grad_z = grad_z.reshape(x.shape[0], -1)
        grads[n + ".W"] = x.T @ grad_z
        return grad_z @ p[n + ".W"].T


class GAT:
    """Two GAT layers: heads concatenated and ELU after the first, heads averaged after the second."""

    def __init__(
        self, graph, in_features, num_classes, *, hidden=8, heads=4, out_heads=2, rng, dtype=np.float32, xp=np
    ):
        self.graph, self.xp, self.params = graph, xp, {}
        self.layer1 = GATLayer(self.params, "gat1", in_features, heads, hidden, rng, dtype, xp)
        self.layer2 = GATLayer(self.params, "gat2", heads * hidden, out_heads, num_classes, rng, dtype, xp)
        self.params["gat1.b"] = xp.zeros(heads * hidden, dtype=dtype)
        self.params["gat2.b"] = xp.zeros(num_classes, dtype=dtype)

    def forward(self, x):
        xp, n = self.xp, x.shape[0]
        self.pre = self.layer1.forward(self.graph, x).reshape(n, -1) + self.params["gat1.b"]  # concat
        hidden = _common.elu(self.pre, xp)
        return self.layer2.forward(self.graph, hidden).mean(axis=1) + self.params["gat2.b"]  # mean

    def backward(self, grad_logits):
        xp, grads = self.xp, {}
        grads["gat2.b"] = grad_logits.sum(axis=0)
        heads = self.layer2.heads
        grad_out2 = xp.repeat(grad_logits[:, None, :] / heads, heads, axis=1)  # mean over heads
        grad_hidden = self.layer2.backward(grad_out2, grads)
        grad_pre = _common.elu_backward(self.pre, grad_hidden, xp)
        grads["gat1.b"] = grad_pre.sum(axis=0)
        self.layer1.backward(grad_pre.reshape(grad_pre.shape[0], self.layer1.heads, -1), grads)
        return grads


def check_gradients(seed=0, num_nodes=60, verbose=True):
    """Finite-difference check of GAT.backward on a small float64 SBM; returns the max relative error."""
    data = _common.sbm_data(num_nodes, 3, degree=4, num_features=5, seed=seed)
    rng = np.random.default_rng(seed)
    model = GAT(data.graph, 5, 3, hidden=3, heads=2, out_heads=2, rng=rng, dtype=np.float64)
    x = data.features.astype(np.float64)
    worst, per_param = _common.gradient_check(model, x, data.labels, data.train_idx, seed=seed)
    if verbose:
        print(
            "gradient check (float64, central differences): max relative error "
            + ", ".join(f"{k} {v:.1e}" for k, v in per_param.items())
        )
    return worst


def main(argv=None):
    parser = _common.argument_parser(__doc__)
    _common.add_training_arguments(parser)
    parser.add_argument("--hidden", type=_common.int_at_least(1), default=8, help="features per head in layer 1")
    args = parser.parse_args(argv)
    data = _common.load_data(parser, args)

    return _common.run_training(
        args,
        data,
        "GAT",
        lambda: check_gradients(args.seed),
        lambda graph, in_features, num_classes, xp: GAT(
            graph,
            in_features,
            num_classes,
            hidden=args.hidden,
            heads=args.heads,
            rng=np.random.default_rng(args.seed),
            xp=xp,
        ),
        baseline_hidden=args.hidden * args.heads,
    )


if __name__ == "__main__":
    main()
