"""The public ops: validate arguments, place them, run the registered backend, document.

Importing this package registers every op (see registry), in the order of these imports.
"""

# isort: off
from cupy_csrattn.ops import softmax  # noqa: F401
from cupy_csrattn.ops import spmm  # noqa: F401
from cupy_csrattn.ops import sddmm  # noqa: F401
from cupy_csrattn.ops import aggregate  # noqa: F401
from cupy_csrattn.ops import attention  # noqa: F401
from cupy_csrattn.ops import gatv2  # noqa: F401
# isort: on
