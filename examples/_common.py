"""Helpers shared by gat_train.py and transformer_train.py.

Everything here is plain array math written against an array module ``xp`` (NumPy on the
CPU backend, CuPy on a GPU), so that one code path serves both:

- choosing the backend (``select_backend``),
- the data: a contextual stochastic block model and a Matrix Market graph with synthetic
  class-dependent features (``sbm_data``, ``mtx_data``),
- the layers without attention: ``Linear`` and ``elu`` with their backward passes,
- softmax cross-entropy, a hand-written ``Adam``, the features-only ``MLP`` baseline,
- the training loop (``train``) and a finite-difference check of the manual backward
  (``gradient_check``),
- the command line: the shared options, each checked as it is parsed
  (``add_training_arguments``), the data they ask for, checked before anything is trained
  (``load_data``: a bad value is one error line naming the option, exit status 2), and the
  main program (``run_training``).

A model here is any object with a dict ``params`` of arrays, ``forward(x) -> logits``
(which keeps what its backward needs) and ``backward(grad_logits) -> grads`` (a dict with
the keys of ``params``).
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

import cupy_csrattn as ca
from cupy_csrattn import backend, datasets

# ---------------------------------------------------------------------------------------
# Backend


def select_backend(device):
    """The array module to train with: numpy or cupy.

    device: "cpu", "gpu" or "auto" (the GPU when CuPy finds a usable one: the library's
    probe, cupy_csrattn.backend.gpu_status()).
    """
    if device == "cpu":
        print("backend: NumPy on the CPU (--device cpu)")
        return np
    usable, reason = backend.gpu_status()
    if not usable:  # no CuPy, no driver, no device, or a device that cannot compute
        if device == "gpu":
            sys.exit(f"--device gpu: {reason}")
        print(f"backend: NumPy on the CPU ({reason})")
        return np
    cupy = backend.cupy
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"backend: CuPy on {name}")
    return cupy


def to_host(array):
    """A NumPy copy of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


# ---------------------------------------------------------------------------------------
# Data


class Data:
    """A node-classification problem: graph (with a self-loop on every node), features,
    labels, and a random train/test split of the nodes.

    The features are standardized (zero mean, unit variance per column), as one would
    do for real data. ``added_loops`` is how many of the graph's self-loops were added to
    give every node one (the others came with the graph).
    """

    def __init__(self, name, graph, features, labels, train_idx, test_idx, added_loops=0):
        features = np.asarray(features, dtype=np.float64)
        features = (features - features.mean(axis=0)) / (features.std(axis=0) + 1e-12)
        self.name = name
        self.graph = graph  # CSRGraph, row = destination
        self.features = features.astype(np.float32)  # (N, F), host
        self.labels = np.asarray(labels, dtype=np.int64)  # (N,), host
        self.train_idx = train_idx
        self.test_idx = test_idx
        self.num_classes = int(self.labels.max()) + 1
        self.added_loops = int(added_loops)

    def describe(self):
        """Prints the sizes, the edge homophily and the share of the largest class."""
        adjacency = graph_to_scipy(self.graph).tocoo()
        dst, src = adjacency.row, adjacency.col
        loops = dst == src
        same_class = self.labels[dst[~loops]] == self.labels[src[~loops]]
        largest = np.bincount(self.labels).max() / len(self.labels)
        print(
            f"data: {self.name}: {self.graph.num_dst} nodes, {self.graph.num_edges} edges: "
            f"{int((~loops).sum())} between two nodes + {int(loops.sum())} self-loops "
            f"({self.added_loops} added so that every node has at least one), {self.features.shape[1]} features, "
            f"{self.num_classes} classes (largest {100 * largest:.0f}% of the nodes), "
            f"edge homophily {same_class.mean():.2f}, "
            f"{len(self.train_idx)} train / {len(self.test_idx)} test nodes"
        )

    def majority_test_acc(self):
        """Test accuracy of always answering the most frequent class of the training nodes."""
        guess = np.bincount(self.labels[self.train_idx]).argmax()
        return float(np.mean(self.labels[self.test_idx] == guess))

    def to(self, xp):
        """(graph, features, labels, train_idx, test_idx) on the device of ``xp``."""
        graph = self.graph.to_gpu() if xp is not np else self.graph
        return (
            graph,
            xp.asarray(self.features),
            xp.asarray(self.labels),
            xp.asarray(self.train_idx),
            xp.asarray(self.test_idx),
        )


