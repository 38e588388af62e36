#!/usr/bin/env python3
"""How much of a screenshot is drawn, and in which colours (plain python3).

  png_ink.py drawn PNG        the share of pixels that are not near white;
                              exit 0 above 1 % (charts with axes, lines and
                              labels), 1 at or below (a blank or text-only page)
  png_ink.py count PNG RRGGBB pixels of that colour (within 40 per channel)
  png_ink.py marks PNG RRGGBB vertical marks of that colour: runs of adjacent
                              columns where it spans at least half as far as
                              in the column where it spans furthest

Decodes the PNG (8-bit RGB or RGBA, as Chromium writes it) itself.
"""
import struct
import sys
import zlib


def rows(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    bpp = 3 if colour == 2 else 4
    raw, stride, prev = zlib.decompress(idat), width * bpp, bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1: line[i] = (line[i] + a) & 255
            elif kind == 2: line[i] = (line[i] + b) & 255
            elif kind == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        yield width, bpp, [tuple(line[x:x + 3]) for x in range(0, width * bpp, bpp)]
        prev = line


def near(pixel, rgb):
    return all(abs(p - q) <= 40 for p, q in zip(pixel, rgb))


def main(what, path, hex_colour=None):
    if what == "drawn":
        inked = total = 0
        for width, _, pixels in rows(path):
            total += width
            inked += sum(1 for p in pixels if min(p) < 200)
        fraction = inked / max(total, 1)
        print(f"{path}: {total} pixels, {100 * fraction:.2f}% drawn")
        return 0 if fraction > 0.01 else 1  # a blank page has none; text alone well under 1 %
    rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (0, 2, 4))
    per_column, count = None, 0
    for width, _, pixels in rows(path):
        per_column = per_column or [0] * width
        for x, p in enumerate(pixels):
            if near(p, rgb):
                per_column[x] += 1
                count += 1
    if what == "count":
        print(count)
        return 0
    tall = [n > 0 and n >= max(per_column) / 2 for n in per_column]
    print(sum(1 for x, t in enumerate(tall) if t and (x == 0 or not tall[x - 1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
