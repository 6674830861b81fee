"""ODF's ``Timestamp`` struct (year, 1-based day of year, seconds from midnight, nanoseconds),
written and read inline in a table.

Apart from the encoder and the decoder because both need it and it holds the one format detail
that differs between manifest versions: version 2 wrote the struct at 1-byte alignment.
"""

from __future__ import annotations

import functools
import struct
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from odf_chain.errors import FormatError

if TYPE_CHECKING:  # the writer's: flatbuffers imports numpy (~80 ms); reading needs neither
    import flatbuffers

_TIMESTAMP_SIZE = 16


# Timestamps


def _timestamp_parts(moment: datetime) -> tuple[int, int, int, int]:
    if moment.tzinfo is None:
        raise FormatError(f"timestamps must be timezone-aware (UTC), got naive {moment}")
    utc = moment.astimezone(UTC)
    seconds = utc.hour * 3600 + utc.minute * 60 + utc.second
    return utc.year, utc.timetuple().tm_yday, seconds, utc.microsecond * 1000


def prepend_timestamp(builder: flatbuffers.Builder, moment: datetime, alignment: int) -> int:
    """Write a Timestamp struct inline; ``alignment`` 4 is the current form, 1 the legacy one."""
    year, ordinal, seconds, nanos = _timestamp_parts(moment)
    builder.Prep(alignment, _TIMESTAMP_SIZE)
    # Place* writes without re-aligning each member, so the legacy form stays unaligned.
    builder.head -= _TIMESTAMP_SIZE
    struct.pack_into("<iHHII", builder.Bytes, builder.head, year, ordinal, 0, seconds, nanos)
    return builder.Offset()


_TIMESTAMP = struct.Struct("<iHHII")


@functools.lru_cache(maxsize=1024)
def _day(year: int, ordinal: int) -> datetime:
    """Midnight UTC of day ``ordinal`` of ``year``; cached, since a chain's blocks fall on few
    days (an invalid day raises every time: exceptions are not cached)."""
    try:
        day = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=ordinal - 1)
    except (ValueError, OverflowError):
        raise FormatError(f"invalid timestamp year {year}") from None
    if day.year != year:
        raise FormatError(f"invalid timestamp: day {ordinal} of {year}")
    return day


def read_timestamp(buf: bytes, pos: int) -> datetime:
    year, ordinal, _, seconds, nanos = _TIMESTAMP.unpack_from(buf, pos)
    if not 1 <= ordinal <= 366 or seconds >= 86400 or nanos >= 1_000_000_000:
        raise FormatError(
            f"invalid timestamp (year {year}, day {ordinal}, second {seconds}, ns {nanos})"
        )
    return _day(year, ordinal) + timedelta(seconds=seconds, microseconds=nanos // 1000)