def graph_to_scipy(graph):
    """A scipy CSR array of the graph's pattern (with copies of its index arrays)."""
    indptr, indices = to_host(graph.indptr).copy(), to_host(graph.indices).copy()
    ones = np.ones(len(indices), dtype=np.float32)
    return scipy.sparse.csr_array((ones, indices, indptr), shape=graph.shape)


def symmetric_with_self_loops(graph):
    """The graph with every edge also in the other direction (repeated pairs merged) and
    one self-loop per node (the file's own self-loops dropped first, so all of them are
    added): messages then run both ways, and every node also attends to itself, as in GAT."""
    adjacency = graph_to_scipy(graph)
    adjacency = (adjacency + adjacency.T).tocsr()
    adjacency.setdiag(0)
    adjacency.eliminate_zeros()
    return datasets.add_self_loops(ca.CSRGraph.from_scipy(adjacency))


def split(num_nodes, train_fraction, rng):
    """A random train/test split of the nodes."""
    order = rng.permutation(num_nodes)
    num_train = max(1, int(round(train_fraction * num_nodes)))
    return np.sort(order[:num_train]), np.sort(order[num_train:])


def class_features(labels, num_features, noise, rng):
    """Features = a random mean per class + Gaussian noise of standard deviation ``noise``."""
    means = rng.standard_normal((int(labels.max()) + 1, num_features))
    features = means[labels] + noise * rng.standard_normal((len(labels), num_features))
    return features.astype(np.float32)


def sbm_data(
    num_nodes=3000, num_classes=5, *, degree=10, num_features=16, homophily=0.9, noise=3.0, train_fraction=0.2, seed=0
):
    """A contextual SBM (cupy_csrattn.datasets.contextual_sbm) with a self-loop on every node.

    The features alone are noisy (``noise`` is the standard deviation around the class
    means), the edges mostly join nodes of one class (``homophily``), so averaging over
    neighbours, what attention does, recovers the class.
    """
    graph, features, labels = datasets.contextual_sbm(
        num_nodes,
        num_classes,
        degree=degree,
        num_features=num_features,
        homophily=homophily,
        feature_noise=noise,
        seed=seed,
    )
    train_idx, test_idx = split(num_nodes, train_fraction, np.random.default_rng(seed + 1))
    looped = datasets.add_self_loops(graph)  # only rows without a self-loop get one
    return Data(
        f"contextual SBM (homophily {homophily}, feature noise {noise})",
        looped,
        features,
        labels,
        train_idx,
        test_idx,
        added_loops=looped.num_edges - graph.num_edges,
    )


def voronoi_labels(adjacency, num_classes, rng, seeds_per_class=2):
    """Synthetic classes that follow the graph: a graph Voronoi partition.

    ``seeds_per_class * num_classes`` random seed nodes (in the largest connected
    component) each claim the nodes nearest to them (BFS distance); seed ``i`` gives class
    ``i % num_classes``. Nodes that no seed reaches get a random class.
    """
    _, component = scipy.sparse.csgraph.connected_components(adjacency, directed=False)
    largest = np.flatnonzero(component == np.argmax(np.bincount(component)))
    seeds = rng.choice(largest, size=min(len(largest), seeds_per_class * num_classes), replace=False)
    _, _, nearest = scipy.sparse.csgraph.dijkstra(
        adjacency, directed=False, indices=seeds, unweighted=True, min_only=True, return_predecessors=True
    )
    seed_class = np.zeros(adjacency.shape[0], dtype=np.int64)
    seed_class[seeds] = np.arange(len(seeds)) % num_classes
    labels = rng.integers(0, num_classes, adjacency.shape[0])
    reached = nearest >= 0
    labels[reached] = seed_class[nearest[reached]]
    return labels


