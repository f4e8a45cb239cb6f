"""A stand-in for torchvision, on the side environments' path only (never in the project).

Why: SGLang 0.5.10 imports `torchvision.io.decode_jpeg` at module level (sglang/srt/utils/common.py)
and transformers imports `torchvision.transforms` when it finds one; PyPI's torchvision wheels
link CUDA torch, and the CPU torch in .venv cannot load their ops ("operator torchvision::nms does
not exist"). Argument parsing never calls torchvision, so every name here is a placeholder that
raises if anything ever does call it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _Placeholder(metaclass=_Meta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("torchvision is a stand-in in the engines test tier")


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


sys.meta_path.insert(0, _Finder())
__version__ = "0.0.0+stand-in"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder
