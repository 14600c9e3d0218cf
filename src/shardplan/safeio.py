"""Reading user files defensively. A leaf module: only ``errors`` from the package.

Every file a user names (``--model``, ``--hardware``) goes through ``read_text``: a regular file only (a FIFO,
a device such as ``/dev/zero`` or a folder is refused before it is opened), at most ``MAX_FILE_BYTES`` read in
bounded fashion, UTF-8 text only (UTF-16/32 and other encodings are refused). ``load_json``/``load_yaml`` bound
the nesting depth and the number of values, counting YAML aliases as the copies they stand for, so that a
"billion laughs" file is refused before anything expands it. Every problem is one ``ConfigFileError`` line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardplan.errors import ConfigFileError

MAX_FILE_BYTES = 4 * 1024**2
"""Largest config/system file read (4 MiB; a Hugging Face config.json is a few KiB)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists in a file."""
MAX_VALUES = 100_000
"""Most values (scalars, mappings, lists) a file may hold once YAML aliases are expanded."""
MAX_NAME = 255
"""Longest file name component (POSIX NAME_MAX)."""

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def path_kind(path: Path, *, field: str) -> str:
    """``'file'``, ``'dir'``, ``'missing'`` or ``'other'`` (FIFO, device, socket) without opening ``path``.

    Names too long for the file system are refused here (``Path.exists`` would raise on them).
    """
    text = str(path)
    if any(len(part) > MAX_NAME for part in path.parts) or len(text) > 4096:
        raise ConfigFileError(f"file name too long ({len(text)} characters; at most {MAX_NAME} per component)",
                              field=field)
    if "\x00" in text:
        raise ConfigFileError("file name contains a NUL character", field=field)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "missing"
        if e.errno == errno.ENAMETOOLONG:
            raise ConfigFileError("file name too long", field=field) from None
        raise ConfigFileError(f"cannot read '{path}': {e.strerror or e}", field=field) from None
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "other"


def read_text(path: Path, *, field: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes, or a one-line ``ConfigFileError``."""
    kind = path_kind(path, field=field)
    if kind == "missing":
        raise ConfigFileError(f"no such file '{path}'", field=field)
    if kind == "dir":
        raise ConfigFileError(f"'{path}' is a folder, not a file", field=field)
    if kind != "file":
        raise ConfigFileError(f"'{path}' is not a regular file (a pipe, device or socket)", field=field)
    try:
        # O_NONBLOCK: should the file be swapped for a FIFO after the check, opening it does not block
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigFileError(f"'{path}' is not a regular file", field=field)
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigFileError(f"cannot read '{path}': {e.strerror or e}", field=field) from None
    if len(data) > limit:
        raise ConfigFileError(f"'{path}' is larger than {limit // 1024**2} MiB", field=field)
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise ConfigFileError(f"'{path}' is {name} text; save it as UTF-8", field=field)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"'{path}' is not UTF-8 text (byte {e.start})", field=field) from None


def check_size(data: Any, *, where: str, field: str, children: Callable[[Any], list[Any] | None] | None = None
               ) -> None:
    """Refuse data nested deeper than ``MAX_DEPTH`` or holding more than ``MAX_VALUES`` values.

    Shared sub-objects (YAML aliases) count once per reference, as the copies a reader would make; the walk
    stops as soon as a limit is passed, so it never expands anything. A self-referencing structure is refused.
    ``children`` lists a container's children (None for a leaf); by default dicts (keys and values) and lists.
    """
    kids = children or _data_children
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(obj: Any, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise ConfigFileError(f"{where} is nested deeper than {MAX_DEPTH} levels", field=field)
        inner = kids(obj)
        if inner is None:
            return 1
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigFileError(f"{where} refers to itself (a recursive YAML alias)", field=field)
        active.add(key)
        total = 1
        for child in inner:
            total += size(child, depth + 1)
            if total > MAX_VALUES:
                raise ConfigFileError(f"{where} holds more than {MAX_VALUES:,} values (YAML aliases count once "
                                      "per use)", field=field)
        active.discard(key)
        sizes[key] = total
        return total

    size(data, 0)


def _data_children(obj: Any) -> list[Any] | None:
    if isinstance(obj, dict):
        return list(obj.keys()) + list(obj.values())
    return obj if isinstance(obj, list) else None


def load_json(text: str, *, where: str, field: str) -> Any:
    """Parsed JSON with the depth and size limits; errors name the line."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigFileError(f"{where} is not valid JSON: {e.msg} at line {e.lineno}", field=field) from None
    except RecursionError:
        raise ConfigFileError(f"{where} is nested deeper than {MAX_DEPTH} levels", field=field) from None
    except ValueError:  # integers with more than 4300 digits
        raise ConfigFileError(f"{where} is not valid JSON: a number has too many digits", field=field) from None
    check_size(data, where=where, field=field)
    return data


def load_yaml(text: str, *, where: str, field: str) -> Any:
    """Parsed YAML (safe types only) with the depth and size limits checked on the composed node graph,
    before any Python object is built from it."""
    import yaml

    class _Bounded(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ConfigFileError(f"{where} is nested deeper than {MAX_DEPTH} levels", field=field)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = _Bounded(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, where=where, field=field)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            first += f" (line {mark.line + 1}, column {mark.column + 1})"
        raise ConfigFileError(f"{where} is not valid YAML: {first}", field=field) from None
    except ConfigFileError:
        raise
    except (ValueError, OverflowError):  # integers with more than 4300 digits
        raise ConfigFileError(f"{where} is not valid YAML: a number has too many digits", field=field) from None
    except RecursionError:
        raise ConfigFileError(f"{where} is nested deeper than {MAX_DEPTH} levels", field=field) from None
    finally:
        loader.dispose()


def _check_nodes(root: Any, *, where: str, field: str) -> None:
    """``check_size`` on YAML nodes: a mapping's or sequence's ``value`` lists its children."""
    import yaml

    def children(node: Any) -> list[Any] | None:
        if isinstance(node, yaml.ScalarNode):
            return None
        return [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value

    check_size(root, where=where, field=field, children=children)
