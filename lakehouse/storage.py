"""Files next to the warehouse, on whatever filesystem it lives: local paths, ``file:``,
``s3a:`` (pyarrow's ``s3:``), ``hdfs:``, ``gs:``, ``abfs[s]:``. For the small files keyshift
keeps beside its Delta tables (the engines' changelog, a run's staged bookkeeping), which
executors and a driver on any host must both reach."""

from __future__ import annotations

import os
import re
import uuid


def filesystem(uri: str):
    """``(pyarrow FileSystem, path)`` for a storage URI; ``s3a:``/``s3n:`` are Hadoop's names
    for what pyarrow calls ``s3:``."""
    from pyarrow import fs

    if re.match(r"^s3[an]://", uri):
        uri = "s3://" + uri.split("://", 1)[1]
    if "://" not in uri and not uri.startswith("file:"):
        return fs.LocalFileSystem(), os.path.abspath(uri)
    return fs.FileSystem.from_uri(uri)


def write_atomically(uri: str, body: bytes) -> None:
    """Write ``body`` to ``uri`` through a temporary name and a rename: a reader sees the old
    file or the new one, never half of one."""
    fs, path = filesystem(uri)
    folder = path.rsplit("/", 1)[0]
    fs.create_dir(folder, recursive=True)
    tmp = f"{folder}/.{path.rsplit('/', 1)[1]}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(body)
    fs.move(tmp, path)


def read_if_exists(uri: str) -> bytes | None:
    from pyarrow.fs import FileType

    fs, path = filesystem(uri)
    if fs.get_file_info(path).type != FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return f.read()


def delete_if_exists(uri: str) -> None:
    from pyarrow.fs import FileType

    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == FileType.File:
        fs.delete_file(path)
