"""Podscope profiler: DuckDB storage, the query layer, export/import and the CLI."""

from . import api, queries
from .store import Database, DatabaseBusyError, delete_run, resolve_db_path, resolve_run, write_run, write_runs
from .summary import SUMMARY_KEYS, build_summary

__all__ = [
    "Database",
    "DatabaseBusyError",
    "SUMMARY_KEYS",
    "api",
    "build_summary",
    "delete_run",
    "queries",
    "resolve_db_path",
    "resolve_run",
    "write_run",
    "write_runs",
]
