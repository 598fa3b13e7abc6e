"""What the tests and ``csrattn check`` share, in the spirit of numpy.testing: a deliberately
naive float64 reference of every op (reference), graphs that break kernels (graphs), random
inputs and the graph argument in each accepted form (arrays), the table of every op's call
forms (cases) and one comparison with one tolerance per dtype (compare)."""
