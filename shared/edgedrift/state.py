"""Snapshots of learning state that are safe to load: the edge agent's checkpoint format.

The edge agent checkpoints its whole loop (window, monitor, learner, batch model, counters) to disk and
resumes it after a restart. ``pickle`` would run arbitrary code when a crafted checkpoint is loaded and
cannot save river's ADWIN (a Rust object), so checkpoints use this format instead; :func:`loads` is
safe on bytes from an untrusted disk: it never imports a module outside ``edgedrift.``, never calls
``__init__``, ``__setstate__`` or ``__reduce__``, and raises :class:`StateError` for anything malformed.

**Format** (``edgedrift.state/1``): one ``.npz`` file (numpy ``savez``, members stored uncompressed,
read with ``allow_pickle=False``) holding every numpy array of the object graph as ``a0``, ``a1``, …
and the member ``__state__``: a UTF-8 JSON document as a uint8 array,
``{"format": "edgedrift.state/1", "meta": {...}, "root": NODE}``. A NODE is a JSON scalar (null, bool,
int, str, finite float) or an object with one tag:

* ``{"f": "nan" | "inf" | "-inf"}``: a non-finite float (JSON has none);
* ``{"l"|"t"|"s"|"fs": [NODE…], "id": n}``: list, tuple, set, frozenset;
* ``{"d"|"od": [[KEY, NODE]…], "id": n}``: dict, OrderedDict (keys: str, int, float, bool or None);
* ``{"dq": [NODE…], "maxlen": m | null, "id": n}``: ``collections.deque``;
* ``{"a": "a3", "id": n}``: a numpy array (any dtype but object; memory order kept);
* ``{"ns": "a4"}``: a numpy scalar (a 0-d array member);
* ``{"rng": "PCG64", "state": NODE, "id": n}``: a numpy ``Generator`` (its ``bit_generator.state``);
* ``{"o": "module:QualName", "attrs": {name: NODE}, "slots": {name: NODE}, "id": n}``: an object;
* ``{"r": n}``: the object, container or array that carries ``"id": n`` (identity is preserved).

**Allowlist.** Only instances of classes defined in ``edgedrift`` modules are walked: their ``__dict__``
and ``__slots__`` are saved; restoring uses ``cls.__new__(cls)`` and sets the attributes. The class is
resolved by module and qualified name, importing only modules named ``edgedrift.…``, and must be that
module's own class. A class may declare ``_state_transient`` (attribute names that are not saved and
come back as None, for the caller to re-bind) and a ``_state_restored()`` method, called after the whole
graph is rebuilt; :class:`~edgedrift.monitors.replayable.ReplayableDetector` uses the pair to rebuild a
river drift detector from an explicit list of river classes by replaying its inputs. Any other value
(a callable, a lambda, a file, a class from another package) makes :func:`dumps` raise
:class:`StateError` naming its attribute path, e.g. ``EdgeLoop.monitor._make``.

Arrays are saved by value: two distinct arrays that share memory (views) come back as two copies.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import sys
import zipfile
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np

__all__ = ["FORMAT", "StateError", "dumps", "loads"]

#: The format string of the JSON document; bump it when the node grammar changes meaning.
FORMAT = "edgedrift.state/1"
_STATE = "__state__"
_PACKAGE = "edgedrift"
#: Bit generators a ``Generator`` may be rebuilt from.
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_SEQUENCES: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "fs"}
_BUILTIN_BASES = (list, tuple, dict, set, frozenset, deque, np.ndarray, np.generic)


class StateError(ValueError):
    """A state that cannot be saved (unsupported value) or loaded (malformed, unsupported, wrong version)."""


# --- classes ---------------------------------------------------------------------------------------


def _generator_type() -> type | None:
    """numpy's ``Generator`` class when ``numpy.random`` is loaded, else None: no object can be one then,
    and asking ``np.random`` would import it (about 7 MB a process that never draws a number holds)."""
    random = sys.modules.get("numpy.random")
    return None if random is None else cast(type, random.Generator)


def _in_package(module: str) -> bool:
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(path: str) -> type:
    """The class named ``module:QualName``, for modules of the ``edgedrift`` package only."""
    module_name, sep, qualname = path.partition(":")
    if not sep or not _in_package(module_name) or not qualname:
        raise StateError(f"class {path!r} is not in the allowlist (classes of edgedrift modules)")
    parts = qualname.split(".")
    if not all(p.isidentifier() and not p.startswith("__") for p in parts):
        raise StateError(f"invalid class name {path!r}")
    if not all(p.isidentifier() and not p.startswith("__") for p in module_name.split(".")):
        raise StateError(f"invalid module name {module_name!r}")
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise StateError(f"cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in parts:
        obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
        if obj is None:
            raise StateError(f"{path!r} does not name a class")
    if not isinstance(obj, type) or obj.__module__ != module_name or obj.__qualname__ != qualname:
        raise StateError(f"{path!r} does not name a class defined in {module_name!r}")
    if issubclass(obj, _BUILTIN_BASES):
        raise StateError(f"class {path!r} derives from a container type, which is not supported")
    return obj


def _valid_attribute(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and not name.startswith("__")


def _transient(cls: type) -> tuple[str, ...]:
    names = getattr(cls, "_state_transient", ())
    return tuple(names) if isinstance(names, tuple) else ()


def _slot_names(cls: type) -> list[str]:
    """Every slot of ``cls`` and its bases (name-mangled as stored), without __dict__/__weakref__."""
    names: list[str] = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            if slot.startswith("__") and not slot.endswith("__"):
                slot = f"_{klass.__name__.lstrip('_')}{slot}"
            if slot not in names:
                names.append(slot)
    return names


# --- dumps ------------------------------------------------------------------------------------------


class _Encoder:
    """Walks an object graph into the JSON node tree and the array members."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._ids: dict[int, int] = {}
        self._keep: list[object] = []  # keeps every memoised object alive, so its id() stays unique
        self._open_tuples: set[int] = set()

    def _array_member(self, arr: np.ndarray) -> str:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = arr
        return name

    def _memo(self, obj: object, path: str) -> tuple[int, dict[str, Any] | None]:
        """(new id, None) for a first visit, (id, reference node) for a repeated one."""
        key = id(obj)
        if key in self._ids:
            if key in self._open_tuples:
                raise StateError(f"{path}: a tuple that contains itself is not supported")
            return self._ids[key], {"r": self._ids[key]}
        n = len(self._ids)
        self._ids[key] = n
        self._keep.append(obj)
        return n, None

    def key(self, k: object, path: str) -> Any:
        if k is None or type(k) in (str, int, bool):
            return k
        if type(k) is float:
            return self.scalar_float(k)
        raise StateError(f"{path}: dict key {k!r} of type {type(k).__name__} is not supported")

    @staticmethod
    def scalar_float(x: float) -> Any:
        if math.isfinite(x):
            return x
        return {"f": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}

    def encode(self, obj: object, path: str) -> Any:
        t = type(obj)
        if obj is None or t in (str, int, bool):
            return obj
        if t is float:
            return self.scalar_float(obj)  # type: ignore[arg-type]
        if isinstance(obj, np.generic):
            if obj.dtype.hasobject:
                raise StateError(f"{path}: numpy object scalars are not supported")
            return {"ns": self._array_member(np.asarray(obj))}
        n, ref = self._memo(obj, path)
        if ref is not None:
            return ref
        if t is np.ndarray:
            arr: np.ndarray = obj  # type: ignore[assignment]
            if arr.dtype.hasobject:
                raise StateError(f"{path}: numpy arrays of dtype object are not supported")
            return {"a": self._array_member(arr), "id": n}
        if t in _SEQUENCES:
            tag = _SEQUENCES[t]
            if t is tuple:
                self._open_tuples.add(id(obj))
            items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(cast(Iterable[Any], obj))]
            self._open_tuples.discard(id(obj))
            if t in (set, frozenset):
                for v in items:
                    if isinstance(v, dict) and "f" not in v:
                        raise StateError(f"{path}: set elements must be scalars")
            return {tag: items, "id": n}
        if t is dict or t is OrderedDict:
            pairs = [
                [self.key(k, path), self.encode(v, f"{path}[{k!r}]")]
                for k, v in obj.items()  # type: ignore[attr-defined]
            ]
            return {"d" if t is dict else "od": pairs, "id": n}
        if t is deque:
            dq: deque[Any] = obj  # type: ignore[assignment]
            items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(dq)]
            return {"dq": items, "maxlen": dq.maxlen, "id": n}
        if t is _generator_type():
            gen: np.random.Generator = obj  # type: ignore[assignment]
            name = type(gen.bit_generator).__name__
            if name not in _BIT_GENERATORS:
                raise StateError(f"{path}: bit generator {name} is not supported")
            return {"rng": name, "state": self.encode(gen.bit_generator.state, f"{path}.state"), "id": n}
        if _in_package(t.__module__):
            return self.instance(obj, n, path)
        kind = "callables" if callable(obj) else "values"
        raise StateError(f"{path}: {kind} of type {t.__module__}.{t.__qualname__} cannot be saved")

    def instance(self, obj: object, n: int, path: str) -> dict[str, Any]:
        cls = type(obj)
        cls_path = _class_path(cls)
        try:
            if _resolve(cls_path) is not cls:
                raise StateError(f"{cls_path!r} does not resolve to the class itself")
        except StateError as exc:
            raise StateError(f"{path}: {exc}") from None
        skip = set(_transient(cls))
        node: dict[str, Any] = {"o": cls_path, "id": n}
        attrs = {k: v for k, v in (getattr(obj, "__dict__", None) or {}).items() if k not in skip}
        slots = {k: getattr(obj, k) for k in _slot_names(cls) if k not in skip and hasattr(obj, k)}
        for name in (*attrs, *slots):
            if not _valid_attribute(name):
                raise StateError(f"{path}.{name}: attribute names must be identifiers not starting with __")
        if attrs:
            node["attrs"] = {k: self.encode(v, f"{path}.{k}") for k, v in attrs.items()}
        if slots:
            node["slots"] = {k: self.encode(v, f"{path}.{k}") for k, v in slots.items()}
        return node


