"""The package's docstrings read as the docs ask: sentences of 25 words or fewer, and a summary line first.

A sentence ends at ``.``, ``!``, ``?``, ``:`` or ``;`` followed by a space and a
capital, a backquote, an asterisk or a bracket; list items and ``Args:`` entries
count as sentences of their own. Code in double backquotes counts as one word.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import parallel_loader

PACKAGE = Path(parallel_loader.__file__).parent
MAX_WORDS = 25

_LITERAL = re.compile(r"``[^`]*``")
_BREAK = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z`*(\[])|\n\s*\n|\n\s*(?=[*-] )|\n\s*(?=\w[\w ,*]*: )")


def sentences(docstring: str) -> list[str]:
    """The sentences of ``docstring``, each on one line (literals kept whole)."""
    text = _LITERAL.sub(lambda m: m.group(0).replace(" ", "\u00b7"), docstring)
    return [" ".join(part.split()) for part in _BREAK.split(text) if part.strip()]


def docstrings(path: Path):
    """``(line, docstring)`` of the module, its classes and its functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node)
            if text:
                yield getattr(node, "lineno", 1), text


def test_the_splitter_splits_sentences_items_and_arguments():
    text = "One ``a b c``. Two: three.\n\nArgs:\n    x: the x.\n    y_z: the y.\n\n* item one\n* item two"
    assert sentences(text) == [
        "One ``a\u00b7b\u00b7c``.",
        "Two: three.",
        "Args:",
        "x: the x.",
        "y_z: the y.",
        "* item one",
        "* item two",
    ]


def test_every_docstring_sentence_has_at_most_25_words():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in docstrings(path):
            for sentence in sentences(text):
                if len(sentence.split()) > MAX_WORDS:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {len(sentence.split())} words: {sentence}")
    assert long == [], f"{len(long)} sentences over {MAX_WORDS} words:\n" + "\n".join(long)
