"""Placeholders for modules the device image lacks and the served path never runs.

sitecustomize.py installs them when $OPSCTL_STUB_MODULES names them (comma-separated), in every
process sglang starts (the scheduler and detokenizer inherit the environment). The one the device
run needs is `cutlass` (nvidia-cutlass-dsl, 74.5 MB for its base libraries alone, over what one
call carries): sglang 0.5.15's deepseek_v2.py imports the DSA indexer at module level, which
imports the CuTe-DSL paged-MQA-logits kernels, which `import cutlass` and decorate kernels with it.
Only a DSA model (index_topk set) runs them; the tiny DeepSeek-V2 model has none. Any use of a
placeholder beyond attribute access at import time raises, so a path that really needs the module
fails loudly instead of computing with a stand-in; importlib.util.find_spec (a feature probe, as
flashinfer's is_cute_dsl_available) is told the truth: the module is absent.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class StubUsed(RuntimeError):
    pass


class _Stub(types.ModuleType):
    """Any attribute is another placeholder; calling one as a decorator returns the function."""

    __path__: list[str] = []

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return _unusable(self.__name__, args[0])  # @stub.jit def f(...): keep a loud f
        return _Stub(f"{self.__name__}()")

    def __getitem__(self, key: object) -> object:
        # annotations such as Type[cutlass.Numeric] or Int32[...]
        return _Stub(f"{self.__name__}[]")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)  # class K(stub.Something): defines; using K's stub parts raises


def _unusable(stub: str, fn: object) -> object:
    def run(*args: object, **kwargs: object) -> object:
        raise StubUsed(
            f"{getattr(fn, '__qualname__', fn)} needs {stub}, a placeholder on this machine"
        )

    return run


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the placeholders, only inside the named importer modules when any are named.

    An importer (a module that needs the placeholder at its import) is loaded by its real loader;
    while it executes, imports of the stubbed names get placeholders, and when it is done they are
    dropped from sys.modules again, so any other module's `import cutlass` (flashinfer's optional
    CuTe-DSL kernels, say) fails as it would without the package and takes its own fallback.
    """

    def __init__(self, names: set[str], importers: set[str] | None = None) -> None:
        self.names = names
        self.importers = importers or set()
        self.active = 0

    def _stubbed(self, fullname: str) -> bool:
        return any(fullname == n or fullname.startswith(n + ".") for n in self.names)

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if _probing():
            return None  # importlib.util.find_spec asks whether it exists: truthfully, it does not
        if fullname in self.importers:
            return self._importer_spec(fullname, path)
        if self._stubbed(fullname) and (self.active or not self.importers):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def _importer_spec(self, fullname, path):  # type: ignore[no-untyped-def]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module
        finder = self

        def exec_module(module: types.ModuleType) -> None:
            finder.active += 1
            try:
                real_exec(module)
            finally:
                finder.active -= 1
                if not finder.active:
                    for name in [m for m in sys.modules if finder._stubbed(m)]:
                        del sys.modules[name]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return _Stub(spec.name)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        return None


def _probing() -> bool:
    """True when the lookup comes from importlib.util.find_spec (a feature probe), not an import."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "find_spec" and code.co_filename.endswith(
            ("importlib/util.py", "<frozen importlib.util>")
        ):
            return True
        frame = frame.f_back
    return False


def install(names: set[str], importers: set[str] | None = None) -> StubFinder:
    finder = StubFinder(names, importers)
    sys.meta_path.insert(0, finder)
    return finder
