"""Side-by-side benchmark: the API ceiling, upstream kube-scheduler + coscheduling, and ours.

Run with `make bench` (full) or `make bench-smoke` (a tenth of the sizes); see bench/run.py.
"""
