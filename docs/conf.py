"""Sphinx configuration: MyST pages, and an API reference made from each public module's ``__all__``.

``make docs`` builds the site into ``docs/_build/html`` with ``-W --keep-going -n``.
The build reads nothing from the network: intersphinx uses the inventories in ``docs/_inv``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
# autodoc imports parallel_loader.keras, which imports TensorFlow: keep its start-up lines quiet.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

project = "parallel_loader"
author = "the parallel_loader authors"
copyright = "the parallel_loader authors"
release = importlib.import_module("parallel_loader").__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_inv", "_templates", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

html_theme = "furo"
html_title = "parallel_loader"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Google-style docstrings (Args:, Returns:, Raises:).
napoleon_google_docstring = True
napoleon_numpy_docstring = False

autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
python_use_unqualified_type_names = True

# Inventories kept in the repository, so the build never reaches the network:
# python.inv is the objects.inv of Python 3.11's documentation (Debian's python3.11-doc),
# numpy.inv that of NumPy 1.17's (the newest found in a public repository). TensorFlow,
# Keras, PyAV and fsspec publish no Sphinx inventory; their names are in nitpick_ignore_regex.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3.11", str(DOCS / "_inv" / "python.inv")),
    "numpy": ("https://numpy.org/doc/stable", str(DOCS / "_inv" / "numpy.inv")),
}

nitpicky = True
# Third-party names only; every name of parallel_loader must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(tf|tensorflow|keras|av|fsspec|cv2|psutil|tqdm)(\..*)?"),
]
# Two private classes that public signatures name, with nothing for a user to read:
# the sentinel that IndexCache's default directory is, and the budget that the loader
# hands to the ErrorSink it makes (users receive an ErrorSink; they never build one).
nitpick_ignore = [
    ("py:class", "parallel_loader.video._indexes.cache._UserDefault"),
    ("py:class", "parallel_loader._faults.error_budget.ErrorBudget"),
    # Sphinx splits a stringified ``Callable[[], T]`` annotation at its empty list: no name of ours.
    ("py:class", "collections.abc.Callable[[]"),
    # numpy.random.Generator, named by its defining module, which numpy's inventory does not list.
    ("py:class", "numpy.random._generator.Generator"),
    # What Augment.plan returns: a decode size and windows, read by the data set's reader alone.
    ("py:class", "parallel_loader.video._samples.augment.Plan"),
    # What IndexCache.get_with_table returns beside an index: the packets the video readers decode.
    ("py:class", "parallel_loader.video._indexes.packet_table.PacketTable"),
]

# ---------------------------------------------------------------------------
# The API reference: one page per public module, made from its __all__ at each build.
# ---------------------------------------------------------------------------

# The public modules: the toctree of api.md lists one page ``api/<module>`` for each.
# Adding a public module is one line there (and a place in HOME_ORDER below).
PUBLIC_MODULES = re.findall(r"^api/(\S+)$", (DOCS / "api.md").read_text(encoding="utf-8"), flags=re.MULTILINE)

# An object exported by several modules is documented once, in the first of these that
# exports it (its home); the others list it with a link there.
HOME_ORDER = [
    "parallel_loader.train",
    "parallel_loader.tensorflow",
    "parallel_loader.keras",
    "parallel_loader.sharding",
    "parallel_loader.ray",
    "parallel_loader.video.index",
    "parallel_loader.video.remote",
    "parallel_loader.video.check",
    "parallel_loader.sample_data",
    "parallel_loader.video",
    "parallel_loader",
    "parallel_loader.tf_data",
    "parallel_loader.tf_startup",
]

API_DIR = DOCS / "api"


def _homes() -> dict[tuple[str, int], str]:
    """(name, id of the object) -> the module that documents it."""
    homes: dict[tuple[str, int], str] = {}
    for module_name in HOME_ORDER:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            homes.setdefault((name, id(getattr(module, name))), module_name)
    return homes


HOME_ORDER = [name for name in HOME_ORDER if name in PUBLIC_MODULES]
HOME_ORDER += [name for name in PUBLIC_MODULES if name not in HOME_ORDER]
HOMES = _homes()


def _page(module_name: str) -> str:
    module = importlib.import_module(module_name)
    own, elsewhere = [], []
    for name in sorted(module.__all__, key=str.lower):
        home = HOMES[(name, id(getattr(module, name)))]
        (own if home == module_name else elsewhere).append(f"{home}.{name}")
    lines = [
        f"``{module_name}``",
        "=" * (len(module_name) + 4),
        "",
        f".. automodule:: {module_name}",
        "   :no-members:",
        "",
        f".. currentmodule:: {module_name}",
        "",
    ]
    if own:
        lines += [".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
        lines += [f"   {name.rsplit('.', 1)[1]}" for name in own]
        lines.append("")
    if elsewhere:
        lines += ["Also exported here, documented where they live:", "", ".. autosummary::", "   :nosignatures:", ""]
        lines += [f"   ~{_relative(name, module_name)}" for name in elsewhere]
        lines.append("")
    return "\n".join(lines)


def _relative(name: str, module_name: str) -> str:
    """autosummary wants names under the current module written relative to it."""
    return name.removeprefix(module_name + ".")


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_api_pages() -> None:
    """Write ``docs/api/<module>.rst`` for every public module (git-ignored, remade at each build).

    autosummary writes a page per object into ``docs/api/generated``; pages of names
    no longer public are removed, so that they do not linger outside every toctree.
    """
    API_DIR.mkdir(exist_ok=True)
    for module_name in PUBLIC_MODULES:
        _write_if_changed(API_DIR / f"{module_name}.rst", _page(module_name))
    for stale in API_DIR.glob("*.rst"):
        if stale.stem not in PUBLIC_MODULES:
            stale.unlink()
    documented = {f"{home}.{name}" for (name, _), home in HOMES.items()}
    for stale in (API_DIR / "generated").glob("*.rst"):
        if stale.stem not in documented:
            stale.unlink()


write_api_pages()


# ---------------------------------------------------------------------------
# References by another name. Code lives in ``_``-prefixed modules, so type hints name
# ``parallel_loader._loader.data_loader.DataLoader``; and a docstring may name an object
# where it is re-exported (``parallel_loader.as_tf_dataset``). Such a reference resolves to
# the page that documents the same object. An object with no public name stays unresolved.
# ---------------------------------------------------------------------------


def _public_name(target: str) -> str | None:
    """The documented name of the object ``target`` names, if that is another name."""
    if not target.startswith("parallel_loader."):
        return None
    module_name, rest = target, []
    while module_name:
        try:
            owner = importlib.import_module(module_name)
            break
        except ImportError:
            module_name, _, part = module_name.rpartition(".")
            rest.insert(0, part)
    if not module_name or not rest:
        return None
    home = HOMES.get((rest[0], id(getattr(owner, rest[0], None))))
    if home is None:
        return None
    public = ".".join([home, *rest])
    return public if public != target else None


def _resolve_elsewhere(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    public = _public_name(node["reftarget"])
    if public is None:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], public, node, contnode)


def _public_bases(app, name, obj, options, bases):
    """Leave out private base classes that have no public name: they are internals."""
    bases[:] = [
        base
        for base in bases
        if "._" not in base.__module__ or _public_name(f"{base.__module__}.{base.__qualname__}") is not None
    ]


def _no_type_docstring(app, what, name, obj, options, lines):
    """A constant without a docstring of its own shows none, not its type's (``dict``'s)."""
    type_doc = type(obj).__doc__
    if what in ("data", "attribute") and lines and isinstance(type_doc, str) and lines[0] in type_doc:
        lines.clear()


def _dataclass_factories(app, what, name, obj, options, signature, return_annotation):
    """A dataclass field's ``default_factory`` shows as ``...``: ``<factory>`` is no Python the parser reads."""
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-signature", _dataclass_factories)
    app.connect("autodoc-process-docstring", _no_type_docstring)
    app.connect("missing-reference", _resolve_elsewhere)
    app.connect("autodoc-process-bases", _public_bases)
