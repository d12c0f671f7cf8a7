"""Arrow columns as numpy arrays without pandas.

pyarrow's ``to_numpy`` (any type, zero-copy or not) imports pandas when it is installed, about
0.2 s of a 0.5 s cold ``rscale query``; these read the Arrow buffers directly. Used on the query
path (hardness tables); the import-guard test checks that pandas stays unloaded.
"""

from __future__ import annotations

import numpy as np

_FLOAT_NAMES = {"halffloat": np.float16, "float": np.float32, "double": np.float64}


def _dtype(arrow_type) -> np.dtype:
    import pyarrow as pa

    if not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
        raise TypeError(f"expected numbers, got {arrow_type}")
    name = str(arrow_type)
    return np.dtype(_FLOAT_NAMES.get(name, name))


def numeric(column, dtype=None) -> np.ndarray:
    """A fixed-width numeric column (Array or ChunkedArray, no nulls) as a numpy array (a copy).

    >>> import pyarrow as pa
    >>> numeric(pa.chunked_array([[1, 2], [3]])).tolist()
    [1, 2, 3]
    """
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    parts = []
    for chunk in chunks:
        if chunk.null_count:
            raise TypeError("null values where numbers are expected")
        dt = _dtype(chunk.type)
        buf = chunk.buffers()[1]
        parts.append(np.frombuffer(buf, dtype=dt, count=len(chunk), offset=chunk.offset * dt.itemsize)
                     if len(chunk) else np.zeros(0, dt))
    if len(parts) == 1:                    # a view of the Arrow buffer: one copy, converting on the way
        return parts[0].astype(dtype if dtype is not None else parts[0].dtype)
    out = np.concatenate(parts) if parts else np.zeros(0, _dtype(column.type))    # already a copy
    return out.astype(dtype, copy=False) if dtype is not None else out


def list_values(column):
    """The flat values of a fixed-size list Array (no null lists), in row order, without
    ``flatten()``: that imports pyarrow.compute (~70-100 ms of a cold ``rscale query``)."""
    if column.null_count:
        raise TypeError("null lists where fixed-size lists of numbers are expected")
    size = column.type.list_size
    return column.values.slice(column.offset * size, len(column) * size)


def list_flat(column):
    """(flat values, offsets) of a variable-size list column (Array or ChunkedArray, no null
    lists): the values as a ChunkedArray of zero-copy slices of each chunk's values buffer, in row
    order, and the (n + 1,) int64 row offsets into them. Neither ``combine_chunks()`` (it copies
    even a single chunk) nor ``flatten()`` (pyarrow.compute) is needed.

    >>> import pyarrow as pa
    >>> values, off = list_flat(pa.chunked_array([[[1, 2], []], [[3]]]))
    >>> values.to_pylist(), off.tolist()
    ([1, 2, 3], [0, 2, 2, 3])
    """
    import pyarrow as pa

    chunks = column.chunks if hasattr(column, "chunks") else [column]
    if column.null_count:
        raise TypeError("null lists where lists are expected")
    parts, offsets, start = [], [np.zeros(1, np.int64)], 0
    for chunk in chunks:
        off = numeric(chunk.offsets, np.int64)          # (len + 1,), absolute in chunk.values
        parts.append(chunk.values.slice(int(off[0]), int(off[-1] - off[0])))
        offsets.append(off[1:] - off[0] + start)
        start += int(off[-1] - off[0])
    return pa.chunked_array(parts, type=column.type.value_type), np.concatenate(offsets)


def strings(column) -> np.ndarray:
    """A string column (plain or dictionary-encoded chunks) as an object array of str."""
    import pyarrow as pa

    parts = []
    for chunk in column.chunks if hasattr(column, "chunks") else [column]:
        if pa.types.is_dictionary(chunk.type):
            values = np.empty(len(chunk.dictionary), dtype=object)
            values[:] = chunk.dictionary.to_pylist()
            parts.append(values[numeric(chunk.indices, np.int64)])
        else:
            values = np.empty(len(chunk), dtype=object)
            values[:] = chunk.to_pylist()
            parts.append(values)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=object)


__all__ = ["list_flat", "list_values", "numeric", "strings"]