def mtx_data(path, num_classes=5, *, num_features=16, noise=3.0, train_fraction=0.2, seed=0):
    """A real graph from an .mtx file, with synthetic graph-aligned classes and features.

    The matrix must be square (its rows and columns are the same nodes) with at least
    ``num_classes`` nodes; else a ValueError whose message starts with ``path``, as those
    of the loader do.
    """
    rng = np.random.default_rng(seed)
    graph = datasets.load_mtx(path)
    rows, cols = graph.shape
    if rows != cols:
        raise ValueError(f"{path}: the matrix is {rows} x {cols}; node classification needs a square matrix")
    if rows < num_classes:
        raise ValueError(
            f"{path}: the graph has {rows} nodes, fewer than the {num_classes} classes asked for (--classes)"
        )
    graph = symmetric_with_self_loops(graph)
    labels = voronoi_labels(graph_to_scipy(graph), num_classes, rng)
    features = class_features(labels, num_features, noise, rng)
    train_idx, test_idx = split(graph.num_dst, train_fraction, rng)
    return Data(
        f"{os.path.basename(path)} (Voronoi classes, feature noise {noise})",
        graph,
        features,
        labels,
        train_idx,
        test_idx,
        added_loops=graph.num_dst,
    )


# ---------------------------------------------------------------------------------------
# Layers without attention


def glorot(rng, shape, dtype, xp):
    """Glorot-uniform initial weights, drawn on the host so every backend starts the same."""
    fan_in, fan_out = shape[0], int(np.prod(shape[1:]))
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return xp.asarray(rng.uniform(-limit, limit, shape).astype(dtype))


class Linear:
    """y = x @ W + b; the parameters live in the model's dict under ``name.W`` / ``name.b``."""

    def __init__(self, params, name, fan_in, fan_out, rng, dtype, xp, bias=True):
        self.params, self.name, self.bias = params, name, bias
        params[name + ".W"] = glorot(rng, (fan_in, fan_out), dtype, xp)
        if bias:
            params[name + ".b"] = xp.zeros(fan_out, dtype=dtype)

    def forward(self, x):
        self.x = x
        y = x @ self.params[self.name + ".W"]
        return y + self.params[self.name + ".b"] if self.bias else y

    def backward(self, grad_y, grads):
        """Adds this layer's parameter gradients to ``grads``; returns the gradient of x."""
        grads[self.name + ".W"] = self.x.T @ grad_y
        if self.bias:
            grads[self.name + ".b"] = grad_y.sum(axis=0)
        return grad_y @ self.params[self.name + ".W"].T


def elu(x, xp):
    return xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0)))


def elu_backward(x, grad_y, xp):
    """d elu(x) / dx = 1 for x > 0, exp(x) otherwise: exp(min(x, 0)) in both cases."""
    return grad_y * xp.exp(xp.minimum(x, 0))


class MLP:
    """The features-only baseline: Linear -> ELU -> Linear, no graph at all."""

    def __init__(self, in_features, hidden, num_classes, *, rng, dtype=np.float32, xp=np):
        self.xp, self.params = xp, {}
        self.layer1 = Linear(self.params, "fc1", in_features, hidden, rng, dtype, xp)
        self.layer2 = Linear(self.params, "fc2", hidden, num_classes, rng, dtype, xp)

    def forward(self, x):
        self.pre = self.layer1.forward(x)
        return self.layer2.forward(elu(self.pre, self.xp))

    def backward(self, grad_logits):
        grads = {}
        grad_hidden = self.layer2.backward(grad_logits, grads)
        self.layer1.backward(elu_backward(self.pre, grad_hidden, self.xp), grads)
        return grads


# ---------------------------------------------------------------------------------------
# Loss, optimizer, training loop


def cross_entropy(logits, labels, idx, xp):
    """Mean softmax cross-entropy over the nodes ``idx``, and its gradient for all logits."""
    rows = logits[idx]
    shifted = rows - rows.max(axis=1, keepdims=True)
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    picked = log_probs[xp.arange(len(idx)), labels[idx]]
    loss = -picked.mean()
    grad_rows = xp.exp(log_probs)
    grad_rows[xp.arange(len(idx)), labels[idx]] -= 1
    grad = xp.zeros_like(logits)
    grad[idx] = grad_rows / len(idx)
    return loss, grad


def accuracy(logits, labels, idx):
    return float((logits[idx].argmax(axis=1) == labels[idx]).mean())


