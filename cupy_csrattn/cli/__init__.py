"""The ``csrattn`` command: ``info``, ``check`` and ``bench``.

Installed as a console script (``csrattn``); also ``python -m cupy_csrattn.cli``. Every
subcommand runs without a GPU, on the CPU backend, and says so. Errors are one line on
stderr: exit status 2 for a usage error, 1 for a failure (set ``CSRATTN_DEBUG=1`` for the
traceback).

Modules: ``common`` (program name, errors, progress bar), ``command`` (parser, ``main``),
one per subcommand (``info``, ``check``, ``bench``), and the two steps of ``check``
(``kernelcheck``, ``opcheck``).
"""

from cupy_csrattn.cli.command import build_parser, main
from cupy_csrattn.cli.common import CommandError, Progress, UsageError

__all__ = ["main", "Progress", "build_parser", "CommandError", "UsageError"]
