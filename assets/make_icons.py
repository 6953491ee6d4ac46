#!/usr/bin/env python3
"""Draws the web interface's icons (assets/app/icon.svg, icon-192.png, icon-512.png): a
blue tile with a 3 x 2 grid of pigeonholes, one of them holding a note. Run once after a
change of the design; the files are committed and compiled into the binary. Standard
library only (zlib for PNG)."""

import struct
import zlib
from pathlib import Path

BLUE = (0x2B, 0x5D, 0x8C)
WHITE = (0xFF, 0xFF, 0xFF)
NOTE = (0xF0, 0xA5, 0x00)
HERE = Path(__file__).parent / "app"

# the design on a 48-unit square: (x, y, w, h) boxes
TILE = 48
HOLES = [(8 + c * 11, 12 + r * 12, 10, 11) for r in range(2) for c in range(3)]
FRAME = (6, 10, 36, 28)
NOTE_BOX = (10, 17, 6, 5)


def svg():
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 48 48">',
        f'<rect width="48" height="48" rx="10" fill="#{"%02x%02x%02x" % BLUE}"/>',
        '<rect x="%d" y="%d" width="%d" height="%d" rx="2" fill="#fff"/>' % FRAME,
    ]
    for x, y, w, h in HOLES:
        parts.append(f'<rect x="{x + 1}" y="{y + 1}" width="{w - 1}" height="{h - 2}" fill="#{"%02x%02x%02x" % BLUE}"/>')
    parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#f0a500"/>' % NOTE_BOX)
    parts.append("</svg>\n")
    return "\n".join(parts)


def inside(px, py, box):
    x, y, w, h = box
    return x <= px < x + w and y <= py < y + h


def colour(u, v):
    """The colour at design coordinates (u, v) in [0, 48)."""
    # rounded corners of the tile (radius 10): transparent outside
    r = 10
    cx = min(max(u, r), TILE - r)
    cy = min(max(v, r), TILE - r)
    if (u - cx) ** 2 + (v - cy) ** 2 > r * r:
        return None
    if inside(u, v, NOTE_BOX):
        return NOTE
    if inside(u, v, FRAME):
        for x, y, w, h in HOLES:
            if inside(u, v, (x + 1, y + 1, w - 1, h - 2)):
                return BLUE
        return WHITE
    return BLUE


def png(size):
    rows = []
    for j in range(size):
        row = bytearray([0])
        for i in range(size):
            c = colour((i + 0.5) * TILE / size, (j + 0.5) * TILE / size)
            row += bytes(c + (255,)) if c else b"\0\0\0\0"
        rows.append(bytes(row))
    raw = zlib.compress(b"".join(rows), 9)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


if __name__ == "__main__":
    (HERE / "icon.svg").write_text(svg())
    for size in (192, 512):
        (HERE / f"icon-{size}.png").write_bytes(png(size))
