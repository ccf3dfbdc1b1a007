"""Imports a device's process puts off until it uses them.

A library can import at its top modules for features an agent never uses (paho-mqtt: TLS, proxies from the
environment, WebSockets), each costing resident memory on a Pi-class device. `stand_ins` imports such a
library with a stand-in for each of those modules, which imports the real one at the first use of any of its
attributes; a stand-in can also give a few attributes their own values while the real module is not imported
(each one the same thing the module would have given). The stand-ins are in sys.modules only while the library
is imported: any other `import` gets the real module.

importlib's LazyLoader cannot do this: the next `import` statement of its module executes it (Python < 3.12
reads `__spec__` through it).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class OnFirstUse(types.ModuleType):
    """Stands for module `name`: each attribute is the real module's, imported at the first use, except those
    in `meanwhile`, which keep their values while the real module is not imported."""

    def __init__(self, name: str, meanwhile: Mapping[str, Any] | None = None):
        super().__init__(name)
        self._meanwhile = dict(meanwhile or {})

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "_meanwhile":
            raise AttributeError(attr)
        imported = sys.modules.get(self.__name__)
        if imported is None or imported is self:
            if attr in self._meanwhile:
                return self._meanwhile[attr]
            if imported is self:  # still registered: the library's import is under way, nothing to load yet
                raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)


@contextmanager
def stand_ins(modules: Mapping[str, Mapping[str, Any] | None]) -> Iterator[dict[str, OnFirstUse]]:
    """While the block runs, `import NAME` of each module not imported yet gets an OnFirstUse stand-in (with its
    `meanwhile` values); afterwards the stand-ins stay with whoever imported them, and sys.modules forgets them."""
    made = {name: OnFirstUse(name, meanwhile) for name, meanwhile in modules.items() if name not in sys.modules}
    sys.modules.update(made)
    for name, module in made.items():
        parent, _, child = name.rpartition(".")
        if parent:  # `import urllib.request` binds `urllib`: the importer reads `.request` of it
            setattr(importlib.import_module(parent), child, module)
    try:
        yield made
    finally:
        for name, module in made.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class NeverRaisedError(Exception):
    """Stands for an exception class in an `except` clause where nothing can raise it yet (wire.mqtt)."""
