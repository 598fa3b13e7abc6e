"""The NumPy/SciPy backend: vectorized, also the reference for the GPU.

Every function takes a CPU CSRGraph and canonical arrays (edge arrays (E, H), node
features (N, H, F), per-node scalars (N, H)) and writes into the outputs it is handed.
float64 inputs are computed in float64, float32 and float16 ones in float32, with row
sums kept accurate for rows of any length (see segment_sums).
"""
