"""Sizes as memtrace writes and reads them (base/units.h is the C++ side)."""

import re

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3,
          "t": 1000 ** 4, "tb": 1000 ** 4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(limit):
    """Bytes from 1024, "16 MiB", "2GiB", "1.5 GB"; None for anything else."""
    if isinstance(limit, int) and limit >= 0:
        return limit
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(limit))
    if not m or m.group(2).lower() not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n):
    """Three figures, binary units: "512 B", "8.00 MiB", "20.0 MiB", "256 KiB"."""
    if n < 1024:
        return "%d B" % n
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return ("%.2f %s" if n < 10 else "%.1f %s" if n < 100 else "%.0f %s") % (n, unit)
