"""nodeagent: node health and telemetry for rented GPU servers (docs/architecture.md).

One import name: the distribution installs `nodeagent` and nothing else
(tests/packaging/test_import_names.py). pyproject.toml's ``[tool.setuptools.package-dir]`` maps the
folders onto it (``agent/`` is ``nodeagent.agent``, ``collector/``, ``core/``, ``tools/`` alike;
this folder holds the wire: ``v1``, ``podresources``, ``prompb``, which import nothing else of
nodeagent); ``.ci/link-tree`` (``make link-tree``) links the same folders into
``build/src/nodeagent`` for mypy and for running from an uninstalled checkout (``build/src`` on
``PYTHONPATH``, as ``bench/device_check.sh`` does). The console scripts are `nodeagent` and
``nodeagent-collector``; as modules, ``python -m nodeagent.agent`` and ``python -m
nodeagent.collector``. This module holds the version.
"""

__version__ = "0.1.0"
