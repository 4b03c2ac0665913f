"""Every exception the package defines pickles and unpickles as itself: a worker process sends them pickled."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import parallel_loader
from parallel_loader._faults.error_budget import ErrorRecord
from parallel_loader._faults.errors import ErrorBudgetExceeded


def package_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module of the package, found by importing each module."""
    found = {}
    for module in pkgutil.walk_packages(parallel_loader.__path__, "parallel_loader."):
        if module.name.endswith("__main__"):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("parallel_loader"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[name] for name in sorted(found)]


def an_instance(cls: type[BaseException]) -> BaseException:
    """``cls`` made with a distinct value for each argument its ``__init__`` takes, and a note."""
    if cls is ErrorBudgetExceeded:
        record = ErrorRecord(0, 3, "VideoDecodeError", "a.mp4: truncated", {"path": "a.mp4"}, "t-0", 1.0)
        exc: BaseException = cls("1 error of 0.05", [record], 0.05)
    elif cls.__init__ is BaseException.__init__:
        exc = cls("what went wrong")
    else:
        names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        exc = cls(*(f"{name} value" for name in names))
    exc.add_note("raised in a worker")
    return exc


EXCEPTIONS = package_exceptions()


def test_the_package_defines_the_exceptions_the_issue_names():
    names = {cls.__name__ for cls in EXCEPTIONS}
    named = {"VideoDecodeError", "AnnotationError", "ObjectChanged", "ErrorBudgetExceeded", "LoaderTimeout"}
    assert named | {"WorkerProcessDied", "LoaderClosed", "QueueClosed"} <= names


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: cls.__qualname__)
def test_an_exception_unpickles_as_itself_with_its_message_fields_and_notes(cls):
    exc = an_instance(cls)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls
    assert (str(copy), copy.args, vars(copy)) == (str(exc), exc.args, vars(exc))
    assert copy.__notes__ == ["raised in a worker"]
