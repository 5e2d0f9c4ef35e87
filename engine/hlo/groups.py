"""Replica groups of HLO collectives, in the three forms XLA prints.

* explicit: ``{{0,1},{2,3}}`` (``{}`` = every device in one group);
* iota: ``[G,S]<=[dims]`` or ``[G,S]<=[dims]T(perm)``: the device ids
  ``0..N-1`` reshaped to ``dims``, transposed by ``perm``, reshaped to G groups of
  S (xla/hlo/ir/tile_assignment.h, IotaTileAssignment);
* mesh axes: ``mesh['a'=4,'b'=2], device_ids=(...) {'a'}``: devices laid out on a
  named mesh; a group is the devices that differ only along the listed axes. An
  axis may be a sub-axis ``'a':(pre)size``: axis ``a`` read as
  (``n/(pre*size)``, ``size``, ``pre``), the middle part
  (xla/hlo/ir/mesh_and_axis.cc, AxisRef).

Each form becomes one ``int64`` array ``[groups, group_size]`` of device ids.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..errors import HloError

__all__ = ["parse_replica_groups", "parse_source_target_pairs"]

_IOTA = re.compile(r"^\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?$")
_MESH = re.compile(r"^mesh\[(.*?)\](?:,\s*device_ids=\((.*?)\))?\s*\{(.*)\}$")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _iota_array(reshape: list[int], perm: list[int] | None) -> np.ndarray:
    a = np.arange(math.prod(reshape), dtype=np.int64).reshape(reshape)
    return a.transpose(perm) if perm else a


def parse_replica_groups(text: str, devices: int) -> np.ndarray:
    """Device-id groups ``[groups, group_size]`` of one ``replica_groups=`` value.

    Raises
    ------
    HloError (ValueError subclass message) when the value is malformed, names a
    device outside ``0..devices-1``, or groups of unequal size.
    """
    t = text.strip()
    if t in ("{}", ""):
        return np.arange(devices, dtype=np.int64)[None, :]
    if t.startswith("{"):
        groups = [_ints(g) for g in re.findall(r"\{([\d,\s]*)\}", t[1:-1])]
        if not groups or len({len(g) for g in groups}) != 1:
            raise HloError(f"replica_groups={t[:60]}: groups must be non-empty and of one size")
        arr = np.asarray(groups, dtype=np.int64)
    elif t.startswith("["):
        m = _IOTA.match(t.replace(" ", ""))
        if not m:
            raise HloError(f"replica_groups={t[:60]}: expected [G,S]<=[dims] or [G,S]<=[dims]T(perm)")
        shape, reshape = _ints(m.group(1)), _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else None
        if len(shape) != 2 or math.prod(shape) != math.prod(reshape) or (perm and sorted(perm) != list(range(len(reshape)))):
            raise HloError(f"replica_groups={t[:60]}: the iota's sizes or permutation do not fit")
        arr = _iota_array(reshape, perm).reshape(shape)
    elif t.startswith("mesh"):
        arr = _mesh_groups(t)
    else:
        raise HloError(f"replica_groups={t[:60]}: unknown form (expected {{{{0,1}},...}}, [G,S]<=[N] or mesh[...] {{axes}})")
    if arr.size and (arr.min() < 0 or arr.max() >= devices):
        raise HloError(f"replica_groups={t[:60]}: device id {int(arr.max())} outside the module's {devices} devices")
    return arr


def _mesh_groups(t: str) -> np.ndarray:
    m = _MESH.match(t)
    if not m:
        raise HloError(f"replica_groups={t[:60]}: expected mesh['axis'=size,...][, device_ids=(...)] {{'axis',...}}")
    names, sizes = [], []
    for item in m.group(1).split(","):
        name, _, size = item.strip().partition("=")
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    n = math.prod(sizes)
    ids_text = (m.group(2) or "").replace(" ", "")
    if not ids_text:
        ids = np.arange(n, dtype=np.int64)
    else:
        im = re.match(r"^\[([\d,]+)\](?:T\(([\d,]+)\))?$", ids_text)
        if im and (im.group(2) or math.prod(_ints(im.group(1))) == n and len(_ints(im.group(1))) > 1):
            ids = _iota_array(_ints(im.group(1)), _ints(im.group(2)) if im.group(2) else None).reshape(-1)
        else:
            ids = np.asarray(_ints(ids_text.strip("[]")), dtype=np.int64)
    if ids.size != n:
        raise HloError(f"replica_groups={t[:60]}: {ids.size} device ids for a mesh of {n}")
    # Read each (sub-)axis as its own dimension: an axis of size n cut at every sub-axis
    # boundary (pre and pre*size), major to minor; a sub-axis is the pieces between its cuts.
    wanted = []
    for ax in (a.strip() for a in split_axes(m.group(3))):
        sm = re.match(r"^['\"]?(.+?)['\"]?:\((\d+)\)(\d+)$", ax)
        wanted.append((sm.group(1), int(sm.group(2)), int(sm.group(3))) if sm else (ax.strip("'\""), 0, 0))
    if any(w[0] not in names for w in wanted):
        raise HloError(f"replica_groups={t[:60]}: an axis is not in the mesh {names}")
    dims: list[int] = []
    piece: dict[tuple[str, int], int] = {}  # (axis, cut) -> index of the piece just above that cut
    for name, size in zip(names, sizes):
        cuts = {1, size}
        for nm, pre, sub in wanted:
            if nm == name and sub:
                cuts |= {pre, pre * sub}
        ordered = sorted(cuts, reverse=True)
        for hi, lo in zip(ordered, ordered[1:]):
            if hi % lo:
                raise HloError(f"replica_groups={t[:60]}: a sub-axis of {name!r} does not divide its size {size}")
            piece[(name, hi)] = len(dims)
            dims.append(hi // lo)
        piece[(name, 1)] = len(dims)
    group_dims: list[int] = []
    for name, pre, sub in wanted:
        hi, lo = (pre * sub, pre) if sub else (sizes[names.index(name)], 1)
        group_dims.extend(range(piece[(name, hi)], piece[(name, lo)]) if hi > 1 else [])
    other = [d for d in range(len(dims)) if d not in group_dims]
    size = math.prod(dims[d] for d in group_dims)
    return ids.reshape(dims).transpose(other + group_dims).reshape(-1, size)


def split_axes(text: str) -> list[str]:
    return [a for a in text.split(",") if a.strip()]


def parse_source_target_pairs(text: str, devices: int) -> np.ndarray:
    """``{{0,1},{1,2}}`` -> ``[pairs, 2]`` (source, target) device ids."""
    pairs = [_ints(g) for g in re.findall(r"\{([\d,\s]*)\}", text.strip()[1:-1])]
    if any(len(p) != 2 for p in pairs):
        raise HloError(f"source_target_pairs={text[:60]}: every pair must be {{source,target}}")
    arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if arr.size and (arr.min() < 0 or arr.max() >= devices):
        raise HloError(f"source_target_pairs={text[:60]}: device id outside the module's {devices} devices")
    return arr
