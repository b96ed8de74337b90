# SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
# What kt-httpcall.py and kt-grpccall.py share: argparse with one-line
# errors, bounded numbers, atomic writes of their summaries. Each script
# imports it from its own directory (sys.path[0]).

import argparse
import math
import os
import sys


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2)."""

    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def bounded_float(lo, hi, lo_open=True):
    def conv(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: %r" % s)
        if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or v > hi:
            raise argparse.ArgumentTypeError(
                "%s out of range %s%g, %g]" % (s, "(" if lo_open else "[", lo, hi))
        return v
    return conv


def bounded_int(lo, hi):
    def conv(s):
        try:
            v = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError("not an integer: %r" % s)
        if v < lo or v > hi:
            raise argparse.ArgumentTypeError("%s out of range [%d, %d]" % (s, lo, hi))
        return v
    return conv


def finite_float(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % s)
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError("not a finite number: %r" % s)
    return v


def write_atomic(path, text):
    """Write text to path via path.tmp + rename (readers never see a partial file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
