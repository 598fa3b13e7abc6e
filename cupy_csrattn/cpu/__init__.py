"""The NumPy/SciPy backend: vectorized, computed in float64, also the reference for the GPU.

Every function takes a CPU CSRGraph and canonical arrays (edge arrays (E, H), node
features (N, H, F), per-node scalars (N, H)) and writes into the outputs it is handed.
"""
