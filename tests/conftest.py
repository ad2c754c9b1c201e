"""Shared test setup.

Strict mode for every notebook this pytest session executes: nbmake (``pytest --nbmake``)
starts each notebook's kernel with this process's environment, and with
``NSPY_TUTORIAL_STRICT=1`` a section that ends FAILED re-raises, so the notebook -- and
the test run -- fails instead of printing ``[FAILED]`` and carrying on. ``setdefault``:
an explicit ``NSPY_TUTORIAL_STRICT=0`` from the caller still wins.

Unit tests that depend on the variable set or remove it themselves (monkeypatch).
"""

import os

os.environ.setdefault("NSPY_TUTORIAL_STRICT", "1")