def dumps(obj: object, meta: Mapping[str, Any] | None = None) -> bytes:
    """Snapshot ``obj`` (and everything it references) with the caller's JSON-able ``meta``.

    Raises StateError naming the attribute path of the first value that cannot be saved.
    """
    enc = _Encoder()
    try:
        root = enc.encode(obj, type(obj).__name__)
    except RecursionError:
        raise StateError("the object graph is nested too deeply") from None
    try:
        doc = json.dumps(
            {"format": FORMAT, "meta": dict(meta or {}), "root": root}, allow_nan=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as exc:
        raise StateError(f"meta is not JSON-serialisable: {exc}") from None
    buf = io.BytesIO()
    members: dict[str, Any] = {
        **enc.arrays,
        _STATE: np.frombuffer(doc.encode("utf-8"), dtype=np.uint8),
    }
    np.savez(buf, **members)
    return buf.getvalue()


# --- loads ------------------------------------------------------------------------------------------


class _Decoder:
    """Rebuilds the object graph from the node tree and the array members."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.objects: dict[int, object] = {}
        self.restored: list[object] = []

    def _array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name == _STATE or name not in self.arrays:
            raise StateError(f"missing array member {name!r}")
        arr = self.arrays[name]
        if not arr.flags.writeable:
            arr = arr.copy(order="K")
        return arr

    def _register(self, node: dict[str, Any], obj: object) -> object:
        n = node.get("id")
        if type(n) is not int or n in self.objects:
            raise StateError(f"invalid or repeated node id {n!r}")
        self.objects[n] = obj
        return obj

    def _list(self, items: Any) -> list[Any]:
        if not isinstance(items, list):
            raise StateError("a container node must hold a JSON array")
        return [self.decode(v) for v in items]

    def key(self, k: Any) -> Any:
        if k is None or type(k) in (str, int, bool, float):
            return k
        if isinstance(k, dict) and set(k) == {"f"}:
            return self.decode(k)
        raise StateError(f"invalid dict key node {k!r}")

    def decode(self, node: Any) -> Any:
        if node is None or type(node) in (str, int, bool, float):
            return node
        if not isinstance(node, dict):
            raise StateError(f"invalid node of type {type(node).__name__}")
        if "r" in node:
            ref = node["r"]
            if type(ref) is not int or ref not in self.objects:
                raise StateError(f"reference to unknown node {ref!r}")
            return self.objects[ref]
        if "f" in node:
            value = node["f"]
            if not isinstance(value, str) or value not in _FLOATS:
                raise StateError(f"invalid float node {node!r}")
            return _FLOATS[value]
        if "ns" in node:
            scalar = self._array(node["ns"])
            if scalar.ndim != 0:
                raise StateError("a numpy scalar member must be 0-d")
            return scalar[()]
        if "a" in node:
            return self._register(node, self._array(node["a"]))
        if "o" in node:
            return self.instance(node)
        for tag, kind in (("l", list), ("s", set), ("fs", frozenset), ("t", tuple)):
            if tag in node:
                if kind is list:
                    out: list[Any] = []
                    self._register(node, out)
                    out.extend(self._list(node[tag]))
                    return out
                if kind is set:
                    s: set[Any] = set()
                    self._register(node, s)
                    s.update(self._list(node[tag]))
                    return s
                return self._register(node, kind(self._list(node[tag])))
        if "d" in node or "od" in node:
            d: dict[Any, Any] = {} if "d" in node else OrderedDict()
            self._register(node, d)
            pairs = node.get("d", node.get("od"))
            if not isinstance(pairs, list):
                raise StateError("a dict node must hold a JSON array of pairs")
            for pair in pairs:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise StateError("a dict entry must be a [key, value] pair")
                d[self.key(pair[0])] = self.decode(pair[1])
            return d
        if "dq" in node:
            maxlen = node.get("maxlen")
            if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                raise StateError(f"invalid deque maxlen {maxlen!r}")
            dq: deque[Any] = deque(maxlen=maxlen)
            self._register(node, dq)
            dq.extend(self._list(node["dq"]))
            return dq
        if "rng" in node:
            return self._register(node, self.generator(node))
        raise StateError(f"unknown node {sorted(node)!r}")

    def generator(self, node: dict[str, Any]) -> np.random.Generator:
        name = node["rng"]
        if name not in _BIT_GENERATORS:
            raise StateError(f"bit generator {name!r} is not supported")
        bit_generator = getattr(np.random, name)()
        state = self.decode(node.get("state"))
        if not isinstance(state, dict):
            raise StateError("a generator's state must be a dict")
        bit_generator.state = state
        return np.random.Generator(bit_generator)

    def instance(self, node: dict[str, Any]) -> object:
        path = node["o"]
        if not isinstance(path, str):
            raise StateError("a class path must be a string")
        cls = _resolve(path)
        obj: object = cast(Any, cls).__new__(cls)
        self._register(node, obj)
        self.restored.append(obj)
        transient = _transient(cls)
        attrs = node.get("attrs", {})
        slots = node.get("slots", {})
        if not isinstance(attrs, dict) or not isinstance(slots, dict):
            raise StateError(f"{path}: attrs and slots must be JSON objects")
        slot_names = _slot_names(cls)
        for name in (*attrs, *slots):
            if not _valid_attribute(name):
                raise StateError(f"{path}: invalid attribute name {name!r}")
        if attrs or any(t not in slot_names for t in transient):
            if not hasattr(obj, "__dict__"):
                raise StateError(f"{path}: instances of this class have no __dict__")
            values = {name: self.decode(v) for name, v in attrs.items()}
            values.update({t: None for t in transient if t not in slot_names})
            vars(obj).update(values)
        for name, v in slots.items():
            if name not in slot_names:
                raise StateError(f"{path}: {name!r} is not a slot of this class")
            object.__setattr__(obj, name, self.decode(v))
        for t in transient:
            if t in slot_names:
                object.__setattr__(obj, t, None)
        return obj

    def finish(self) -> None:
        """Call ``_state_restored`` of every restored object that defines it, deepest first."""
        for obj in reversed(self.restored):
            hook = getattr(type(obj), "_state_restored", None)
            if callable(hook):
                hook(obj)


def _reject_constant(name: str) -> Any:
    raise StateError(f"the JSON document contains {name}")


def _members(data: bytes) -> dict[str, np.ndarray]:
    """The npz members, refusing compressed members (no decompression bombs) and pickled arrays."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED:
                raise StateError(f"member {info.filename!r} is compressed; only stored members are read")
            if not info.filename.endswith(".npy"):
                raise StateError(f"unexpected member {info.filename!r}")
    npz = np.load(io.BytesIO(data), allow_pickle=False)
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise StateError("not an npz archive")
    with npz:
        return {name: npz[name] for name in npz.files}


def loads(data: bytes) -> tuple[object, dict[str, Any]]:
    """Rebuild the object saved by :func:`dumps`; returns ``(obj, meta)``.

    Raises StateError (and nothing else) for every input that is not a valid ``edgedrift.state/1``
    snapshot of allowlisted classes.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise StateError(f"expected bytes, got {type(data).__name__}")
    try:
        members = _members(bytes(data))
        raw = members.pop(_STATE, None)
        if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
            raise StateError(f"no {_STATE} member (uint8 JSON document)")
        doc = json.loads(raw.tobytes().decode("utf-8"), parse_constant=_reject_constant)
        if not isinstance(doc, dict):
            raise StateError("the state document must be a JSON object")
        if doc.get("format") != FORMAT:
            raise StateError(f"unsupported state format {doc.get('format')!r}; expected {FORMAT!r}")
        meta = doc.get("meta")
        if not isinstance(meta, dict) or "root" not in doc:
            raise StateError("the state document needs a meta object and a root")
        decoder = _Decoder(members)
        obj = decoder.decode(doc["root"])
        decoder.finish()
        return obj, meta
    except StateError:
        raise
    except RecursionError:
        raise StateError("the state document is nested too deeply") from None
    except Exception as exc:  # any failure on untrusted bytes is a malformed state
        raise StateError(f"malformed state ({type(exc).__name__}: {exc})") from None
