"""The Python example's training text: the documentation of Python's standard library as the
interpreter ships it (Debian: the python3.11 packages), one document per docstring of a module,
class or function, read from the library's source files with `ast` (nothing is imported), in
file order. Byte-level tokens (vocabulary 256), so no tokenizer is downloaded; lengths run from
a few words to pages, a long tail as in real corpora."""

from __future__ import annotations

import ast
import os
import sysconfig
from typing import List

import numpy as np

# Folders of the standard library that hold tests, tools or installed packages, not its API.
SKIPPED = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "dist-packages", "__pycache__"}


def stdlib_documents(max_tokens: int, min_tokens: int = 16) -> List[np.ndarray]:
    """Each docstring's UTF-8 bytes (inputs then the last target: length + 1 tokens), cut to
    ``max_tokens + 1`` bytes; docstrings under ``min_tokens + 1`` bytes are left out."""
    root = sysconfig.get_paths()["stdlib"]
    docs: List[np.ndarray] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED and not d.startswith("config-"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue  # a file in another encoding or a grammar test: not documentation
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    text = ast.get_docstring(node)
                    if text:
                        b = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)[: max_tokens + 1]
                        if b.size >= min_tokens + 1:
                            docs.append(b.astype(np.int64))
    if not docs:
        raise RuntimeError(f"no docstrings under {root}; is Python's standard library installed?")
    return docs


# The LibTorch example's tokeniser (examples/libtorch_train/corpus.hpp): these 29 characters.
LIBTORCH_ALPHABET = " .,abcdefghijklmnopqrstuvwxyz"


def write_libtorch_corpus(path: str, max_tokens: int, min_tokens: int = 16) -> int:
    """The same docstrings as a ``dcp-libtorch-corpus 1`` file for ``dcp-train-libtorch --corpus``:
    lower-cased, every character outside its alphabet a space, runs of spaces one space, cut to
    ``max_tokens + 1`` characters. Returns the number of documents written."""
    index = {c: i for i, c in enumerate(LIBTORCH_ALPHABET)}
    lines = []
    for doc in stdlib_documents(10 * max_tokens, min_tokens):
        text = " ".join("".join(c if c in index else " " for c in bytes(doc.astype(np.uint8)).decode("utf-8",
                                                                                               "replace").lower()
                                ).split())[: max_tokens + 1]
        if len(text) >= min_tokens + 1:
            lines.append(f"{len(text)} " + " ".join(str(index[c]) for c in text))
    with open(path, "w") as f:
        f.write(f"dcp-libtorch-corpus 1\nalphabet {LIBTORCH_ALPHABET}\ndocuments {len(lines)}\n")
        f.write("\n".join(lines) + "\n")
    return len(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Writes the standard library's docstrings as a corpus file for "
                                 "dcp-train-libtorch --corpus.")
    ap.add_argument("path")
    ap.add_argument("--max-tokens", type=int, default=512)
    a = ap.parse_args()
    print(f"wrote {write_libtorch_corpus(a.path, a.max_tokens)} documents to {a.path}")
