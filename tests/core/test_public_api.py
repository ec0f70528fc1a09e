"""The flat public API of core: every exported name resolves, and serving needs no JAX."""

from __future__ import annotations

import subprocess
import sys

import core


def test_every_exported_name_resolves() -> None:
    for name in core.__all__:
        assert getattr(core, name) is not None, name


def test_flat_names_are_the_functions_even_after_importing_every_module() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(core.__path__):
        importlib.import_module(f"core.{info.name}")
    from core.model import build
    from core.training import train

    assert core.build is build
    assert core.train is train
    for name in core.__all__:
        assert not isinstance(getattr(core, name), type(core)), f"core.{name} is a module"


def test_importing_core_loads_no_jax_until_a_name_is_used() -> None:
    code = "import sys, core; assert 'jax' not in sys.modules, 'jax loaded'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
