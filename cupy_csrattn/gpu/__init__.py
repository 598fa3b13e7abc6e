"""The GPU backend: kernel loading and launch (kernels), the kernels' declared signatures
(signatures), per-graph work plans (plan) and one launcher module per op family, each
exposing the backend functions of its ops with the CPU backend's arguments. A launcher
computes grids and chooses kernel variants, nothing more; it never validates user input.
"""