class Adam:
    """Adam (Kingma and Ba) with L2 weight decay added to the gradients."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.m = {k: v * 0 for k, v in params.items()}
        self.v = {k: v * 0 for k, v in params.items()}
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        lr_t = self.lr * math.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        for name, param in self.params.items():
            g = grads[name]
            if self.weight_decay and param.ndim > 1:  # no decay on biases
                g = g + self.weight_decay * param
            self.m[name] = b1 * self.m[name] + (1 - b1) * g
            self.v[name] = b2 * self.v[name] + (1 - b2) * g * g
            param -= (lr_t * self.m[name] / (self.v[name] ** 0.5 + self.eps)).astype(param.dtype)


def train(model, x, labels, train_idx, test_idx, *, epochs, lr=0.01, weight_decay=5e-4, log_every=10, name="model"):
    """Full-batch training; returns a dict of per-epoch loss / train / test accuracy.

    With ``log_every`` N > 0 prints the first epoch, every N-th and the last; 0 prints
    nothing. The accuracies printed for an epoch are those of the parameters that the
    epoch's update starts from (the logits come from the same forward pass as the loss).
    """
    xp = model.xp
    optimizer = Adam(model.params, lr=lr, weight_decay=weight_decay)
    history = {"loss": [], "train_acc": [], "test_acc": []}
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        logits = model.forward(x)
        loss, grad_logits = cross_entropy(logits, labels, train_idx, xp)
        optimizer.step(model.backward(grad_logits))
        history["loss"].append(float(loss))
        history["train_acc"].append(accuracy(logits, labels, train_idx))
        history["test_acc"].append(accuracy(logits, labels, test_idx))
        if log_every and (epoch % log_every == 0 or epoch in (1, epochs)):
            print(
                f"{name} epoch {epoch:4d}  loss {history['loss'][-1]:.4f}  "
                f"train acc {history['train_acc'][-1]:.3f}  test acc {history['test_acc'][-1]:.3f}"
            )
    logits = model.forward(x)
    history["final_loss"] = float(cross_entropy(logits, labels, train_idx, xp)[0])
    history["final_train_acc"] = accuracy(logits, labels, train_idx)
    history["final_test_acc"] = accuracy(logits, labels, test_idx)
    history["seconds"] = time.perf_counter() - start
    return history


def compare(name, history, baseline, data):
    """Prints the final accuracies of the model, of the features-only baseline and of
    always guessing the most frequent training class."""
    majority = data.majority_test_acc()
    print()
    print(f"{'':24s} {'train acc':>9s} {'test acc':>9s} {'time':>8s}")
    for label, h in ((name, history), ("features-only MLP", baseline)):
        print(f"{label:24s} {h['final_train_acc']:9.3f} {h['final_test_acc']:9.3f} {h['seconds']:7.1f}s")
    print(f"{'most frequent class':24s} {'':9s} {majority:9.3f}")
    print(verdict(name, history["final_test_acc"] - baseline["final_test_acc"]))
    return {"model": history, "baseline": baseline, "majority_test_acc": majority}


def verdict(name, gain):
    """The last line: how the model's test accuracy compares with the baseline's (``gain`` is
    the difference, a fraction)."""
    points = round(100 * gain, 1)
    if points > 0:
        return f"{name} beats the features-only baseline by {points:.1f} points of test accuracy"
    if points < 0:
        return f"{name} does NOT beat the features-only baseline: {-points:.1f} points of test accuracy below it"
    return f"{name} ties with the features-only baseline (the same test accuracy to 0.1 points)"


# ---------------------------------------------------------------------------------------
# Gradient check


def gradient_check(model, x, labels, idx, *, checks_per_param=6, eps=1e-6, seed=0):
    """Largest relative error between ``model.backward`` and central finite differences.

    Build the model in float64 for this. A few random entries of every parameter are
    perturbed by +-eps, the loss is recomputed and compared with the analytic gradient.
    Returns (max relative error, {param name: its max relative error}).
    """
    xp = model.xp
    rng = np.random.default_rng(seed)
    logits = model.forward(x)
    _, grad_logits = cross_entropy(logits, labels, idx, xp)
    grads = model.backward(grad_logits)
    errors = {}
    for name, param in model.params.items():
        flat, grad = param.reshape(-1), grads[name].reshape(-1)
        worst = 0.0
        for i in rng.choice(flat.size, size=min(checks_per_param, flat.size), replace=False):
            saved = float(flat[i])
            flat[i] = saved + eps
            loss_plus = float(cross_entropy(model.forward(x), labels, idx, xp)[0])
            flat[i] = saved - eps
            loss_minus = float(cross_entropy(model.forward(x), labels, idx, xp)[0])
            flat[i] = saved
            numeric, analytic = (loss_plus - loss_minus) / (2 * eps), float(grad[i])
            worst = max(worst, abs(numeric - analytic) / max(abs(numeric), abs(analytic), 1e-7))
        errors[name] = worst
    return max(errors.values()), errors


def argument_parser(doc):
    """An argparse parser described by the first line of ``doc`` whose --help shows every
    option's default."""
    return argparse.ArgumentParser(
        description=doc.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )


