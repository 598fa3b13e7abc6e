"""GPU launchers, one module per kernel family (softmax, spmm, sddmm, attention).

Each module exposes the backend functions of its family with the CPU backend's signatures;
a launcher computes grid, block and shared-memory sizes and launches, nothing more. A
family without a module here makes its ops raise NotImplementedError on CuPy input.
"""
