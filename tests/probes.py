"""Memory probes for tests: how far a fresh process's own peak resident memory rises while it runs
a script. The peak is read from /proc/self/status (VmHWM), the high-water mark of the process's
own memory since it started: `ru_maxrss` would not do, since Linux carries the parent's resident
size at fork into it, so a child of a test that holds 800 MB would report no rise at all."""

from __future__ import annotations

import subprocess
import sys

PEAK = ("def _peak_kb():\n"
        "    with open('/proc/self/status') as status:\n"
        "        return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))\n")


def peak_rss_rise_mb(script: str, *args: str, timeout: float = 120) -> tuple[float, str]:
    """Run `script` in a fresh Python process (with `args` as sys.argv[1:]); how far its peak
    resident memory rose while the script ran, in MB, and what it wrote to stderr."""
    probe = PEAK + "_before = _peak_kb()\n" + script + "\nprint((_peak_kb() - _before) / 1024)\n"
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip().splitlines()[-1]), done.stderr.strip()
