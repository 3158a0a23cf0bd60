"""Types of the public API: what times, sizes, arrival times, index arrays and emit options may be
(``synth.registry.BuildParam``, the type of a build parameter, lives with the algorithm table since it
names the Topology class).

Plain aliases evaluated at run time, so that ``typing.get_type_hints`` resolves every public signature
(tests/test_public_api.py checks that none of them holds ``typing.Any``). A leaf module (numpy and the
standard library only), so that every other module may use it. It is not named ``types`` so that it
can never stand in for the standard library's module of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import numpy as np

Seconds: TypeAlias = float | str
"""A time: seconds, or text with a unit such as "5ms" (units.parse_time)."""

Bytes: TypeAlias = int | float | str
"""A size: bytes, or text with a unit such as "1GiB" (units.parse_size)."""

Arrivals: TypeAlias = Mapping[int, Seconds] | Sequence[Seconds] | np.ndarray | None
"""When each rank arrives: {rank: time} (missing ranks at 0), one time per rank, or None (all at 0)."""

ClassTimes: TypeAlias = float | str | Mapping[str, float | str] | None
"""A time for every link class ("3us", seconds), per class ({"nvlink": "1us", "net": "3us"} or
"nvlink=1us,net=3us"), or None (the topology's defaults)."""

ClassRates: TypeAlias = float | str | Mapping[str, float | str] | None
"""A bandwidth for every link class ("450GB/s", bytes/s), per class ({"nvlink": 450e9} or
"nvlink=450GB/s,net=50GB/s"), or None (the topology's defaults)."""

Column: TypeAlias = Sequence[int] | np.ndarray
"""One integer per transfer (or per link)."""

Ints: TypeAlias = int | Column
"""A column, or one integer for all (broadcast)."""

EmitOption: TypeAlias = str | int | bool | Sequence[str] | Mapping[str, int] | None
"""One keyword option of an output format's render function (``emit(source, format, **options)``)."""

Emitted: TypeAlias = str | dict[str, str | bytes]
"""What ``emit`` returns: the text of a one-file format, or {relative path: content} for a folder."""
