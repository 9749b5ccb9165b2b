"""Imports made without optional modules the programs never use, which would stay resident.

``hidden("rich")`` around an import makes ``import rich`` inside it fail (a None entry in
``sys.modules`` is how Python spells "no such module"), so a library that takes rich as optional
goes on without it; the module is importable again right after, for whoever really uses it. It
only has effect on a library's first import, so the programs make these imports first
(``agent/__init__.py``, ``collector/__init__.py``, then ``core/program/log.py``):

- structlog without rich: structlog's console renderer imports rich, pygments and attrs for its
  tracebacks when rich is installed (6 MB resident); the programs print exceptions as plain text,
  and rich is here only for ``nodeagent top``.
- asyncio without ssl, in the agent: asyncio imports ssl (and OpenSSL with it, 4.5 MB resident)
  for its own TLS streams, which nothing here uses; gRPC brings its own TLS, and the agent's
  HTTPS for /metrics imports ssl when it is configured.
- hashlib and hmac without OpenSSL, in the agent: they load libcrypto (4 MB) for OpenSSL's
  digests; the agent hashes only with blake2b (its collector order) and compares tokens with
  ``compare_digest``, which CPython has built in.
- shutil without bz2 and lzma, in the agent: shutil imports them (and liblzma) for its archive
  functions, which the agent never calls; pynvml imports shutil through ctypes.util.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def hidden(*names: str) -> Iterator[None]:
    """``names`` cannot be imported inside the block (unless they were already)."""
    hide = [name for name in names if name not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hide:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]
