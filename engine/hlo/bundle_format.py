"""The XLA module bundle's file names and keys: one declaration for its writer and its readers.

A bundle is ``NAME.hlo.txt.gz`` (gzip of ``compiled.as_text()`` for a TPU target) beside
``NAME.xla.json`` (the sidecar: target, versions, XLA's ``memory_analysis`` and
``cost_analysis``, the compile time, or why XLA refused the program for lack of HBM).
Constants only, so any module can import it without pulling anything else in.
"""

from __future__ import annotations

__all__ = ["FORMAT", "FORMAT_VERSION", "LIVE_PEAK_SUFFIX", "MAX_XLA_FLAGS", "MEMORY_KEYS", "MODULE_SUFFIX", "OOM_KEYS", "OPTIONAL_KEYS",
           "SIDE_SUFFIX", "TOP_KEYS", "XLA_FLAG_NAME"]

#: the sidecar's ``format`` value
FORMAT = "podscope-xla-bundle"
#: the sidecar's ``format_version`` value; a reader refuses versions it does not know
FORMAT_VERSION = 1

#: the sidecar file: ``NAME.xla.json``
SIDE_SUFFIX = ".xla.json"
#: the module file: ``NAME.hlo.txt.gz``
MODULE_SUFFIX = ".hlo.txt.gz"
#: what the compiler holds live at the module's peak (:meth:`engine.hlo.live_range.LivePeak.to_json`, read from its
#: live-range, buffer-assignment and module dumps), written when the capture asks for it, also when XLA ran out of HBM
LIVE_PEAK_SUFFIX = ".live-peak.json"

#: every key of the sidecar's top-level object, in the order the writer puts them
TOP_KEYS = (
    "format",
    "format_version",
    "name",
    "module",  # the module file's name beside the sidecar, or null when XLA ran out of HBM
    "target",  # the target as the user wrote it: "v5p-128", "v5e:16x16"
    "topology",  # libtpu's form: "v5p:4x4x4"
    "chip",  # Podscope's catalog key: "tpu-v5p"
    "slices",
    "devices",  # JAX devices the program was partitioned over
    "device_kind",
    "jax_version",
    "libtpu_version",  # null when libtpu's distribution metadata is missing
    "memory",  # null when XLA ran out of HBM
    "cost",  # compiled.cost_analysis() as XLA returns it (floats), null when XLA ran out of HBM
    "compile_s",
    "oom",  # null, or an object with OOM_KEYS
)

#: keys a sidecar may also carry
OPTIONAL_KEYS = (
    "describes",  # what the program is (model dims, mesh, dtype, ...), as its writer says
    "xla_flags",  # the XLA options the program was compiled with beyond the compiler's defaults: {name: value}
)

#: an XLA option's name as a sidecar's ``xla_flags`` and ``--xla-flag`` take it (XLA's and libtpu's options all
#: begin ``xla_``)
XLA_FLAG_NAME = r"xla_[a-z0-9_]{1,200}"
#: the most options one compile takes
MAX_XLA_FLAGS = 256

#: keys of ``memory``: ``compiled.memory_analysis()`` per device, in bytes
MEMORY_KEYS = (
    "argument_bytes",  # argument_size_in_bytes
    "output_bytes",  # output_size_in_bytes
    "alias_bytes",  # alias_size_in_bytes: outputs that reuse (donated) argument buffers
    "temp_bytes",  # temp_size_in_bytes
    "generated_code_bytes",  # generated_code_size_in_bytes
    "peak_bytes",  # peak_memory_in_bytes
)

#: keys of ``oom``: XLA's message and the sizes in it (bytes; null where the message gives none)
OOM_KEYS = ("message", "required_bytes", "available_bytes")