def int_at_least(minimum):
    """argparse type: an integer >= ``minimum`` (argparse names the option in the error)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def real(minimum, *, strict=False):
    """argparse type: a finite number >= ``minimum`` (> ``minimum`` when ``strict``)."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if strict else '>='} {minimum}, got {text}")
        return value

    return parse


def add_training_arguments(parser):
    """The command-line options both training examples share (each with a help text, so that
    ArgumentDefaultsHelpFormatter shows its default). Each is checked as it is parsed: a bad
    value is a one-line argparse error naming the option (exit status 2), not a traceback;
    :func:`load_data` checks what depends on several options or on the --mtx file."""
    parser.add_argument("--mtx", help="train on this Matrix Market graph (a square matrix) instead of the SBM")
    parser.add_argument("--nodes", type=int, default=3000, help="nodes of the SBM, at least --classes")
    parser.add_argument("--classes", type=int_at_least(2), default=5, help="node classes")
    parser.add_argument("--epochs", type=int_at_least(1), default=100, help="training epochs (full batch)")
    parser.add_argument("--lr", type=real(0, strict=True), default=0.01, help="Adam's learning rate")
    parser.add_argument("--heads", type=int_at_least(1), default=4, help="attention heads")
    parser.add_argument("--noise", type=real(0), default=3.0, help="feature noise (std) around the class means")
    parser.add_argument(
        "--seed", type=int_at_least(0), default=0, help="seed of the data, the split and the initial weights"
    )
    parser.add_argument(
        "--device", choices=("auto", "cpu", "gpu"), default="auto", help="auto: the GPU when one is usable"
    )
    parser.add_argument(
        "--log-every",
        type=int_at_least(0),
        default=10,
        help="print the first epoch, every N-th and the last (0: only the final comparison)",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the finite-difference gradient check")


def load_data(parser, args):
    """The Data of the parsed command line: the SBM, or the --mtx graph.

    What argparse's types cannot check alone is a usage error (``parser.error``: one line
    naming the option, exit status 2) before anything is trained: fewer --nodes than
    --classes, an --mtx file that is missing, malformed, not square or smaller than --classes.
    """
    if not args.mtx:
        if args.nodes < args.classes:
            parser.error(
                f"--nodes must be at least {args.classes} (one node per class, --classes {args.classes}), "
                f"got {args.nodes}"
            )
        try:
            return sbm_data(args.nodes, args.classes, noise=args.noise, seed=args.seed)
        except (ValueError, MemoryError) as error:
            parser.error(f"--nodes {args.nodes}: {backend.first_line(error)}")
    try:
        return mtx_data(args.mtx, args.classes, noise=args.noise, seed=args.seed)
    except OSError as error:
        parser.error(f"--mtx {args.mtx}: {error.strerror or backend.first_line(error)}")
    except (ValueError, MemoryError) as error:
        message = backend.first_line(error)
        parser.error(f"--mtx {message}" if message.startswith(str(args.mtx)) else f"--mtx {args.mtx}: {message}")


def run_training(args, data, name, check_gradients, build_model, baseline_hidden):
    """The main program of a training example: pick the backend, check the gradients,
    train the model and a features-only MLP the same way on ``data`` (from
    :func:`load_data`), and compare them.

    build_model(graph, in_features, num_classes, xp) returns the model to train.
    """
    xp = select_backend(args.device)
    if not args.no_check:
        check_gradients()
    data.describe()
    graph, x, labels, train_idx, test_idx = data.to(xp)
    in_features = x.shape[1]
    model = build_model(graph, in_features, data.num_classes, xp)
    history = train(
        model, x, labels, train_idx, test_idx, epochs=args.epochs, lr=args.lr, log_every=args.log_every, name=name
    )
    mlp = MLP(in_features, baseline_hidden, data.num_classes, rng=np.random.default_rng(args.seed), xp=xp)
    baseline = train(mlp, x, labels, train_idx, test_idx, epochs=args.epochs, lr=args.lr, log_every=0, name="MLP")
    return compare(name, history, baseline, data)
