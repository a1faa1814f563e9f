"""The search's step walk (SegmentWalk): each CUDA stream's four allocator sums at its first peak in each phase, and a
block's ops replayed from a recording of the same block instead of walked again, with the same sums, peaks and live tensors.

Why a replay is exact. A walk's state is what is live (each tensor's key, description, kind, block and stream) and, per
stream, four sums that each live block adds to (parcalc.core.allocator.reserved_of_sums's terms), plus the current phase's
first peak per stream. A block's ops (memory_pipeline_stage's layer forward, its recomputation and backward) are a fixed
function of their arguments (the step's shapes, TP degree, checkpointing policy) and of the live state of the keys they
touch: the keys under their layer's prefix `m{j}.L{i}.` and the tensors named to them (the layer's input, the gradient
it receives and the one it passes on). Walk.replayable names both. The first call of a kind runs the ops and records,
tensor by tensor, what they read (each touched key's state before the call), what they left (the keys they made live,
in order, and the ones they took away) and, per stream, the running change of the four sums at each allocation. A later
call of the same kind on other keys whose touched state is the same (the layer's live keys compared whole, each named
tensor one by one) would run the same ops with the same sizes in the same order, so:
- each stream's sums change by the recorded totals (sums of whole blocks: integers far below 2**53, exact in any order);
- each stream's first peak within the call is where the recording's running change first reaches its maximum, taken
  only where it beats the phase's peak so far (the walk's own rule: a later allocation counts only if strictly higher);
- where the call starts a new layer's segment (its first tensor under the prefix, SegmentWalk.alloc) the recording is cut
  there and its two parts applied on either side of the new segment;
- the live tensors end as the recording's did: the taken keys removed, the relabelled ones changed in place, the new
  ones added in the order they last became live, so that the order of `live` (which accumulate() follows) is the walk's.
A call whose ops touch anything else (another layer's keys, the phase, `live` as a whole) is never replayed; a call whose
touched state differs from every recording of its kind runs whole (and is recorded, up to a few per kind). Ground truth:
tests/test_fit_search_replay.py holds replayed walks equal to whole ones, segment by segment and tensor by tensor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from parcalc.core.allocator import K_MIN_LARGE_ALLOC, K_SMALL_SIZE, block_bytes, segment_bytes
from parcalc.core.memory_fsdp import STREAMS, stream_of
from parcalc.core.memory_walk import LiveTensor, Walk

Sums = tuple[float, float, float, float]  # all blocks, small ones, medium ones, large ones' segments (bytes)
Segment = tuple[str, dict[str, Sums]]  # a phase and each stream's sums at its first peak in it
Held = tuple[list[float], float, int, float, str]  # a live tensor's stream's sums, its block, which sum, what there, the stream
LAYER_MARK = "\0layer "
_BLOCK_KEY = re.compile(r"^m\d+\.(?:s\d+\.)?L(\d+)\.")
_SPACE_KEY = re.compile(r"^((?:m\d+\.)?(?:s\d+\.)?L\d+)\.(.+)$")  # a block tensor's key: its layer's prefix and its own name
T = TypeVar("T")


class SegmentWalk(Walk):
    """A step walk that keeps, for each phase it enters (each assignment of `phase`) and each stream
    (memory_fsdp.stream_of), the stream's four sums at its first peak within that phase. Nothing else of the peak.
    `replay`: replayable calls are replayed from recordings where they can be (module docstring)."""

    def __init__(self, layer_keys: bool = False, replay: bool = True) -> None:
        self.segments: list[Segment] = []
        self._best: dict[str, Sums] = {}
        self._phase = ""
        # a pipeline stage's phases are its micro-batches: a new segment also starts at each layer's first block tensor
        # (memory_torchtitan.BlockWalk's keys, `m{j}.L{i}.`), labelled `phase` + LAYER_MARK + i
        self._layer_keys = layer_keys
        self._layer = -1
        self._replay = replay
        self._recording: _Recorder | None = None
        super().__init__()
        self.sums: dict[str, list[float]] = {s: [0.0, 0.0, 0.0, 0.0] for s in STREAMS}
        # each live tensor's stream's sums, and what it added to them (its block, which sum, what there) and its stream:
        # free() and rename() then need no second look-up of its stream or block
        self._held: dict[str, Held] = {}
        # the live block tensors by layer prefix (`m{j}.L{i}`): their names after it, tensor and stream, in `live`'s order
        self._spaces: dict[str, dict[str, tuple[LiveTensor, str]]] = {}

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        if self._recording is not None:
            self._recording.ok = False  # a call that moves the phase is not replayed
        self._phase, self._best, self._layer = value, {}, -1
        self.segments.append((value, self._best))

    def alloc(self, key: str, size: float, kind: str, what: str) -> None:
        if size <= 0:
            return
        live = self.live
        if key in live:
            raise AssertionError(f"tensor {key} allocated twice")  # a bug in the walk, not user input
        info = _KEY_INFO.get(key)
        if info is None:
            info = _key_info(key)
        stream, layer, space = info
        if layer >= 0 and self._layer_keys and layer != self._layer:
            self._layer, self._best = layer, {}
            self.segments.append((f"{self._phase}{LAYER_MARK}{layer}", self._best))
        block, part, counted = _block(size)
        live[key] = tensor = _live_tensor(what, kind, block)
        sums = self.sums[stream]
        self._held[key] = (sums, block, part, counted, stream)
        sums[0] += block
        sums[part] += counted
        best = self._best.get(stream)
        if best is None or sums[0] > best[0]:
            self._best[stream] = (sums[0], sums[1], sums[2], sums[3])
        if space is not None:
            self._space(space[0])[space[1]] = (tensor, stream)

    def alloc_all(self, allocs: tuple[tuple[str, float, str, str], ...]) -> None:
        """alloc() of each in turn, at once where none of the keys is a block tensor's (no segment, no layer space) and no
        call is being recorded: each stream's sums only grow over a run of allocations (every block > 0), so its highest
        point in the run is its end, which beats the phase's peak so far exactly where some point of the run would have:
        one look at the end keeps what alloc() one by one keeps (the walk's first-peak rule)."""
        kept = _ALLOC_RUNS.get(id(allocs))
        if kept is None or kept[0] is not allocs:
            if len(_ALLOC_RUNS) >= 256:
                _ALLOC_RUNS.clear()
            kept = _ALLOC_RUNS[id(allocs)] = (allocs, _alloc_run(allocs))
        run = kept[1]
        if self._recording is not None or not run:
            Walk.alloc_all(self, allocs)
            return
        tensors, totals = run
        live, held, sums_of = self.live, self._held, self.sums
        before = len(live)
        for key, tensor, block, part, counted, stream in tensors:
            live[key] = tensor
            held[key] = (sums_of[stream], block, part, counted, stream)
        if len(live) != before + len(tensors):
            raise AssertionError("a tensor allocated twice")  # a bug in the walk, not user input
        for stream, added in totals:
            sums = sums_of[stream]
            sums[0] += added[0]
            sums[1] += added[1]
            sums[2] += added[2]
            sums[3] += added[3]
            best = self._best.get(stream)
            if best is None or sums[0] > best[0]:
                self._best[stream] = (sums[0], sums[1], sums[2], sums[3])

    def free(self, *keys: str) -> None:
        live, held = self.live, self._held
        for key in keys:
            if live.pop(key, None) is None:
                continue
            sums, block, part, counted, _ = held.pop(key)  # a block is its own block (512-byte multiples)
            sums[0] -= block
            sums[part] -= counted
            space = _SPACE_OF.get(key, _UNSEEN)
            if space is _UNSEEN:
                space = _space_of(key)
            if space is not None:
                del self._spaces[space[0]][space[1]]

    def rename(self, old: str, new: str, what: str | None = None, kind: str | None = None) -> None:
        tensor = self.live.pop(old)
        self.live[new] = renamed = _live_tensor(what or tensor.what, kind or tensor.kind, tensor.bytes)
        self._held[new] = held = self._held.pop(old)  # the block stays in its stream's pool (StreamWalk.rename)
        space = _space_of(old)
        if space is not None:
            del self._spaces[space[0]][space[1]]
        space = _space_of(new)
        if space is not None:
            self._space(space[0])[space[1]] = (renamed, held[4])

    def relabel(self, key: str, what: str, kind: str | None = None) -> None:
        tensor = self.live[key]
        self.live[key] = relabelled = LiveTensor(what, kind or tensor.kind, tensor.bytes)
        space = _space_of(key)
        if space is not None:
            self._spaces[space[0]][space[1]] = (relabelled, self._held[key][4])

    def keys_under(self, prefix: str, suffix: str) -> list[str]:
        if _SPACE_PREFIX.match(prefix) is None:
            return super().keys_under(prefix, suffix)
        return [prefix + name for name in self._spaces.get(prefix[:-1], _EMPTY) if name.endswith(suffix)]

    def replayable(self, fn: Callable[..., T], layer: str, names: tuple[str, ...], *args: Hashable) -> T:
        if not self._replay or self._recording is not None:
            return fn(self, layer, names, *args)
        shape = _SHAPES.get((layer, names))
        if shape is None:
            if len(_SHAPES) >= _MAX_SHAPES:
                _SHAPES.clear()
            shape = _SHAPES[(layer, names)] = _names_shape(layer, names)
        if not shape:  # not a block's prefix: its keys are not kept by layer (_space_of)
            return fn(self, layer, names, *args)
        kind = (fn, args, shape)
        recordings = _RECORDINGS.get(kind)
        if recordings is None:
            if len(_RECORDINGS) >= _MAX_KINDS:
                _RECORDINGS.clear()
            recordings = _RECORDINGS[kind] = []
        for recording in recordings:
            if recording is None:  # the kind's ops touch what a replay cannot follow: always walked
                return fn(self, layer, names, *args)
            done, result = _replayed(self, recording, layer, names)
            if done:
                return result  # type: ignore[return-value]
        if len(recordings) >= _MAX_RECORDINGS:
            return fn(self, layer, names, *args)
        recorder = _Recorder(self, layer, names)
        result = recorder.run(fn, args)
        recordings.append(recorder.recording(result))
        return result

    def _space(self, name: str) -> dict[str, tuple[LiveTensor, str]]:
        space = self._spaces.get(name)
        if space is None:
            space = self._spaces[name] = {}
        return space


_EMPTY: dict[str, Any] = {}
_SPACE_PREFIX = re.compile(r"^(?:m\d+\.)?(?:s\d+\.)?L\d+\.$")
# what a walk looks up again and again by a tensor's key, kept across walks (the keys repeat)
_STREAM_OF: dict[str, str] = {}  # memory_fsdp.stream_of
_LAYER_OF: dict[str, int] = {}  # the layer of a block tensor's key `m{j}.L{i}.` (BlockWalk), -1 for any other key
_SPACE_OF: dict[str, tuple[str, str] | None] = {}  # a block tensor's key: (its layer's prefix, its name after it)
_UNSEEN = ("", "")  # a key _SPACE_OF has not seen yet


_KEY_INFO: dict[str, tuple[str, int, tuple[str, str] | None]] = {}  # a key's stream, _layer_of and _space_of, in one look-up


def _key_info(key: str) -> tuple[str, int, tuple[str, str] | None]:
    stream = _STREAM_OF.get(key)
    if stream is None:
        stream = _STREAM_OF[key] = stream_of(key)
    info = _KEY_INFO[key] = (stream, _layer_of(key), _space_of(key))
    return info


AllocRun = tuple[tuple[tuple[str, LiveTensor, float, int, float, str], ...], tuple[tuple[str, Sums], ...]] | None
# SegmentWalk.alloc_all's runs, by the identity of its allocations (memory_fsdp._sharded_allocs hands every walk of a stage
# the same tuple; the entry holds it, so no other object takes its id while it is kept): a look-up, not a hash of ~1,000 items
_ALLOC_RUNS: dict[int, tuple[tuple[tuple[str, float, str, str], ...], AllocRun]] = {}


def _alloc_run(allocs: tuple[tuple[str, float, str, str], ...]) -> AllocRun:
    """Each allocation's key, tensor, block, sum, what there and stream (those of size > 0), and each stream's four sums'
    growth over them; None where a key is a block tensor's (it may start a segment or join its layer's space: alloc())."""
    tensors = []
    totals: dict[str, list[float]] = {}
    for key, size, kind, what in allocs:
        if size <= 0:
            continue
        stream, layer, space = _KEY_INFO.get(key) or _key_info(key)
        if layer >= 0 or space is not None:
            return None
        block, part, counted = _block(size)
        tensors.append((key, _live_tensor(what, kind, block), block, part, counted, stream))
        sums = totals.setdefault(stream, [0.0, 0.0, 0.0, 0.0])
        sums[0] += block
        sums[part] += counted
    return tuple(tensors), tuple((stream, (v[0], v[1], v[2], v[3])) for stream, v in totals.items())


def _layer_of(key: str) -> int:
    layer = _LAYER_OF.get(key)
    if layer is None:
        found = _BLOCK_KEY.match(key)
        layer = _LAYER_OF[key] = int(found.group(1)) if found is not None else -1
    return layer


def _space_of(key: str) -> tuple[str, str] | None:
    try:
        return _SPACE_OF[key]
    except KeyError:
        found = _SPACE_KEY.match(key)
        space = _SPACE_OF[key] = (found.group(1), found.group(2)) if found is not None else None
        return space


@lru_cache(maxsize=65536)
def _live_tensor(what: str, kind: str, block: float) -> LiveTensor:
    """LiveTensor(what, kind, block), one object for equal ones (it is frozen): a search's walks make a few hundred
    thousand of them, of a few hundred distinct ones."""
    return LiveTensor(what, kind, block)


@lru_cache(maxsize=65536)
def _block(size: float) -> tuple[float, int, float]:
    """A request's block (allocator.block_bytes), which of the sums it adds to (1 small, 2 medium, 3 large) and what it
    adds there (the block; a large one's segment): the terms of allocator.reserved_bytes. Walks repeat a few sizes."""
    block = block_bytes(size)
    if block <= K_SMALL_SIZE:
        return block, 1, block
    if block < K_MIN_LARGE_ALLOC:
        return block, 2, block
    return block, 3, segment_bytes(block)


# -- replaying ---------------------------------------------------------------------------------------------------------

Name = tuple[int, str]  # a key as the call names it: its prefix (0: the layer's `m{j}.L{i}.`, k: the call's name k - 1, last: "") and the rest
Piece = tuple[tuple[str, Sums | None, Sums], ...]  # per stream: the running change at its first peak (None: no allocation), the total


@dataclass(frozen=True)
class Recording:
    """One call's ops as a replay needs them (module docstring)."""

    space_before: dict[str, tuple[LiveTensor, str]]  # the layer's live keys before the call (by name after the prefix)
    named_before: tuple[tuple[int, str, tuple[LiveTensor, str] | None], ...]  # each touched key under a call's name, before
    whole: Piece  # the sums' changes, the call in one segment
    cut: tuple[Piece, Piece] | None  # before and from its first tensor under the layer's prefix (None: it makes none)
    taken: tuple[Name, ...]  # keys live before that the call took away (or moved to the end)
    relabelled: tuple[tuple[Name, LiveTensor], ...]  # keys live before and after, in place, described anew
    added: tuple[tuple[Name, LiveTensor, str, float, int, float], ...]  # keys made live, in that order: tensor, stream, block, sum, what there
    result: Name | str | None  # the call's return value: a key it names, or a plain value


_RECORDINGS: dict[tuple[object, ...], list[Recording | None]] = {}
_MAX_KINDS = 4096  # distinct (function, arguments, names' shape): a search asks a few hundred
_SHAPES: dict[tuple[str, tuple[str, ...]], tuple[object, ...]] = {}  # _names_shape of a call's layer and names
_MAX_SHAPES = 1 << 16
_MAX_RECORDINGS = 4  # per kind: where the touched state differs (a cached output already live or not, say); one in practice


def _names_shape(layer: str, names: tuple[str, ...]) -> tuple[object, ...]:
    """What of the call's names a recording's ops could depend on besides their state: each name's stream, whether it
    is itself a block tensor's key (its layer marks a segment) or under the layer's prefix, and which names start
    with which (a key under one name could be under another); () where `layer` is not a block's prefix `m{j}.L{i}`."""
    own = layer + "."
    if _SPACE_PREFIX.match(own) is None:
        return ()
    return tuple((_STREAM_OF.get(n) or stream_of(n), _layer_of(n) >= 0, n.startswith(own), tuple(m.startswith(n) for m in names))
                 for n in names)  # fmt: skip


def _replayed(walk: SegmentWalk, recording: Recording, layer: str, names: tuple[str, ...]) -> tuple[bool, object]:
    """The call replayed on `walk` (True, its result), or (False, None) where its touched state is not the recording's."""
    if walk._spaces.get(layer, _EMPTY) != recording.space_before:
        return False, None
    prefixes = (layer + ".", *names, "")
    live, held = walk.live, walk._held
    for k, rest, before in recording.named_before:
        key = prefixes[k] + rest
        tensor = live.get(key)
        if before is None:
            if tensor is not None:
                return False, None
        elif tensor is None or tensor != before[0] or held[key][4] != before[1]:
            return False, None
    if recording.cut is not None and walk._layer_keys and (index := _layer_of(prefixes[0])) >= 0 and index != walk._layer:
        _apply(walk, recording.cut[0])
        walk._layer, walk._best = index, {}
        walk.segments.append((f"{walk._phase}{LAYER_MARK}{index}", walk._best))
        _apply(walk, recording.cut[1])
    else:
        _apply(walk, recording.whole)
    spaces, own = walk._spaces, walk._space(layer)
    for k, rest in recording.taken:
        key = prefixes[k] + rest
        del live[key], held[key]
        if k == 0:
            del own[rest]
        elif (space := _space_of(key)) is not None:
            del spaces[space[0]][space[1]]
    for (k, rest), tensor in recording.relabelled:
        key = prefixes[k] + rest
        live[key] = tensor
        if k == 0:
            own[rest] = (tensor, held[key][4])
        elif (space := _space_of(key)) is not None:
            spaces[space[0]][space[1]] = (tensor, held[key][4])
    sums = walk.sums
    for (k, rest), tensor, stream, block, part, counted in recording.added:
        key = prefixes[k] + rest
        live[key] = tensor
        held[key] = (sums[stream], block, part, counted, stream)
        if k == 0:
            own[rest] = (tensor, stream)
        elif (space := _space_of(key)) is not None:
            walk._space(space[0])[space[1]] = (tensor, stream)
    result = recording.result
    return True, prefixes[result[0]] + result[1] if isinstance(result, tuple) else result


def _apply(walk: SegmentWalk, piece: Piece) -> None:
    """A recorded piece's changes to each stream's sums and the phase's first peak (module docstring)."""
    for stream, at_peak, total in piece:
        sums = walk.sums[stream]
        if at_peak is not None:
            best = walk._best.get(stream)
            if best is None or sums[0] + at_peak[0] > best[0]:
                walk._best[stream] = (sums[0] + at_peak[0], sums[1] + at_peak[1], sums[2] + at_peak[2], sums[3] + at_peak[3])
        sums[0] += total[0]
        sums[1] += total[1]
        sums[2] += total[2]
        sums[3] += total[3]


class _LoggedLive(dict[str, LiveTensor]):
    """`live` while a call is recorded: the keys the ops look at are touched, and a look at the whole spoils the recording."""

    recorder: _Recorder

    def __contains__(self, key: object) -> bool:
        self.recorder.touch(key)  # type: ignore[arg-type]
        return dict.__contains__(self, key)

    def __getitem__(self, key: str) -> LiveTensor:
        self.recorder.touch(key)
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        self.recorder.touch(key)
        return dict.get(self, key, default)

    def _spoilt(self, *args: Any, **kwargs: Any) -> Any:  # a look at the whole, or a change the walk does not make
        self.recorder.ok = False

    def _looked(name: str) -> Any:  # type: ignore[misc]
        def method(self: _LoggedLive, *args: Any, **kwargs: Any) -> Any:
            self._spoilt()
            return getattr(dict, name)(self, *args, **kwargs)

        return method

    def _changed(name: str) -> Any:  # type: ignore[misc]
        def method(self: _LoggedLive, *args: Any, **kwargs: Any) -> Any:
            if not self.recorder.inside:  # the walk's own alloc / free / rename / relabel change it; nothing else may
                self._spoilt()
            return getattr(dict, name)(self, *args, **kwargs)

        return method

    __iter__ = _looked("__iter__")
    __len__ = _looked("__len__")
    __reversed__ = _looked("__reversed__")
    __eq__ = _looked("__eq__")
    __ne__ = _looked("__ne__")
    __or__ = _looked("__or__")
    __repr__ = _looked("__repr__")
    keys = _looked("keys")
    values = _looked("values")
    items = _looked("items")
    copy = _looked("copy")
    __setitem__ = _changed("__setitem__")
    __delitem__ = _changed("__delitem__")
    __ior__ = _changed("__ior__")
    pop = _changed("pop")
    popitem = _changed("popitem")
    setdefault = _changed("setdefault")
    update = _changed("update")
    clear = _changed("clear")
    del _looked, _changed


class _Recorder:
    """A call run on the walk with its ops logged (module docstring)."""

    def __init__(self, walk: SegmentWalk, layer: str, names: tuple[str, ...]) -> None:
        self.walk, self.layer, self.names = walk, layer, names
        self.ok = True
        self.before: dict[str, tuple[LiveTensor, str] | None] = {}  # each touched key's state before the call
        self.events: list[tuple[str, float, int, float, bool]] = []  # stream, block change, which sum, its change, allocated
        self.first_own = -1  # the event of the first allocation under the layer's prefix
        self.inserted: dict[str, None] = {}  # keys made live in the call, in the order they last were
        self.taken: set[str] = set()  # keys taken out of live in the call
        self.relabelled: set[str] = set()
        self.inside = False  # in the walk's own alloc / free / rename / relabel

    def touch(self, key: str) -> None:
        if key not in self.before:
            tensor = dict.get(self.walk.live, key)
            self.before[key] = None if tensor is None else (tensor, self.walk._held[key][4])

    def run(self, fn: Callable[..., T], args: tuple[Hashable, ...]) -> T:
        walk = self.walk
        space = walk._spaces.get(self.layer)
        self.space_before = dict(space) if space else {}
        logged = _LoggedLive(walk.live)
        logged.recorder = self
        walk.live, walk._recording = logged, self
        walk.alloc, walk.free, walk.rename, walk.relabel = self.alloc, self.free, self.rename, self.relabel  # type: ignore[method-assign]
        try:
            return fn(walk, self.layer, self.names, *args)
        finally:
            del walk.alloc, walk.free, walk.rename, walk.relabel
            walk.live, walk._recording = dict(dict.items(logged)), None  # (dict(logged) would look at every key)

    def alloc(self, key: str, size: float, kind: str, what: str) -> None:
        if size <= 0:
            return
        self.touch(key)
        self.inside = True
        SegmentWalk.alloc(self.walk, key, size, kind, what)
        self.inside = False
        _, block, part, counted, stream = self.walk._held[key]
        own = key.startswith(self.layer + ".")
        if own and self.first_own < 0:
            self.first_own = len(self.events)
        elif not own and key[0] == "m" and _layer_of(key) >= 0:
            self.ok = False  # another layer's tensor would mark a segment of its own
        self.events.append((stream, block, part, counted, True))
        self.inserted.pop(key, None)
        self.inserted[key] = None

    def free(self, *keys: str) -> None:
        for key in keys:
            self.touch(key)
            held = self.walk._held.get(key) if dict.__contains__(self.walk.live, key) else None
            if held is not None:
                _, block, part, counted, stream = held
                self.events.append((stream, -block, part, -counted, False))
                self.taken.add(key)
            self.inside = True
            SegmentWalk.free(self.walk, key)
            self.inside = False

    def rename(self, old: str, new: str, what: str | None = None, kind: str | None = None) -> None:
        self.touch(old)
        self.touch(new)
        if dict.__contains__(self.walk.live, new):
            self.ok = False  # the new key's old tensor overwritten in place: not followed
        self.inside = True
        SegmentWalk.rename(self.walk, old, new, what, kind)
        self.inside = False
        self.taken.add(old)
        self.inserted.pop(new, None)
        self.inserted[new] = None

    def relabel(self, key: str, what: str, kind: str | None = None) -> None:
        self.touch(key)
        self.inside = True
        SegmentWalk.relabel(self.walk, key, what, kind)
        self.inside = False
        self.relabelled.add(key)

    def _name(self, key: str) -> Name | None:
        """The key as the call names it (its prefix: the layer's, or the longest of its names followed by '.' or '+')."""
        if key.startswith(self.layer + "."):
            return 0, key[len(self.layer) + 1 :]
        if not key:  # the empty key (an op's optional input not given: `free(saved_input="")`)
            return len(self.names) + 1, ""
        found: Name | None = None
        for k, name in enumerate(self.names, start=1):
            if key == name:
                return k, ""
            if key.startswith(name) and key[len(name)] in ".+" and (found is None or len(name) > len(self.names[found[0] - 1])):
                found = (k, key[len(name) :])
        return found

    def recording(self, result: object) -> Recording | None:
        """The recording of the call that ran, or None where it cannot be replayed."""
        if not self.ok or any(n.startswith(self.layer + ".") for n in self.names):
            return None
        named = {key: self._name(key) for key in self.before}
        if any(name is None for name in named.values()):
            return None  # a key neither under the layer's prefix nor a name's
        if any("\0" in key for key in self.before):
            return None
        live, held = self.walk.live, self.walk._held
        as_result: Name | str | None
        if isinstance(result, str) and result:
            if (as_result := self._name(result)) is None:
                return None
        elif result is None or isinstance(result, str):
            as_result = result
        else:
            return None
        named_before = tuple((n[0], n[1], self.before[key]) for key, n in named.items() if n is not None and n[0] > 0)
        taken = tuple(n for key, n in named.items() if n is not None and self.before[key] is not None and key in self.taken)
        relabelled = tuple((n, live[key]) for key, n in named.items()
                           if n is not None and self.before[key] is not None and key not in self.taken and key in self.relabelled)  # fmt: skip
        added = tuple((named[key], live[key], *_held_parts(held[key])) for key in self.inserted if key in live)
        whole = _piece(self.events)
        cut = None if self.first_own < 0 else (_piece(self.events[: self.first_own]), _piece(self.events[self.first_own :]))
        return Recording(self.space_before, named_before, whole, cut, taken, relabelled, added, as_result)  # type: ignore[arg-type]


def _held_parts(held: Held) -> tuple[str, float, int, float]:
    _, block, part, counted, stream = held
    return stream, block, part, counted


def _piece(events: list[tuple[str, float, int, float, bool]]) -> Piece:
    """Per stream: the running change of the four sums at its first highest allocation, and the change over all."""
    running: dict[str, list[float]] = {}
    peak: dict[str, Sums] = {}
    for stream, block, part, counted, allocated in events:
        sums = running.get(stream)
        if sums is None:
            sums = running[stream] = [0.0, 0.0, 0.0, 0.0]
        sums[0] += block
        sums[part] += counted
        if allocated and (stream not in peak or sums[0] > peak[stream][0]):
            peak[stream] = (sums[0], sums[1], sums[2], sums[3])
    return tuple((stream, peak.get(stream), (sums[0], sums[1], sums[2], sums[3])) for stream, sums in running.items())
