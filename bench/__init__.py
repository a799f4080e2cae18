"""Benchmarks: scripts that print their figures (`python -m bench.<name>`); see docs/benchmarks.md."""
