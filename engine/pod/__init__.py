"""The pod: the chip catalog, torus slices, chip coordinates and hosts, and the device mesh laid onto them."""

from .catalog import DATA_DIR, DEFAULT_CATALOG_PATH, ChipSpec, load_catalog
from .mesh import LAYOUT_ORDER, MESH_AXES, Mesh, MeshAxis, Segment1D, axis_index_of_chips, resolve_mesh, whole_torus_axes
from .topology import AXIS_NAMES, Pod, Slice, build_pod, fault_problems, is_supported_shape, supported_shapes, wraparound_for

__all__ = [
    "ChipSpec",
    "load_catalog",
    "DATA_DIR",
    "DEFAULT_CATALOG_PATH",
    "AXIS_NAMES",
    "Slice",
    "Pod",
    "build_pod",
    "wraparound_for",
    "supported_shapes",
    "is_supported_shape",
    "fault_problems",
    "MESH_AXES",
    "LAYOUT_ORDER",
    "axis_index_of_chips",
    "Segment1D",
    "MeshAxis",
    "Mesh",
    "resolve_mesh",
    "whole_torus_axes",
]
