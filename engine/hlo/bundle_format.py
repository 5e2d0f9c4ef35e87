"""The module bundle's file names and keys: one declaration for the writer and the reader.

A bundle is ``NAME.hlo.txt.gz`` (the compiled module's text) beside ``NAME.xla.json``
(how and for what it was compiled, and XLA's memory and cost analyses), written by
:mod:`profiler.tpu_capture` and read by :mod:`engine.hlo.bundle`.
"""

FORMAT = "podscope-xla-bundle"
FORMAT_VERSION = 1
SIDE_SUFFIX = ".xla.json"
MODULE_SUFFIX = ".hlo.txt.gz"
#: every key of the sidecar JSON (``describes`` and ``generator`` may be added)
TOP_KEYS = (
    "format", "format_version", "name", "module", "target", "topology", "chip", "slices", "devices", "device_kind",
    "jax_version", "libtpu_version", "memory", "cost", "compile_s", "oom",
)  # fmt: skip
#: ``memory``: XLA's memory_analysis() per device, bytes
MEMORY_KEYS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "peak_bytes")
#: ``oom``: XLA's refusal (``message``) and the numbers it states, bytes (null where it states none)
OOM_KEYS = ("message", "required_bytes", "available_bytes")
OPTIONAL_KEYS = ("describes", "generator")
