"""Unit aliases and the conversion constants used at the input boundary.

Internally Podscope uses one unit per quantity: seconds as float for model
arithmetic (``_s``), integer nanoseconds in trace tables (``_ns``), bytes
(``_bytes``), bytes per second (``_bytes_per_s``) and FLOP/s (``_flops_per_s``).
Input files name their unit in the key and are converted once, at load.
"""

from __future__ import annotations

from typing import TypeAlias

Nanoseconds: TypeAlias = int
Seconds: TypeAlias = float
Bytes: TypeAlias = float
ChipId: TypeAlias = int

NS_PER_S = 1_000_000_000
GIB_BYTES = 1024**3
GB_BYTES = 1_000_000_000
TERA = 1e12
GIGA = 1e9
BITS_PER_BYTE = 8

#: Bytes per element by training precision (parameters / activations as stored).
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "int8": 1}
